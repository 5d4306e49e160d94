//! Land and water: mountain ridges, hills and dunes, and ocean waves.

use tiny_skia::{Path, PathBuilder, Rect};

use super::art::Art;
use super::color::{Rgb, WHITE};
use super::rng::{sin, TAU};
use super::shapes::{linear, polygon};

impl Art {
    /// A mountain ridge: a few tent-shaped peaks roughened by midpoint
    /// displacement, 97 points across the width. Returns the points and the
    /// indices of the peaks.
    pub(super) fn ridge(&mut self, base: f32, height: f32) -> (Vec<(f32, f32)>, Vec<usize>) {
        let n = 97;
        let k = 2 + self.rng.below(3);
        let peaks: Vec<(f32, f32, f32)> = (0..k)
            .map(|i| {
                let px = (i as f32 + self.rng.range(0.15, 0.85)) / k as f32;
                (px, self.rng.range(0.55, 1.0), self.rng.range(2.0, 3.4))
            })
            .collect();
        let mut noise = vec![0.0f32; n];
        let mut step = n - 1;
        let mut amp = 0.12;
        while step > 1 {
            let half = step / 2;
            let mut i = half;
            while i < n {
                let mid = (noise[i - half] + noise[(i + half).min(n - 1)]) / 2.0;
                noise[i] = mid + self.rng.range(-0.5, 0.5) * amp;
                i += step;
            }
            amp *= 0.6;
            step = half;
        }
        let pts = (0..n)
            .map(|i| {
                let x = i as f32 / (n - 1) as f32;
                let v = peaks
                    .iter()
                    .map(|&(px, ph, sl)| ph - (x - px).abs() * sl)
                    .fold(0.08, f32::max);
                (x * self.w, base - (v + noise[i]).max(0.0) * height)
            })
            .collect();
        let idx = peaks
            .iter()
            .map(|&(px, _, _)| ((px * (n - 1) as f32).round() as usize).min(n - 1))
            .collect();
        (pts, idx)
    }

    pub(super) fn mountains(&mut self) {
        let layers = if self.m.minimal {
            2
        } else {
            3 + self.rng.below(2)
        };
        let rock = self.pal.darkest().mix(Rgb::hex(0x3a4050), 0.3);
        let tall = if self.m.tall { 1.3 } else { 1.0 };
        let fog = self.pal.sky_at(1.0);
        let snowy = self.m.snowcap || self.rng.chance(0.3);
        for i in 0..layers {
            let depth = i as f32 / (layers - 1).max(1) as f32; // 0 far .. 1 near
            let base = self.horizon + depth * (self.h - self.horizon) * 0.4;
            let height = self.h * self.rng.range(0.25, 0.4) * tall * (1.0 - depth * 0.4);
            let (pts, peaks) = self.ridge(base, height);
            let top = pts.iter().fold(f32::MAX, |a, p| a.min(p.1));
            let body = rock
                .mix(self.pal.acc(i + 1), 0.2)
                .mix(fog, 0.65 * (1.0 - depth))
                .darken(0.2 * depth);
            let mut pb = PathBuilder::new();
            pb.move_to(0.0, self.h);
            for &(x, y) in &pts {
                pb.line_to(x, y);
            }
            pb.line_to(self.w, self.h);
            pb.close();
            let sh = linear(
                (0.0, top),
                (0.0, base.max(top + 1.0)),
                &[(0.0, body.lighten(0.1), 1.0), (1.0, body.darken(0.2), 1.0)],
            );
            self.fill_shader(pb.finish(), sh, body);
            let snow = Rgb::hex(0xf6f9ff).mix(fog, 0.35 * (1.0 - depth));
            for &p in &peaks {
                // The local summit near the nominal peak.
                let lo = p.saturating_sub(3);
                let hi = (p + 3).min(pts.len() - 1);
                let mut pi = p;
                for j in lo..=hi {
                    if pts[j].1 < pts[pi].1 {
                        pi = j;
                    }
                }
                let peak_y = pts[pi].1;
                if base - peak_y < height * 0.35 {
                    continue;
                }
                // Shadowed right-hand face.
                let mut r = pi;
                while r + 1 < pts.len() && pts[r + 1].1 >= pts[r].1 - 1.0 && pts[r].1 < base {
                    r += 1;
                }
                let mut face: Vec<(f32, f32)> = pts[pi..=r].to_vec();
                let foot_x = pts[pi].0 + (pts[r].0 - pts[pi].0) * 0.25;
                face.push((foot_x, base));
                self.fill(polygon(&face), body.darken(0.5), 0.22);
                if !snowy || depth > 0.7 {
                    continue;
                }
                let line = peak_y + (base - peak_y) * self.rng.range(0.25, 0.38);
                let mut l = pi;
                while l > 0 && pts[l - 1].1 < line {
                    l -= 1;
                }
                let mut r = pi;
                while r + 1 < pts.len() && pts[r + 1].1 < line {
                    r += 1;
                }
                if r <= l {
                    continue;
                }
                let mut cap: Vec<(f32, f32)> = pts[l..=r].to_vec();
                let (x0, x1) = (pts[l].0, pts[r].0);
                let teeth = 7;
                for k in (1..teeth).rev() {
                    let x = x0 + (x1 - x0) * k as f32 / teeth as f32;
                    let dip = if k % 2 == 0 { -0.5 } else { 0.5 };
                    let y = line + (base - peak_y) * 0.1 * (dip + self.rng.range(-0.3, 0.3));
                    cap.push((x, y));
                }
                self.fill(polygon(&cap), snow, 0.95);
            }
        }
    }

