//! Geometric and abstract patterns: orbs, tile grids and neon floors, isometric
//! cubes, spirals, stripes, halftone dots, bubbles, hearts, arcs, and the shape
//! families (rings, polygons, blobs) unknown words contribute.

use tiny_skia::PathBuilder;

use super::art::Art;
use super::color::{Rgb, WHITE};
use super::rng::{cos, sin, HALF_PI, PI, TAU};
use super::shapes::{circle, oval, polygon, radial, rect};
use super::vocab::Subj;

impl Art {
    pub(super) fn orb(&mut self, weight: f32) {
        let minimal = self.m.minimal;
        let n = if minimal {
            1
        } else {
            self.rng.count(1.0, 4.0, self.density * weight).max(1)
        };
        for i in 0..n {
            let r = self.s
                * if minimal {
                    self.rng.range(0.14, 0.24)
                } else {
                    self.rng.range(0.05, 0.18) * weight.max(0.5)
                };
            let (x, y) = if minimal || i == 0 {
                (
                    self.w * self.rng.range(0.35, 0.65),
                    self.h * self.rng.range(0.35, 0.6),
                )
            } else {
                (
                    self.w * self.rng.range(0.1, 0.9),
                    self.h * self.rng.range(0.1, 0.9),
                )
            };
            let c = self.pal.contrast(y / self.h);
            self.glow(x, y, r * 2.2, c, 0.35);
            let sh = radial(
                (x - r * 0.3, y - r * 0.3),
                r * 1.5,
                &[(0.0, c.lighten(0.25), 1.0), (1.0, c.darken(0.12), 1.0)],
            );
            self.fill_shader(circle(x, y, r), sh, c);
        }
    }

    pub(super) fn grid(&mut self, weight: f32) {
        if self.horizon < self.h && (self.m.retro || self.m.neon) {
            self.floor_grid();
            return;
        }
        let cols = (4 + self.rng.below(7)) as f32;
        let cell = self.w / cols;
        let rows = ((self.h / cell).ceil() as usize).min(64);
        let gap = cell * 0.06;
        let fill_p = 0.55 * weight.min(1.0) * self.density.min(1.5);
        for r in 0..rows {
            for k in 0..cols as usize {
                if !self.rng.chance(fill_p) {
                    continue;
                }
                let x = k as f32 * cell + gap;
                let y = r as f32 * cell + gap;
                let sz = cell - 2.0 * gap;
                let c = self.any_accent();
                let a = self.rng.range(0.55, 0.95);
                match self.rng.below(4) {
                    0 => self.fill(circle(x + sz / 2.0, y + sz / 2.0, sz / 2.0), c, a),
                    1 => {
                        // Quarter disc from a random corner.
                        let (ox, oy) = match self.rng.below(4) {
                            0 => (x, y),
                            1 => (x + sz, y),
                            2 => (x, y + sz),
                            _ => (x + sz, y + sz),
                        };
                        let mut pb = PathBuilder::new();
                        pb.move_to(ox, oy);
                        let start = match (ox > x, oy > y) {
                            (false, false) => 0.0,
                            (true, false) => HALF_PI,
                            (true, true) => PI,
                            (false, true) => PI + HALF_PI,
                        };
                        for j in 0..=8 {
                            let an = start + HALF_PI * j as f32 / 8.0;
                            pb.line_to(ox + cos(an) * sz, oy + sin(an) * sz);
                        }
                        pb.close();
                        self.fill(pb.finish(), c, a);
                    }
                    2 => self.fill(
                        polygon(&[(x, y + sz), (x + sz / 2.0, y), (x + sz, y + sz)]),
                        c,
                        a,
                    ),
                    _ => self.fill(rect(x, y, sz, sz), c, a),
                }
            }
        }
    }

    /// Perspective neon floor below the horizon.
    pub(super) fn floor_grid(&mut self) {
        let top = self.horizon;
        let c = self.pal.acc(1).lighten(0.2);
        let mut pb = PathBuilder::new();
        let vx = self.w / 2.0;
        for k in -12..=12 {
            let bx = vx + k as f32 * self.w * 0.12;
            pb.move_to(vx + (bx - vx) * 0.05, top);
            pb.line_to(bx, self.h);
        }
        for k in 1..12 {
            let t = k as f32 / 12.0;
            let y = top + (self.h - top) * t * t;
            pb.move_to(0.0, y);
            pb.line_to(self.w, y);
        }
        let p = pb.finish();
        if let Some(p) = &p {
            self.stroke(Some(p.clone()), c, 0.25, self.s * 0.01);
        }
        self.stroke(p, c, 0.85, (self.s * 0.0025).max(0.5));
    }

