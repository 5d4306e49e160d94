//! Nature and weather: clouds, trees and palms, light rays, grass, flowers,
//! rain, snow, falling leaves and flames.

use tiny_skia::{PathBuilder, Rect};

use super::art::Art;
use super::color::{Rgb, WHITE};
use super::rng::{cos, sin, PI, TAU};
use super::shapes::{circle, linear, oval, place, polygon, rect};
use super::vocab::Subj;

impl Art {
    pub(super) fn clouds(&mut self) {
        let n = self.rng.count(2.0, 5.0, self.density).max(1);
        let limit = self.horizon.min(self.h);
        for _ in 0..n {
            let cx = self.rng.range(0.0, 1.0) * self.w;
            let cy = self.rng.range(0.12, 0.55) * limit;
            let size = self.s * self.rng.range(0.06, 0.12);
            let tint = Rgb::hex(0xffffff).mix(self.pal.sky_at(cy / self.h), 0.3);
            let k = self.rng.count(5.0, 8.0, 1.0);
            let mut blobs = Vec::with_capacity(k);
            for i in 0..k {
                let t = i as f32 / (k - 1).max(1) as f32 - 0.5;
                let bx = cx + t * size * 4.0;
                let r = size * (1.0 - t.abs()) * self.rng.range(0.7, 1.2) + size * 0.3;
                let by = cy - r * 0.4 + self.rng.range(-0.1, 0.1) * size;
                blobs.push((bx, by, r));
            }
            for (scale, alpha) in [(1.15, 0.12), (1.0, 0.85)] {
                let mut pb = PathBuilder::new();
                for &(bx, by, r) in &blobs {
                    if let Some(rc) = Rect::from_xywh(
                        bx - r * 1.3 * scale,
                        by - r * scale,
                        2.6 * r * scale,
                        2.0 * r * scale,
                    ) {
                        pb.push_oval(rc);
                    }
                }
                self.fill(pb.finish(), tint, alpha);
            }
        }
    }