    /// What lies below the curve `y_at(x)`, sampled at `steps` + 1 points across the canvas: the
    /// area down to the bottom edge, the curve alone (to draw a line along it) and its highest
    /// point.
    fn below_curve(
        &self,
        steps: usize,
        y_at: impl Fn(f32) -> f32,
    ) -> (Option<Path>, Option<Path>, f32) {
        let mut area = PathBuilder::new();
        let mut curve = PathBuilder::new();
        area.move_to(0.0, self.h);
        let mut top = f32::MAX;
        for k in 0..=steps {
            let x = k as f32 / steps as f32 * self.w;
            let y = y_at(x);
            top = top.min(y);
            area.line_to(x, y);
            if k == 0 {
                curve.move_to(x, y);
            } else {
                curve.line_to(x, y);
            }
        }
        area.line_to(self.w, self.h);
        area.close();
        (area.finish(), curve.finish(), top)
    }

    pub(super) fn hills(&mut self, dunes: bool) {
        let layers = if self.m.minimal { 2 } else { 3 };
        let fog = self.pal.sky_at(1.0);
        for i in 0..layers {
            let depth = i as f32 / (layers - 1).max(1) as f32;
            let base = self.horizon + depth * (self.h - self.horizon) * 0.5;
            let amp = self.h * self.rng.range(0.04, 0.1) * (1.0 - depth * 0.3);
            let wl = self.w * self.rng.range(0.35, 0.8);
            let (p1, p2) = (self.rng.range(0.0, TAU), self.rng.range(0.0, TAU));
            let col = self
                .pal
                .acc(i)
                .mix(fog, 0.5 * (1.0 - depth))
                .darken(0.1 * depth);
            let (ground, crest, top) = self.below_curve(64, |x| {
                let mut v = sin(x / wl * TAU + p1) + 0.4 * sin(x / wl * 2.3 * TAU + p2);
                if dunes {
                    // Sharper crests.
                    v = 1.4 - (v - 1.4).abs() * 1.2;
                }
                base - amp * (1.0 + v * 0.6)
            });
            let sh = linear(
                (0.0, top),
                (0.0, self.h),
                &[(0.0, col.lighten(0.15), 1.0), (1.0, col.darken(0.35), 1.0)],
            );
            self.fill_shader(ground, sh, col);
            if dunes {
                self.stroke(crest, col.lighten(0.35), 0.5, self.s * 0.004);
            }
        }
    }

    pub(super) fn waves(&mut self) {
        let top = self.horizon;
        let bands = self
            .rng
            .count(5.0, 9.0, if self.m.calm { 0.7 } else { 1.0 })
            .max(3);
        let deep = self.pal.darkest().mix(Rgb::hex(0x08203a), 0.3);
        let light = self.pal.acc(1).mix(self.pal.sky_at(1.0), 0.45);
        let amp_k = if self.m.calm { 0.4 } else { 1.0 };
        let phase0 = self.rng.range(0.0, TAU);
        for i in 0..bands {
            let t = i as f32 / bands as f32;
            let y0 = top + (self.h - top) * t * t.sqrt();
            let amp = self.s * (0.004 + 0.03 * t) * amp_k;
            let wl = self.w * self.rng.range(0.15, 0.35) * (0.4 + t);
            let phase = phase0 + self.rng.range(0.0, TAU);
            let col = light.mix(deep, t.sqrt());
            let (water, edge, _) = self.below_curve(48, |x| y0 + amp * sin(x / wl * TAU + phase));
            let sh = linear(
                (0.0, y0 - amp),
                (0.0, y0 + (self.h - top) * 0.4),
                &[(0.0, col.lighten(0.08), 1.0), (1.0, col.darken(0.25), 1.0)],
            );
            self.fill_shader(water, sh, col);
            if i > 0 {
                self.stroke(edge, WHITE, 0.18, (self.s * 0.003).max(0.5));
            }
        }
        // Sun glitter on the water.
        if let Some((sx, _, sr)) = self.sun {
            let mut pb = PathBuilder::new();
            let n = 26;
            for i in 0..n {
                let t = i as f32 / n as f32;
                let y = top + (self.h - top) * t + self.s * 0.004;
                let half = sr * (1.2 - t * 0.5) * self.rng.range(0.3, 1.0);
                let jitter = self.rng.range(-0.2, 0.2) * sr;
                if let Some(r) =
                    Rect::from_xywh(sx - half + jitter, y, 2.0 * half, (self.s * 0.004).max(0.5))
                {
                    pb.push_rect(r);
                }
            }
            let c = Rgb::hex(0xffe0a0).mix(self.pal.acc(0), 0.3);
            self.fill(pb.finish(), c, 0.6);
        }
    }
}