    pub(super) fn cubes(&mut self, weight: f32) {
        let a = self.s * self.rng.range(0.06, 0.11) * weight.max(0.5);
        let dx = a * 0.866;
        let n = self.rng.count(5.0, 12.0, self.density * weight);
        let base = self.any_accent();
        let cx = self.w * self.rng.range(0.3, 0.7);
        let cy = self.h * self.rng.range(0.35, 0.65);
        let mut cells: Vec<(i32, i32)> = Vec::new();
        for _ in 0..n {
            let (mut i, mut j) = (0i32, 0i32);
            for _ in 0..4 {
                match self.rng.below(3) {
                    0 => i += 1,
                    1 => j += 1,
                    _ => i -= 1,
                }
            }
            if !cells.contains(&(i, j)) {
                cells.push((i, j));
            }
        }
        // Back to front.
        cells.sort_by_key(|&(i, j)| (j, i));
        for (i, j) in cells {
            let x = cx + (i - j) as f32 * dx;
            let y = cy + (i + j) as f32 * a * 0.5 - (i.abs() as f32) * a * 0.1;
            let top = [
                (x, y - a),
                (x + dx, y - a * 0.5),
                (x, y),
                (x - dx, y - a * 0.5),
            ];
            let left = [
                (x - dx, y - a * 0.5),
                (x, y),
                (x, y + a),
                (x - dx, y + a * 0.5),
            ];
            let right = [
                (x, y),
                (x + dx, y - a * 0.5),
                (x + dx, y + a * 0.5),
                (x, y + a),
            ];
            self.fill(polygon(&top), base.lighten(0.35), 0.95);
            self.fill(polygon(&left), base, 0.95);
            self.fill(polygon(&right), base.darken(0.35), 0.95);
        }
    }

    pub(super) fn spiral(&mut self, weight: f32) {
        let cx = self.w * self.rng.range(0.3, 0.7);
        let cy = self.h * self.rng.range(0.3, 0.7);
        let turns = self.rng.range(2.5, 5.0);
        let rmax = self.s * self.rng.range(0.2, 0.42) * weight.max(0.5);
        let rot = self.rng.range(0.0, TAU);
        let c = self.pal.contrast(cy / self.h);
        let segs = 4;
        for seg in 0..segs {
            let mut pb = PathBuilder::new();
            let steps = 60;
            for k in 0..=steps {
                let t = (seg as f32 + k as f32 / steps as f32) / segs as f32;
                let a = rot + t * turns * TAU;
                let r = t * rmax;
                let (x, y) = (cx + cos(a) * r, cy + sin(a) * r);
                if k == 0 {
                    pb.move_to(x, y);
                } else {
                    pb.line_to(x, y);
                }
            }
            let wdt = self.s * 0.006 * (1.0 + seg as f32 * 1.2);
            self.stroke(pb.finish(), c.mix(self.pal.acc(seg), 0.3), 0.85, wdt);
        }
    }

    pub(super) fn stripes(&mut self, weight: f32) {
        let n = self.rng.count(4.0, 9.0, self.density * weight).max(2);
        let horizontal = self.m.calm || self.rng.chance(0.5);
        let slope = if horizontal {
            self.rng.range(-0.05, 0.05)
        } else {
            self.rng.range(-0.6, 0.6)
        };
        for _ in 0..n {
            let y = self.rng.range(-0.1, 1.1) * self.h;
            let th = self.s * self.rng.range(0.01, 0.08) * weight.max(0.4);
            let c = self.any_accent();
            let dy = slope * self.w;
            let a = self.rng.range(0.25, 0.6);
            self.fill(
                polygon(&[
                    (0.0, y),
                    (self.w, y + dy),
                    (self.w, y + dy + th),
                    (0.0, y + th),
                ]),
                c,
                a,
            );
        }
    }

    pub(super) fn dots(&mut self, weight: f32) {
        let spacing = self.s * self.rng.range(0.03, 0.06);
        let cx = self.w * self.rng.range(0.0, 1.0);
        let cy = self.h * self.rng.range(0.0, 1.0);
        let reach = self.s * self.rng.range(0.4, 0.8) * weight.max(0.5);
        let c = self.pal.contrast(0.5);
        let mut pb = PathBuilder::new();
        let cols = (self.w / spacing) as usize + 1;
        let rows = (self.h / spacing) as usize + 1;
        for j in 0..rows.min(200) {
            for i in 0..cols.min(200) {
                let x = (i as f32 + 0.5) * spacing;
                let y = (j as f32 + 0.5) * spacing;
                let d = ((x - cx) * (x - cx) + (y - cy) * (y - cy)).sqrt();
                let r = spacing * 0.42 * (1.0 - d / reach);
                if r > spacing * 0.04 {
                    pb.push_circle(x, y, r);
                }
            }
        }
        self.fill(pb.finish(), c, 0.7);
    }