    pub(super) fn trees(&mut self, kind: Subj) {
        let layers = if self.m.minimal { 1 } else { 3 };
        let tall = if self.m.tall { 1.7 } else { 1.0 };
        let ground = self.horizon.min(self.h * 0.92);
        let fog = self.pal.sky_at(0.9);
        if kind != Subj::Palms && !self.pal.dark_bg && !self.m.minimal && self.rng.chance(0.7) {
            self.light_rays();
        }
        if layers > 1 && kind != Subj::Palms {
            // A distant, misty tree line along the horizon.
            let c = self.pal.acc(0).mix(fog, 0.7);
            let mut pb = PathBuilder::new();
            pb.move_to(0.0, self.h);
            let mut x = 0.0;
            let step = (self.s * 0.018).max(1.0);
            pb.line_to(0.0, ground);
            while x < self.w {
                let th = self.h * self.rng.range(0.03, 0.08);
                pb.line_to(x + step, ground - th);
                x += step * 2.0;
                pb.line_to(x, ground - th * self.rng.range(0.2, 0.5));
            }
            pb.line_to(self.w, self.h);
            pb.close();
            self.fill(pb.finish(), c, 1.0);
        }
        for layer in 0..layers {
            let depth = (layer + 1) as f32 / layers as f32; // far .. near
            let n = self
                .rng
                .count(6.0, 10.0, self.density * (2.2 - depth * 1.4))
                .max(1);
            let base_y = ground + (self.h - ground) * (depth - 1.0 / layers as f32) * 0.8;
            let size = 0.35 + 0.65 * depth;
            for _ in 0..n {
                let x = self.rng.range(-0.05, 1.05) * self.w;
                let th = self.h * self.rng.range(0.2, 0.32) * tall * size;
                let crown = self.pal.acc(self.rng.below(4));
                let night = if self.pal.dark_bg { 0.45 } else { 0.0 };
                let crown = crown
                    .mix(fog, 0.6 * (1.0 - depth))
                    .darken(0.15 * depth + night);
                let trunk = Rgb::hex(0x4a3020)
                    .mix(crown, 0.3)
                    .mix(fog, 0.55 * (1.0 - depth));
                let y = base_y + self.rng.range(0.0, 0.04) * self.h * depth;
                if kind == Subj::Palms {
                    self.palm(x, y, th, crown, trunk);
                    continue;
                }
                let conical = match kind {
                    Subj::Pines => true,
                    _ => self.rng.chance(0.35),
                };
                let tw = th * if self.m.tall { 0.035 } else { 0.05 };
                self.fill(rect(x - tw / 2.0, y - th * 0.6, tw, th * 0.6), trunk, 1.0);
                if conical {
                    let tiers = 3;
                    for k in 0..tiers {
                        let f = k as f32 / tiers as f32;
                        let wdt = th * (0.2 - f * 0.05);
                        let yb = y - th * (0.2 + f * 0.25);
                        let yt = yb - th * 0.45;
                        self.fill(
                            polygon(&[(x - wdt, yb), (x + wdt, yb), (x, yt)]),
                            crown.lighten(f * 0.08),
                            1.0,
                        );
                    }
                } else {
                    let cr = th * 0.22;
                    let cy = y - th * 0.75;
                    let mut pb = PathBuilder::new();
                    for _ in 0..6 {
                        let ox = self.rng.range(-0.6, 0.6) * cr;
                        let oy = self.rng.range(-0.9, 0.5) * cr;
                        pb.push_circle(x + ox, cy + oy, cr * self.rng.range(0.5, 0.8));
                    }
                    self.fill(pb.finish(), crown, 1.0);
                    self.fill(
                        circle(x - cr * 0.25, cy - cr * 0.45, cr * 0.4),
                        crown.lighten(0.18),
                        0.45,
                    );
                }
            }
            // Mist between layers.
            if layer + 1 < layers {
                let top = base_y - self.h * 0.12;
                let sh = linear(
                    (0.0, top),
                    (0.0, base_y + self.h * 0.05),
                    &[(0.0, fog, 0.0), (1.0, fog, 0.35)],
                );
                self.fill_shader(rect(0.0, top, self.w, self.h - top), sh, fog);
            }
        }
    }

    /// Soft diagonal light beams.
    pub(super) fn light_rays(&mut self) {
        let n = self.rng.count(3.0, 6.0, 1.0);
        let sx = self.w * self.rng.range(0.1, 0.9);
        let c = Rgb::hex(0xfffbe0);
        for _ in 0..n {
            let x0 = sx + self.rng.range(-0.1, 0.1) * self.w;
            let spread = self.w * self.rng.range(0.04, 0.1);
            let dx = self.w * self.rng.range(-0.3, 0.3);
            let pts = [
                (x0 - spread * 0.2, 0.0),
                (x0 + spread * 0.2, 0.0),
                (x0 + dx + spread, self.h),
                (x0 + dx - spread, self.h),
            ];
            let sh = linear((0.0, 0.0), (0.0, self.h), &[(0.0, c, 0.22), (1.0, c, 0.0)]);
            self.fill_shader(polygon(&pts), sh, c);
        }
    }

    pub(super) fn palm(&mut self, x: f32, y: f32, th: f32, crown: Rgb, trunk: Rgb) {
        let lean = self.rng.range(-0.25, 0.25) * th;
        let mut pb = PathBuilder::new();
        pb.move_to(x, y);
        pb.quad_to(x + lean * 0.2, y - th * 0.5, x + lean, y - th);
        self.stroke(pb.finish(), trunk, 1.0, th * 0.05);
        let (tx, ty) = (x + lean, y - th);
        for k in 0..7 {
            let a = -PI + k as f32 * PI / 6.0 + self.rng.range(-0.2, 0.2);
            let len = th * self.rng.range(0.35, 0.5);
            let mut pb = PathBuilder::new();
            pb.move_to(tx, ty);
            pb.quad_to(
                tx + cos(a) * len * 0.6,
                ty + sin(a) * len * 0.6 - len * 0.25,
                tx + cos(a) * len,
                ty + sin(a) * len + len * 0.2,
            );
            self.stroke(pb.finish(), crown, 1.0, th * 0.04);
        }
    }

