//! Built things: city skylines, houses, boats, a window frame and scattered lights.

use tiny_skia::{FillRule, Paint, PathBuilder, Rect, Transform};

use super::art::Art;
use super::color::Rgb;
use super::shapes::{circle, polygon, rect};

impl Art {
    pub(super) fn city(&mut self) {
        let neon = self.m.neon || self.pal.dark_bg;
        let tall = if self.m.tall { 1.35 } else { 1.0 };
        let sil = self.pal.darkest().darken(0.5);
        for layer in 0..2 {
            let near = layer == 1;
            let col = if near {
                sil
            } else {
                sil.mix(self.pal.sky_at(0.8), 0.45)
            };
            let mut x = -self.rng.range(0.0, 0.05) * self.w;
            let mut windows = PathBuilder::new();
            let mut neon_edges = PathBuilder::new();
            let mut blocks = PathBuilder::new();
            while x < self.w {
                let bw = self.w * self.rng.range(0.04, 0.1) * if near { 1.2 } else { 0.8 };
                let hmax = if near { 0.42 } else { 0.3 };
                let bh = self.h * self.rng.range(0.08, hmax) * tall;
                let top = self.horizon - bh + if near { self.h * 0.04 } else { 0.0 };
                if let Some(r) = Rect::from_xywh(x, top, bw, self.h - top) {
                    blocks.push_rect(r);
                }
                if self.rng.chance(0.3) {
                    let aw = bw * 0.08;
                    if let Some(r) = Rect::from_xywh(x + bw * 0.45, top - bh * 0.15, aw, bh * 0.15)
                    {
                        blocks.push_rect(r);
                    }
                }
                if near && neon && self.rng.chance(0.5) {
                    neon_edges.move_to(x, top);
                    neon_edges.line_to(x + bw, top);
                }
                // Lit windows.
                let cell = (self.s * 0.018).max(2.0);
                let cols = ((bw / cell) as usize).saturating_sub(1).min(24);
                let rows = ((bh / cell) as usize).saturating_sub(1).min(60);
                let p_lit = if self.pal.dark_bg { 0.35 } else { 0.15 };
                for cy in 0..rows {
                    for cx in 0..cols {
                        if self.rng.chance(p_lit) {
                            let wx = x + cell * (cx as f32 + 0.7);
                            let wy = top + cell * (cy as f32 + 0.8);
                            if let Some(r) = Rect::from_xywh(wx, wy, cell * 0.5, cell * 0.55) {
                                windows.push_rect(r);
                            }
                        }
                    }
                }
                x += bw + self.w * self.rng.range(0.0, 0.015);
            }
            self.fill(blocks.finish(), col, 1.0);
            let wcol = if neon {
                self.pal.acc(layer + 1).lighten(0.3)
            } else {
                Rgb::hex(0xffd98a)
            };
            self.fill(windows.finish(), wcol, if near { 0.9 } else { 0.5 });
            if neon {
                let c = self.pal.acc(0).lighten(0.2);
                let path = neon_edges.finish();
                if let Some(p) = &path {
                    self.stroke(Some(p.clone()), c, 0.25, self.s * 0.012);
                }
                self.stroke(path, c, 0.9, self.s * 0.003);
            }
        }
    }

    pub(super) fn houses(&mut self) {
        let n = if self.m.minimal {
            1
        } else {
            1 + self.rng.below(4)
        };
        let base = if self.horizon < self.h {
            self.horizon + (self.h - self.horizon) * 0.3
        } else {
            self.h * 0.85
        };
        for _ in 0..n {
            let bw = self.s * self.rng.range(0.12, 0.22);
            let bh = bw * self.rng.range(0.6, 0.9);
            let x = self.w * self.rng.range(0.1, 0.9) - bw / 2.0;
            let y = base + self.rng.range(-0.03, 0.05) * self.h;
            let wall = self.pal.acc(self.rng.below(3)).mix(Rgb::hex(0xe8dcc8), 0.4);
            let wall = if self.pal.dark_bg {
                wall.darken(0.6)
            } else {
                wall
            };
            let roof = self.pal.darkest().mix(Rgb::hex(0x7a2a20), 0.4);
            self.fill(rect(x, y - bh, bw, bh), wall, 1.0);
            self.fill(
                polygon(&[
                    (x - bw * 0.1, y - bh),
                    (x + bw * 0.5, y - bh - bw * 0.45),
                    (x + bw * 1.1, y - bh),
                ]),
                roof,
                1.0,
            );
            let lit = if self.pal.dark_bg {
                Rgb::hex(0xffd070)
            } else {
                Rgb::hex(0x6a8aa8)
            };
            self.fill(
                rect(x + bw * 0.4, y - bh * 0.55, bw * 0.2, bh * 0.55),
                roof.darken(0.3),
                1.0,
            );
            for wx in [0.12, 0.7] {
                self.fill(
                    rect(x + bw * wx, y - bh * 0.75, bw * 0.18, bh * 0.22),
                    lit,
                    1.0,
                );
            }
            if self.pal.dark_bg {
                self.glow(x + bw * 0.5, y - bh * 0.6, bw * 0.8, lit, 0.2);
            }
        }
    }