    pub(super) fn bubbles(&mut self, weight: f32) {
        let n = self.rng.count(8.0, 20.0, self.density * weight).max(2);
        for _ in 0..n {
            let x = self.rng.range(0.05, 0.95) * self.w;
            let y = self.rng.range(0.05, 0.95) * self.h;
            let r = self.s * self.rng.range(0.015, 0.07);
            let c = self.any_accent().lighten(0.4);
            self.fill(circle(x, y, r), c, 0.15);
            self.stroke(circle(x, y, r), c, 0.6, (r * 0.06).max(0.5));
            self.fill(
                oval(x - r * 0.35, y - r * 0.4, r * 0.25, r * 0.15),
                WHITE,
                0.7,
            );
        }
    }

    pub(super) fn hearts(&mut self, weight: f32) {
        let n = self.rng.count(2.0, 6.0, self.density * weight).max(1);
        for i in 0..n {
            let big = i == 0 && weight >= 1.0;
            let x = self.w * if big { 0.5 } else { self.rng.range(0.1, 0.9) };
            let y = self.h * if big { 0.47 } else { self.rng.range(0.1, 0.9) };
            let r = self.s
                * if big {
                    self.rng.range(0.15, 0.22)
                } else {
                    self.rng.range(0.03, 0.08)
                };
            let c = self.pal.acc(self.rng.below(2));
            let mut pb = PathBuilder::new();
            pb.move_to(x, y + r);
            pb.cubic_to(
                x - r * 1.6,
                y - r * 0.1,
                x - r * 0.9,
                y - r * 1.3,
                x,
                y - r * 0.45,
            );
            pb.cubic_to(x + r * 0.9, y - r * 1.3, x + r * 1.6, y - r * 0.1, x, y + r);
            pb.close();
            if big {
                self.glow(x, y, r * 2.5, c, 0.3);
            }
            self.fill(pb.finish(), c, if big { 1.0 } else { 0.75 });
        }
    }

    pub(super) fn arcs(&mut self, weight: f32) {
        let cx = self.w * self.rng.range(0.2, 0.8);
        let cy = self.h * self.rng.range(0.6, 1.0);
        let n = self.rng.count(3.0, 7.0, weight.max(0.5)).max(2);
        let r0 = self.s * self.rng.range(0.15, 0.3);
        let wdt = self.s * self.rng.range(0.025, 0.05);
        for k in 0..n {
            let r = r0 + k as f32 * wdt * 1.05;
            let mut pb = PathBuilder::new();
            for j in 0..=40 {
                let a = PI + PI * j as f32 / 40.0;
                let (x, y) = (cx + cos(a) * r, cy + sin(a) * r);
                if j == 0 {
                    pb.move_to(x, y);
                } else {
                    pb.line_to(x, y);
                }
            }
            let c = self.pal.acc(k);
            self.stroke(pb.finish(), c, 0.85, wdt);
        }
    }

    pub(super) fn family(&mut self, s: Subj, weight: f32) {
        let n = self.rng.count(3.0, 7.0, self.density * weight).max(1);
        for _ in 0..n {
            let x = self.rng.range(0.05, 0.95) * self.w;
            let y = self.rng.range(0.05, 0.95) * self.h;
            let r = self.s * self.rng.range(0.04, 0.16) * weight.max(0.4);
            let c = self.any_accent();
            let a = self.rng.range(0.45, 0.85);
            match s {
                Subj::Rings => {
                    self.stroke(circle(x, y, r), c, a, r * 0.15);
                }
                Subj::Triangles | Subj::Polys => {
                    let k = if s == Subj::Triangles {
                        3
                    } else {
                        5 + self.rng.below(3)
                    };
                    let rot = self.rng.range(0.0, TAU);
                    let pts: Vec<(f32, f32)> = (0..k)
                        .map(|i| {
                            let ang = rot + i as f32 * TAU / k as f32;
                            (x + cos(ang) * r, y + sin(ang) * r)
                        })
                        .collect();
                    self.fill(polygon(&pts), c, a);
                }
                _ => {
                    self.blob(x, y, r, c, a);
                }
            }
        }
    }

    pub(super) fn blob(&mut self, x: f32, y: f32, r: f32, c: Rgb, a: f32) {
        let k = 7;
        let rot = self.rng.range(0.0, TAU);
        let pts: Vec<(f32, f32)> = (0..k)
            .map(|i| {
                let ang = rot + i as f32 * TAU / k as f32;
                let rr = r * self.rng.range(0.7, 1.2);
                (x + cos(ang) * rr, y + sin(ang) * rr)
            })
            .collect();
        let mut pb = PathBuilder::new();
        let mid = |p: (f32, f32), q: (f32, f32)| ((p.0 + q.0) / 2.0, (p.1 + q.1) / 2.0);
        let start = mid(pts[k - 1], pts[0]);
        pb.move_to(start.0, start.1);
        for i in 0..k {
            let m = mid(pts[i], pts[(i + 1) % k]);
            pb.quad_to(pts[i].0, pts[i].1, m.0, m.1);
        }
        pb.close();
        self.fill(pb.finish(), c, a);
    }
}
