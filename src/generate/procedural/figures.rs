//! Creatures and people: cats, dogs and other quadrupeds, birds, fish and portraits.

use tiny_skia::PathBuilder;

use super::art::Art;
use super::color::{Rgb, BLACK};
use super::shapes::{circle, linear, oval, place, polygon, rect};

impl Art {
    pub(super) fn cat(&mut self) {
        let u = self.s * self.rng.range(0.2, 0.28) * if self.m.minimal { 1.0 } else { 0.9 };
        let x = self.w * self.rng.range(0.3, 0.7);
        let base = if self.horizon < self.h {
            self.horizon
        } else {
            self.h * 0.88
        };
        let c = if self.pal.dark_bg {
            Rgb::hex(0x050508)
        } else {
            self.pal.darkest().darken(0.6)
        };
        let flip = if self.rng.chance(0.5) { 1.0 } else { -1.0 };
        // Tail.
        let mut pb = PathBuilder::new();
        pb.move_to(x + flip * u * 0.45, base - u * 0.08);
        pb.cubic_to(
            x + flip * u * 1.1,
            base,
            x + flip * u * 1.0,
            base - u * 0.7,
            x + flip * u * 0.8,
            base - u * 0.85,
        );
        self.stroke(pb.finish(), c, 1.0, u * 0.12);
        // Body: a pear shape.
        let mut pb = PathBuilder::new();
        pb.move_to(x - u * 0.55, base);
        pb.cubic_to(
            x - u * 0.6,
            base - u * 0.7,
            x - u * 0.3,
            base - u * 1.05,
            x,
            base - u * 1.1,
        );
        pb.cubic_to(
            x + u * 0.3,
            base - u * 1.05,
            x + u * 0.6,
            base - u * 0.7,
            x + u * 0.55,
            base,
        );
        pb.close();
        self.fill(pb.finish(), c, 1.0);
        // Head and ears.
        let hy = base - u * 1.25;
        let hr = u * 0.33;
        self.fill(oval(x, hy, hr * 1.1, hr), c, 1.0);
        for side in [-1.0, 1.0] {
            self.fill(
                polygon(&[
                    (x + side * hr * 0.95, hy - hr * 0.2),
                    (x + side * hr * 0.85, hy - hr * 1.45),
                    (x + side * hr * 0.2, hy - hr * 0.8),
                ]),
                c,
                1.0,
            );
        }
        if self.pal.dark_bg || self.rng.chance(0.5) {
            let eye = Rgb::hex(0xf0e04a).mix(self.pal.acc(1), 0.2);
            for side in [-1.0, 1.0] {
                self.fill(
                    oval(x + side * hr * 0.4, hy + hr * 0.05, hr * 0.16, hr * 0.1),
                    eye,
                    0.95,
                );
            }
        }
    }

    /// Silhouette colour for creatures.
    pub(super) fn silhouette(&self) -> Rgb {
        if self.pal.dark_bg {
            Rgb::hex(0x050508)
        } else {
            self.pal.darkest().darken(0.6)
        }
    }

    pub(super) fn quadruped(&mut self, dog: bool) {
        let u = self.s * self.rng.range(0.13, 0.2);
        let x = self.w * self.rng.range(0.3, 0.7);
        let base = if self.horizon < self.h {
            self.horizon + (self.h - self.horizon) * 0.5
        } else {
            self.h * 0.85
        };
        let c = self.silhouette();
        let dir = if self.rng.chance(0.5) { 1.0 } else { -1.0 };
        let leg_h = u * 0.7;
        let body_y = base - leg_h - u * 0.3;
        // Legs.
        for lx in [-0.75, -0.45, 0.45, 0.75] {
            self.fill(
                rect(x + lx * u - u * 0.08, body_y, u * 0.16, leg_h + u * 0.3),
                c,
                1.0,
            );
        }
        self.fill(oval(x, body_y, u * 1.05, u * 0.42), c, 1.0);
        // Neck, head, snout.
        let hx = x + dir * u * 1.05;
        let hy = body_y - u * 0.65;
        self.fill(
            polygon(&[
                (x + dir * u * 0.6, body_y - u * 0.2),
                (hx - dir * u * 0.1, hy),
                (hx + dir * u * 0.15, hy + u * 0.2),
                (x + dir * u * 0.95, body_y + u * 0.1),
            ]),
            c,
            1.0,
        );
        self.fill(circle(hx, hy, u * 0.32), c, 1.0);
        self.fill(
            oval(hx + dir * u * 0.35, hy + u * 0.08, u * 0.25, u * 0.15),
            c,
            1.0,
        );
        if dog {
            self.fill_t(
                oval(0.0, u * 0.2, u * 0.12, u * 0.28),
                c,
                1.0,
                place(dir * 0.35, hx - dir * u * 0.15, hy - u * 0.1),
            );
        } else {
            for k in [0.0, 0.2] {
                self.fill(
                    polygon(&[
                        (hx - dir * u * (0.2 + k), hy - u * 0.2),
                        (hx - dir * u * (0.1 + k), hy - u * 0.6),
                        (hx + dir * u * (0.05 - k), hy - u * 0.25),
                    ]),
                    c,
                    1.0,
                );
            }
        }
        // Tail.
        let tx = x - dir * u * 0.95;
        let mut pb = PathBuilder::new();
        pb.move_to(tx, body_y - u * 0.1);
        pb.quad_to(
            tx - dir * u * 0.5,
            body_y - u * 0.3,
            tx - dir * u * 0.55,
            body_y - u * 0.8,
        );
        self.stroke(pb.finish(), c, 1.0, u * 0.13);
    }