    pub(super) fn boat(&mut self) {
        let y = self.horizon + (self.h - self.horizon) * self.rng.range(0.15, 0.4);
        let x = self.w * self.rng.range(0.2, 0.8);
        let u = self.s * self.rng.range(0.06, 0.1);
        let dark = self.pal.darkest().darken(0.5);
        self.fill(
            polygon(&[
                (x - u * 1.2, y - u * 0.3),
                (x + u * 1.2, y - u * 0.3),
                (x + u * 0.8, y),
                (x - u * 0.8, y),
            ]),
            dark,
            1.0,
        );
        self.fill(
            rect(x - u * 0.03, y - u * 2.2, u * 0.06, u * 1.9),
            dark,
            1.0,
        );
        let sail = Rgb::hex(0xf8f4ea).mix(self.pal.acc(0), 0.15);
        self.fill(
            polygon(&[
                (x + u * 0.08, y - u * 2.1),
                (x + u * 0.08, y - u * 0.45),
                (x + u * 1.0, y - u * 0.45),
            ]),
            sail,
            1.0,
        );
        self.fill(
            polygon(&[
                (x - u * 0.08, y - u * 1.8),
                (x - u * 0.08, y - u * 0.45),
                (x - u * 0.7, y - u * 0.45),
            ]),
            sail.darken(0.12),
            1.0,
        );
    }

    pub(super) fn window(&mut self) {
        let (w, h) = (self.w, self.h);
        let wall = self
            .pal
            .acc(2)
            .mix(Rgb::hex(0x6a5040), 0.5)
            .darken(if self.pal.dark_bg { 0.6 } else { 0.35 });
        let mx = w * self.rng.range(0.1, 0.18);
        let top = h * self.rng.range(0.06, 0.12);
        let bottom = h * self.rng.range(0.7, 0.78);
        let mut pb = PathBuilder::new();
        pb.push_rect(
            Rect::from_xywh(0.0, 0.0, w, h)
                .unwrap_or(Rect::from_xywh(0.0, 0.0, 1.0, 1.0).expect("unit rect")),
        );
        if let Some(r) = Rect::from_xywh(mx, top, w - 2.0 * mx, bottom - top) {
            pb.push_rect(r);
        }
        if let Some(p) = pb.finish() {
            let mut paint = Paint::default();
            paint.set_color(wall.color(1.0));
            paint.anti_alias = true;
            self.pm
                .fill_path(&p, &paint, FillRule::EvenOdd, Transform::identity(), None);
        }
        let frame = wall.lighten(0.25);
        let fw = self.s * 0.02;
        let mut pb = PathBuilder::new();
        if let Some(r) = Rect::from_xywh(mx, top, w - 2.0 * mx, bottom - top) {
            pb.push_rect(r);
        }
        pb.move_to(w / 2.0, top);
        pb.line_to(w / 2.0, bottom);
        pb.move_to(mx, (top + bottom) / 2.0);
        pb.line_to(w - mx, (top + bottom) / 2.0);
        self.stroke(pb.finish(), frame, 1.0, fw);
        // The sill.
        self.fill(
            rect(mx * 0.6, bottom, w - 1.2 * mx, self.s * 0.035),
            frame.lighten(0.15),
            1.0,
        );
        self.fill(
            rect(
                mx * 0.6,
                bottom + self.s * 0.035,
                w - 1.2 * mx,
                self.s * 0.012,
            ),
            wall.darken(0.4),
            1.0,
        );
        self.horizon = bottom;
    }

    pub(super) fn lights(&mut self) {
        let n = self.rng.count(12.0, 30.0, self.density);
        for _ in 0..n {
            let (x, y) = self.anywhere();
            let r = self.s * self.rng.range(0.005, 0.03);
            let c = if self.pal.dark_bg {
                self.pal.acc(self.rng.below(3)).lighten(0.3)
            } else {
                Rgb::hex(0xfff0c0)
            };
            self.glow(x, y, r * 3.0, c, 0.35);
            self.fill(circle(x, y, r * 0.5), c.lighten(0.5), 0.8);
        }
    }
}