    pub(super) fn grass(&mut self) {
        let base = self.h;
        let top = if self.horizon < self.h {
            self.horizon
        } else {
            self.h * 0.75
        };
        let g = self.pal.acc(0).mix(Rgb::hex(0x3f8f3a), 0.5);
        for (shade, alpha) in [(0.3, 1.0), (0.0, 0.9), (-0.15, 0.9)] {
            let n = self.rng.count(80.0, 140.0, self.density);
            let mut pb = PathBuilder::new();
            for _ in 0..n {
                let x = self.rng.range(0.0, self.w);
                let y = base + self.s * 0.01;
                let len = (base - top) * self.rng.range(0.15, 0.5);
                let bend = self.rng.range(-0.4, 0.4) * len;
                pb.move_to(x, y);
                pb.quad_to(x, y - len * 0.6, x + bend, y - len);
            }
            let c = if shade > 0.0 {
                g.darken(shade)
            } else {
                g.lighten(-shade)
            };
            self.stroke(pb.finish(), c, alpha, (self.s * 0.004).max(0.5));
        }
    }

    pub(super) fn flower_colour(&mut self) -> Rgb {
        for _ in 0..4 {
            let c = self.any_accent();
            let h = c.hue();
            if !(0.18..0.48).contains(&h) && c.sat() > 0.2 {
                return c;
            }
        }
        [
            Rgb::hex(0xf06292),
            Rgb::hex(0xffd54f),
            Rgb::hex(0xba68c8),
            Rgb::hex(0xff8a65),
        ][self.rng.below(4)]
    }

    pub(super) fn flowers(&mut self) {
        let land = self.horizon < self.h;
        let n = if land {
            self.rng.count(6.0, 14.0, self.density)
        } else {
            self.rng.count(2.0, 5.0, self.density)
        }
        .max(1);
        let stem = self.pal.acc(0).mix(Rgb::hex(0x3f8f3a), 0.7).darken(0.2);
        for i in 0..n {
            let (x, y, r) = if land {
                let t = self.rng.f();
                let y = self.horizon + (self.h - self.horizon) * (0.2 + 0.75 * t);
                (self.rng.range(0.0, self.w), y, self.s * (0.015 + 0.05 * t))
            } else if i == 0 {
                (
                    self.w * self.rng.range(0.35, 0.65),
                    self.h * self.rng.range(0.3, 0.45),
                    self.s * self.rng.range(0.12, 0.18),
                )
            } else {
                (
                    self.rng.range(0.05, 0.95) * self.w,
                    self.rng.range(0.2, 0.8) * self.h,
                    self.s * self.rng.range(0.04, 0.09),
                )
            };
            let mut pb = PathBuilder::new();
            pb.move_to(x, y);
            pb.quad_to(
                x + self.rng.range(-1.0, 1.0) * r,
                (y + self.h) / 2.0,
                x,
                self.h + 2.0,
            );
            self.stroke(pb.finish(), stem, 1.0, (r * 0.12).max(0.6));
            let petal = self.flower_colour();
            let k = 5 + self.rng.below(4);
            let rot = self.rng.range(0.0, TAU);
            for j in 0..k {
                let a = rot + j as f32 * TAU / k as f32;
                self.fill_t(
                    oval(r * 0.55, 0.0, r * 0.55, r * 0.28),
                    petal.lighten(0.1 * (j % 2) as f32),
                    0.92,
                    place(a, x, y),
                );
            }
            self.fill(
                circle(x, y, r * 0.28),
                Rgb::hex(0xffc83a).mix(petal, 0.2).darken(0.1),
                1.0,
            );
        }
    }