    pub(super) fn birds(&mut self) {
        let n = self.rng.count(3.0, 9.0, self.density).max(1);
        let limit = self.horizon.min(self.h);
        let c = if self.pal.dark_bg {
            Rgb::hex(0xe8e8f0)
        } else {
            self.silhouette()
        };
        let cx = self.w * self.rng.range(0.2, 0.8);
        let cy = limit * self.rng.range(0.2, 0.5);
        let mut pb = PathBuilder::new();
        let mut width = 0.0;
        for _ in 0..n {
            let x = cx + self.rng.range(-0.3, 0.3) * self.w;
            let y = cy + self.rng.range(-0.15, 0.15) * limit;
            let r = self.s * self.rng.range(0.015, 0.04);
            width = r * 0.15;
            let flap = self.rng.range(-0.3, 0.4) * r;
            pb.move_to(x - r, y - flap);
            pb.quad_to(x - r * 0.45, y - r * 0.45, x, y);
            pb.quad_to(x + r * 0.45, y - r * 0.45, x + r, y - flap);
        }
        self.stroke(pb.finish(), c, 0.9, width.max(0.5));
    }

    pub(super) fn fish(&mut self) {
        let n = self.rng.count(3.0, 7.0, self.density).max(1);
        for _ in 0..n {
            let x = self.rng.range(0.1, 0.9) * self.w;
            let y = self.rng.range(0.15, 0.85) * self.h;
            let r = self.s * self.rng.range(0.03, 0.08);
            let dir = if self.rng.chance(0.5) { 1.0 } else { -1.0 };
            let c = self.flower_colour();
            let t = place(self.rng.range(-0.25, 0.25), x, y);
            self.fill_t(oval(0.0, 0.0, r, r * 0.5), c, 0.95, t);
            let tail = polygon(&[
                (-dir * r * 0.8, 0.0),
                (-dir * r * 1.5, -r * 0.45),
                (-dir * r * 1.4, r * 0.45),
            ]);
            self.fill_t(tail, c.darken(0.15), 0.95, t);
            self.fill_t(circle(dir * r * 0.55, -r * 0.1, r * 0.08), BLACK, 0.8, t);
        }
    }

    pub(super) fn face(&mut self) {
        let cx = self.w * (0.5 + self.rng.range(-0.06, 0.06));
        let hr = self.s * self.rng.range(0.15, 0.2);
        let cy = self.h * 0.42;
        let behind = self.pal.contrast(0.4);
        self.glow(cx, cy, hr * 3.0, behind.lighten(0.3), 0.45);
        let c = self
            .pal
            .darkest()
            .darken(if self.pal.dark_bg { 0.2 } else { 0.5 });
        let rim = self.pal.acc(1).lighten(0.3);
        // Shoulders and neck.
        let sy = cy + hr * 2.1;
        let mut pb = PathBuilder::new();
        pb.move_to(cx - hr * 2.6, self.h + 2.0);
        pb.cubic_to(
            cx - hr * 2.4,
            sy,
            cx - hr * 1.2,
            sy - hr * 0.2,
            cx - hr * 0.45,
            sy - hr * 0.4,
        );
        pb.line_to(cx - hr * 0.42, cy + hr * 0.9);
        pb.line_to(cx + hr * 0.42, cy + hr * 0.9);
        pb.line_to(cx + hr * 0.45, sy - hr * 0.4);
        pb.cubic_to(
            cx + hr * 1.2,
            sy - hr * 0.2,
            cx + hr * 2.4,
            sy,
            cx + hr * 2.6,
            self.h + 2.0,
        );
        pb.close();
        let body = pb.finish();
        let sh = linear(
            (cx - hr * 2.0, 0.0),
            (cx + hr * 2.0, 0.0),
            &[(0.0, c.lighten(0.12), 1.0), (1.0, c, 1.0)],
        );
        self.fill_shader(body, sh, c);
        // Rim light then head.
        self.fill(oval(cx - hr * 0.05, cy, hr * 0.8, hr * 1.05), rim, 0.9);
        let sh = linear(
            (cx - hr, cy),
            (cx + hr, cy),
            &[(0.0, c.lighten(0.15), 1.0), (1.0, c, 1.0)],
        );
        self.fill_shader(
            oval(cx + hr * 0.02, cy + hr * 0.02, hr * 0.8, hr * 1.05),
            sh,
            c,
        );
        // Hair / headwrap shape for variety.
        if self.rng.chance(0.6) {
            let hair = c.mix(self.pal.acc(0), 0.25).darken(0.2);
            let mut pb = PathBuilder::new();
            pb.move_to(cx - hr * 0.9, cy + hr * 0.1);
            pb.cubic_to(
                cx - hr * 1.1,
                cy - hr * 1.3,
                cx + hr * 1.1,
                cy - hr * 1.4,
                cx + hr * 0.9,
                cy + hr * 0.1,
            );
            pb.cubic_to(
                cx + hr * 0.7,
                cy - hr * 0.6,
                cx - hr * 0.7,
                cy - hr * 0.7,
                cx - hr * 0.9,
                cy + hr * 0.1,
            );
            pb.close();
            self.fill(pb.finish(), hair, 1.0);
        }
    }
}
