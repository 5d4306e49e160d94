//! Sky things: sun, moon, stars, planets and nebulae.

use tiny_skia::{PathBuilder, Rect};

use super::art::Art;
use super::color::Rgb;
use super::rng::{cos, sin, PI, TAU};
use super::shapes::{circle, place, polygon, radial, rect};

impl Art {
    pub(super) fn sun(&mut self) {
        let r = self.s * self.rng.range(0.08, 0.15) * if self.m.minimal { 1.4 } else { 1.0 };
        let x = self.w * self.rng.range(0.22, 0.78);
        let y = if self.horizon < self.h {
            if self.m.sunset {
                self.horizon - r * self.rng.range(-0.1, 0.6)
            } else {
                self.horizon * self.rng.range(0.25, 0.55)
            }
        } else {
            self.h * self.rng.range(0.25, 0.45)
        };
        // The sun takes the warmest accent, if there is one.
        let warm = self
            .pal
            .acc
            .iter()
            .copied()
            .find(|c| c.sat() > 0.25 && (c.hue() < 0.17 || c.hue() > 0.9))
            .unwrap_or(Rgb::hex(0xffb347));
        let core = Rgb::hex(0xfff1c0).mix(warm, 0.25);
        let halo = Rgb::hex(0xffb347).mix(warm, 0.4);
        self.glow(x, y, r * 4.0, halo, 0.45);
        self.glow(x, y, r * 1.8, core, 0.6);
        let sh = radial(
            (x, y - r * 0.3),
            r * 1.3,
            &[
                (0.0, core.lighten(0.4), 1.0),
                (1.0, core.mix(halo, 0.5), 1.0),
            ],
        );
        self.fill_shader(circle(x, y, r), sh, core);
        if self.m.retro {
            // Retro sun: bands of sky cut through the lower half.
            for k in 0..5 {
                let by = y + r * (0.1 + k as f32 * 0.18);
                let bh = r * (0.03 + k as f32 * 0.02);
                let c = self.pal.sky_at(by / self.horizon.max(1.0));
                let dy = (by - y).abs().max((by + bh - y).abs());
                let half = (r * r - dy * dy).max(0.0).sqrt() + r * 0.02;
                self.fill(rect(x - half, by, 2.0 * half, bh), c, 1.0);
            }
        }
        self.sun = Some((x, y, r));
    }

    pub(super) fn moon(&mut self) {
        let r = self.s * self.rng.range(0.06, 0.11);
        let x = self.w * self.rng.range(0.15, 0.85);
        let y = self.horizon.min(self.h) * self.rng.range(0.18, 0.4);
        let c = Rgb::hex(0xf4f1e0);
        self.glow(x, y, r * 3.5, Rgb::hex(0xc8d8ff), 0.35);
        self.fill(circle(x, y, r), c, 1.0);
        for _ in 0..5 {
            let a = self.rng.range(0.0, TAU);
            let d = self.rng.range(0.1, 0.6) * r;
            let cr = self.rng.range(0.08, 0.22) * r;
            self.fill(
                circle(x + cos(a) * d, y + sin(a) * d, cr),
                Rgb::hex(0xb8b4a0),
                0.35,
            );
        }
    }

    pub(super) fn stars(&mut self) {
        let limit = if self.horizon < self.h {
            self.horizon
        } else {
            self.h
        };
        let unit = (self.s / 1024.0).max(0.2);
        if self.pal.dark_bg {
            let n = self.rng.count(120.0, 260.0, self.density);
            let mut pb = PathBuilder::new();
            for _ in 0..n {
                let x = self.rng.range(0.0, self.w);
                let y = self.rng.range(0.0, 1.0);
                let y = y * y * limit;
                pb.push_circle(x, y, unit * self.rng.range(0.6, 2.0));
            }
            self.fill(pb.finish(), Rgb::hex(0xfffbea), 0.85);
        }
        let n = self.rng.count(3.0, 7.0, self.density.max(0.6));
        for _ in 0..n {
            let x = self.rng.range(0.05, 0.95) * self.w;
            let y = self.rng.range(0.05, 0.8) * limit;
            let r = self.s * self.rng.range(0.012, 0.035);
            let c = if self.pal.dark_bg {
                Rgb::hex(0xfff6d0)
            } else {
                self.pal.contrast(y / self.h)
            };
            self.glow(x, y, r * 3.0, c, 0.4);
            self.star_shape(x, y, r, c, 1.0);
        }
    }