    pub(super) fn rain(&mut self) {
        let n = self.rng.count(150.0, 280.0, self.density.max(0.5));
        let slant = self.rng.range(-0.25, 0.25);
        let mut pb = PathBuilder::new();
        for _ in 0..n {
            let x = self.rng.range(-0.1, 1.1) * self.w;
            let y = self.rng.range(0.0, 1.0) * self.h;
            let len = self.s * self.rng.range(0.02, 0.06);
            pb.move_to(x, y);
            pb.line_to(x + slant * len, y + len);
        }
        let c = Rgb::hex(0xd8e6f5);
        self.stroke(pb.finish(), c, 0.45, (self.s * 0.0025).max(0.5));
    }

    pub(super) fn snow(&mut self) {
        let unit = (self.s / 1024.0).max(0.2);
        for (count, rmin, rmax, a) in [(220.0, 1.0, 2.5, 0.7), (60.0, 2.5, 5.0, 0.85)] {
            let n = self.rng.count(count * 0.7, count, self.density);
            let mut pb = PathBuilder::new();
            for _ in 0..n {
                let (x, y) = self.anywhere();
                pb.push_circle(x, y, unit * self.rng.range(rmin, rmax));
            }
            self.fill(pb.finish(), WHITE, a);
        }
    }

    pub(super) fn leaves(&mut self) {
        let n = self.rng.count(12.0, 30.0, self.density);
        for _ in 0..n {
            let (x, y) = self.anywhere();
            let r = self.s * self.rng.range(0.012, 0.028);
            let c = self.any_accent();
            let a = self.rng.range(0.0, TAU);
            self.fill_t(oval(0.0, 0.0, r, r * 0.45), c, 0.9, place(a, x, y));
        }
    }

    pub(super) fn flames(&mut self) {
        let base = if self.horizon < self.h {
            self.horizon + (self.h - self.horizon) * 0.6
        } else {
            self.h * 0.95
        };
        let cx = self.w * self.rng.range(0.35, 0.65);
        let width = self.s * self.rng.range(0.25, 0.45);
        let hot = Rgb::hex(0xfff2a0);
        let mid = Rgb::hex(0xff8a10).mix(self.pal.acc(1), 0.2);
        let outer = Rgb::hex(0xe02810).mix(self.pal.acc(0), 0.2);
        self.glow(cx, base - width * 0.4, width * 1.6, mid, 0.45);
        for (layer, c, scale) in [(0, outer, 1.0), (1, mid, 0.72), (2, hot, 0.45)] {
            let n = 3 + self.rng.below(3);
            for _ in 0..n {
                let fx = cx + self.rng.range(-0.5, 0.5) * width * scale;
                let fw = width * scale * self.rng.range(0.25, 0.45);
                let fh = width * scale * self.rng.range(1.2, 2.2);
                let sway = self.rng.range(-0.4, 0.4) * fw;
                let mut pb = PathBuilder::new();
                pb.move_to(fx - fw, base);
                pb.cubic_to(
                    fx - fw * 1.1,
                    base - fh * 0.5,
                    fx + sway - fw * 0.2,
                    base - fh * 0.7,
                    fx + sway,
                    base - fh,
                );
                pb.cubic_to(
                    fx + sway + fw * 0.3,
                    base - fh * 0.6,
                    fx + fw * 1.1,
                    base - fh * 0.45,
                    fx + fw,
                    base,
                );
                pb.close();
                let sh = linear(
                    (0.0, base),
                    (0.0, base - fh),
                    &[(0.0, c.lighten(0.2), 0.95), (0.7, c, 0.85), (1.0, c, 0.2)],
                );
                self.fill_shader(pb.finish(), sh, c);
            }
            let _ = layer;
        }
        // Embers.
        let mut pb = PathBuilder::new();
        for _ in 0..self.rng.count(20.0, 50.0, self.density) {
            let x = cx + self.rng.range(-1.0, 1.0) * width;
            let y = base - self.rng.range(0.2, 3.0) * width;
            pb.push_circle(x, y, self.s * self.rng.range(0.002, 0.005));
        }
        self.fill(pb.finish(), hot, 0.8);
    }
}