    pub(super) fn star_shape(&mut self, x: f32, y: f32, r: f32, c: Rgb, a: f32) {
        let points = if self.rng.chance(0.5) { 4 } else { 5 };
        let rot = self.rng.range(0.0, TAU);
        let inner = if points == 4 { 0.3 } else { 0.45 };
        let pts: Vec<(f32, f32)> = (0..points * 2)
            .map(|i| {
                let ang = rot + i as f32 * PI / points as f32;
                let rr = if i % 2 == 0 { r } else { r * inner };
                (x + cos(ang) * rr, y + sin(ang) * rr)
            })
            .collect();
        self.fill(polygon(&pts), c, a);
    }

    pub(super) fn planet(&mut self) {
        let r = self.s * self.rng.range(0.09, 0.18);
        let x = self.w * self.rng.range(0.2, 0.8);
        let y = self.horizon.min(self.h) * self.rng.range(0.25, 0.5);
        let c = self.pal.acc(self.rng.below(3)).lighten(0.1);
        let tilt = self.rng.range(-0.5, 0.5);
        let t = place(tilt, x, y);
        let ring_c = c.mix(Rgb::hex(0xf0e0c0), 0.5);
        let ring = |from: f32, to: f32| {
            let mut pb = PathBuilder::new();
            for k in 0..=24 {
                let a = from + (to - from) * k as f32 / 24.0;
                let (px, py) = (cos(a) * r * 1.9, sin(a) * r * 0.42);
                if k == 0 {
                    pb.move_to(px, py);
                } else {
                    pb.line_to(px, py);
                }
            }
            pb.finish().and_then(|p| p.transform(t))
        };
        let has_ring = self.rng.chance(0.7);
        self.glow(x, y, r * 2.2, c, 0.3);
        if has_ring {
            self.stroke(ring(PI, TAU), ring_c, 0.8, r * 0.12);
        }
        let sh = radial(
            (x - r * 0.4, y - r * 0.4),
            r * 1.7,
            &[
                (0.0, c.lighten(0.35), 1.0),
                (0.6, c, 1.0),
                (1.0, c.darken(0.65), 1.0),
            ],
        );
        self.fill_shader(circle(x, y, r), sh, c);
        // Cloud bands.
        let mut pb = PathBuilder::new();
        for k in 0..3 {
            let by = y - r * 0.5 + k as f32 * r * 0.4 + self.rng.range(-0.1, 0.1) * r;
            let half = (r * r - (by - y) * (by - y)).max(0.0).sqrt() * 0.95;
            if let Some(rc) = Rect::from_xywh(x - half, by, 2.0 * half, r * 0.1) {
                pb.push_rect(rc);
            }
        }
        self.fill(pb.finish(), c.darken(0.25), 0.35);
        if has_ring {
            self.stroke(ring(0.0, PI), ring_c, 0.9, r * 0.12);
        }
    }

    pub(super) fn nebula(&mut self) {
        let n = self.rng.count(3.0, 5.0, self.density.clamp(0.6, 1.2));
        for _ in 0..n {
            let (x, y) = self.anywhere();
            let r = self.s * self.rng.range(0.18, 0.38);
            let c = self.any_accent();
            let a = self.rng.range(0.25, 0.45);
            self.glow(x, y, r, c, a);
        }
        // A spiral arm of dust.
        let (cx, cy) = (
            self.w * self.rng.range(0.35, 0.65),
            self.h * self.rng.range(0.35, 0.65),
        );
        let rot = self.rng.range(0.0, TAU);
        let mut pb = PathBuilder::new();
        let unit = (self.s / 1024.0).max(0.2);
        for arm in 0..2 {
            for k in 0..120 {
                let t = k as f32 / 120.0;
                let a = rot + arm as f32 * PI + t * 4.0;
                let d = t * self.s * 0.45 + self.rng.range(-0.03, 0.03) * self.s;
                let (px, py) = (cx + cos(a) * d, cy + sin(a) * d * 0.6);
                pb.push_circle(px, py, unit * self.rng.range(0.8, 2.2));
            }
        }
        self.fill(pb.finish(), Rgb::hex(0xf8f0ff), 0.6);
        self.glow(cx, cy, self.s * 0.12, Rgb::hex(0xfff0e0), 0.6);
    }
}
