//! Composition: which subjects a picture gets and in what depth order, the
//! background gradient and ground, calm bands, abstract overlay and vignette.

use tiny_skia::{FillRule, Paint, PathBuilder, Rect, Transform};

use super::art::Art;
use super::color::{Rgb, BLACK};
use super::shapes::{linear, radial, rect};
use super::theme::Theme;
use super::vocab::{Subj, FAMILIES, MAX_SUBJECTS};

/// The shape families that `--no` leaves.
fn allowed_families(t: &Theme) -> Vec<Subj> {
    FAMILIES
        .iter()
        .copied()
        .filter(|f| !t.without.contains(f))
        .collect()
}

impl Art {
    pub(super) fn paint(&mut self, t: &Theme) {
        let (subjects, primary_count) = self.choose_subjects(t);
        let land = self.m.land
            || subjects.iter().any(|s| {
                matches!(
                    s,
                    Subj::Mountains | Subj::Hills | Subj::Dunes | Subj::City | Subj::Waves
                )
            });
        if land {
            self.horizon = self.h * self.rng.range(0.55, 0.72);
        }
        self.background(land, &subjects);
        if self.m.calm && !self.m.minimal {
            self.calm_bands();
        }
        // Draw in depth order.
        let order = [
            Subj::Nebula,
            Subj::Stars,
            Subj::Sun,
            Subj::Moon,
            Subj::Planet,
            Subj::Clouds,
            Subj::Bird,
            Subj::Mountains,
            Subj::Hills,
            Subj::Dunes,
            Subj::City,
            Subj::House,
            Subj::Waves,
            Subj::Boat,
            Subj::Trees,
            Subj::Pines,
            Subj::Palms,
            Subj::Grass,
            Subj::Flowers,
            Subj::Stripes,
            Subj::Grid,
            Subj::Cubes,
            Subj::Triangles,
            Subj::Polys,
            Subj::Blobs,
            Subj::Rings,
            Subj::Arcs,
            Subj::Spiral,
            Subj::Dots,
            Subj::Orb,
            Subj::Hearts,
            Subj::Bubbles,
            Subj::Flames,
            Subj::Window,
            Subj::Face,
            Subj::Fish,
            Subj::Cat,
            Subj::Dog,
            Subj::Animal,
            Subj::Rain,
            Subj::Snow,
            Subj::Leaves,
            Subj::Lights,
        ];
        let abstract_heavy = self.m.abstract_ || primary_count == 0;
        // `--stop`: the drawing as it was that far along: that share of its subjects (at least
        // one), without the finishing overlays.
        let stopped = self.stop < 100;
        let mut left = (subjects.len() * self.stop as usize).div_ceil(100).max(1);
        for s in order {
            if left == 0 {
                break;
            }
            if let Some(idx) = subjects.iter().position(|&x| x == s) {
                // Unknown-word families are accents when real subjects exist.
                let weight = if idx < primary_count || abstract_heavy {
                    1.0
                } else {
                    0.45
                };
                self.subject(s, weight);
                left -= 1;
            }
        }
        if stopped {
            return;
        }
        if self.m.abstract_ {
            self.abstract_overlay();
        }
        if self.m.busy {
            let families = allowed_families(t);
            if !families.is_empty() {
                let fam = families[self.rng.below(families.len())];
                self.subject(fam, 0.8);
            }
            if !t.without.contains(&Subj::Triangles) {
                self.family(Subj::Triangles, 0.6);
            }
        }
        // A darkened border would show as a frame around every repeat of a tile.
        if !self.tile {
            self.vignette();
        }
    }

    /// The subjects drawn, and how many of them the prompt named: the first few named, then up
    /// to two shape families from unknown words, never one that `--no` names. Bounded work.
    pub(super) fn choose_subjects(&mut self, t: &Theme) -> (Vec<Subj>, usize) {
        let allowed = |s: &Subj| !t.without.contains(s);
        let mut subjects: Vec<Subj> = t
            .subjects
            .iter()
            .copied()
            .filter(allowed)
            .take(MAX_SUBJECTS)
            .collect();
        let primary_count = subjects.len();
        for &(_, fam) in t.unknown.iter().take(2) {
            if !subjects.contains(&fam) && allowed(&fam) {
                subjects.push(fam);
            }
        }
        if subjects.is_empty() {
            let families = allowed_families(t);
            let pick = self.rng.next() % families.len().max(1) as u64;
            subjects.extend(families.get(pick as usize));
        }
        // A window needs a view.
        if subjects.contains(&Subj::Window) && primary_count <= 3 {
            let sky_thing = if self.pal.dark_bg {
                Subj::Moon
            } else {
                Subj::Clouds
            };
            for extra in [sky_thing, Subj::Hills] {
                if !subjects.contains(&extra) && allowed(&extra) {
                    subjects.push(extra);
                }
            }
        }
        (subjects, primary_count)
    }

    pub(super) fn background(&mut self, land: bool, subjects: &[Subj]) {
        let (w, h) = (self.w, self.h);
        let n = self.pal.sky.len();
        let list: Vec<(f32, Rgb, f32)> = self
            .pal
            .sky
            .iter()
            .enumerate()
            .map(|(i, &c)| (i as f32 / (n - 1).max(1) as f32, c, 1.0))
            .collect();
        let (p0, p1) = if land {
            ((0.0, 0.0), (0.0, self.horizon))
        } else {
            let dx = self.rng.range(-0.4, 0.4) * w;
            ((w * 0.5 - dx, 0.0), (w * 0.5 + dx, h))
        };
        let first = self.pal.sky[0];
        self.fill_shader(rect(0.0, 0.0, w, h), linear(p0, p1, &list), first);
        if land {
            // Ground below the horizon.
            let ground = self.ground_colour(subjects).mix(self.pal.sky_at(1.0), 0.25);
            let top = ground.mix(self.pal.sky_at(1.0), 0.45);
            let sh = linear(
                (0.0, self.horizon),
                (0.0, h),
                &[(0.0, top, 1.0), (1.0, ground.darken(0.35), 1.0)],
            );
            self.fill_shader(rect(0.0, self.horizon, w, h - self.horizon), sh, ground);
        }
    }

    /// Colour of the land below the horizon.
    pub(super) fn ground_colour(&self, subjects: &[Subj]) -> Rgb {
        let has = |list: &[Subj]| subjects.iter().any(|s| list.contains(s));
        let find = |lo: f32, hi: f32| {
            self.pal
                .acc
                .iter()
                .copied()
                .filter(|c| c.sat() > 0.12 && (lo..hi).contains(&c.hue()))
                .min_by(|a, b| a.lum().total_cmp(&b.lum()))
        };
        if has(&[Subj::Dunes]) {
            return find(0.04, 0.16).unwrap_or(Rgb::hex(0xc89858));
        }
        if has(&[
            Subj::Grass,
            Subj::Flowers,
            Subj::Trees,
            Subj::Pines,
            Subj::Hills,
            Subj::House,
        ]) {
            let g = find(0.18, 0.48).unwrap_or(Rgb::hex(0x3f7f3a));
            return if self.pal.dark_bg { g.darken(0.6) } else { g };
        }
        self.pal.darkest()
    }

    pub(super) fn subject(&mut self, s: Subj, weight: f32) {
        match s {
            Subj::Sun => self.sun(),
            Subj::Moon => self.moon(),
            Subj::Planet => self.planet(),
            Subj::Stars => self.stars(),
            Subj::Nebula => self.nebula(),
            Subj::Mountains => self.mountains(),
            Subj::Hills | Subj::Dunes => self.hills(s == Subj::Dunes),
            Subj::City => self.city(),
            Subj::House => self.houses(),
            Subj::Waves => self.waves(),
            Subj::Boat => self.boat(),
            Subj::Trees | Subj::Pines | Subj::Palms => self.trees(s),
            Subj::Grass => self.grass(),
            Subj::Flowers => self.flowers(),
            Subj::Clouds => self.clouds(),
            Subj::Rain => self.rain(),
            Subj::Leaves => self.leaves(),
            Subj::Flames => self.flames(),
            Subj::Cat => self.cat(),
            Subj::Dog | Subj::Animal => self.quadruped(s == Subj::Dog),
            Subj::Bird => self.birds(),
            Subj::Fish => self.fish(),
            Subj::Face => self.face(),
            Subj::Window => self.window(),
            Subj::Lights => self.lights(),
            Subj::Snow => self.snow(),
            Subj::Orb => self.orb(weight),
            Subj::Grid => self.grid(weight),
            Subj::Cubes => self.cubes(weight),
            Subj::Spiral => self.spiral(weight),
            Subj::Stripes => self.stripes(weight),
            Subj::Dots => self.dots(weight),
            Subj::Bubbles => self.bubbles(weight),
            Subj::Hearts => self.hearts(weight),
            Subj::Arcs => self.arcs(weight),
            Subj::Triangles | Subj::Polys | Subj::Rings | Subj::Blobs => self.family(s, weight),
        }
    }

    /// Soft horizontal bands for calm pictures.
    pub(super) fn calm_bands(&mut self) {
        let n = self.rng.count(3.0, 6.0, 1.0);
        for _ in 0..n {
            let y = self.rng.range(0.05, 0.95) * self.h;
            let th = self.h * self.rng.range(0.02, 0.08);
            let c = self.any_accent().lighten(0.3);
            let sh = linear(
                (0.0, y - th),
                (0.0, y + th),
                &[(0.0, c, 0.0), (0.5, c, 0.3), (1.0, c, 0.0)],
            );
            self.fill_shader(rect(0.0, y - th, self.w, 2.0 * th), sh, c);
        }
    }

    pub(super) fn abstract_overlay(&mut self) {
        let n = self.rng.count(4.0, 8.0, self.density);
        for _ in 0..n {
            let (x, y) = self.anywhere();
            let r = self.s * self.rng.range(0.1, 0.3);
            let c = self.any_accent();
            self.blob(x, y, r, c, 0.3);
        }
    }

    pub(super) fn vignette(&mut self) {
        let (w, h) = (self.w, self.h);
        let r = (w * w + h * h).sqrt() * 0.62;
        let a = if self.m.pastel { 0.12 } else { 0.3 };
        let sh = radial(
            (w / 2.0, h / 2.0),
            r.max(1.0),
            &[(0.0, BLACK, 0.0), (0.6, BLACK, 0.0), (1.0, BLACK, a)],
        );
        // Only the ring outside 60% of the radius is shaded: skip the centre.
        let mut pb = PathBuilder::new();
        if let Some(full) = Rect::from_xywh(0.0, 0.0, w, h) {
            pb.push_rect(full);
        }
        pb.push_circle(w / 2.0, h / 2.0, r * 0.6);
        if let (Some(path), Some(shader)) = (pb.finish(), sh) {
            let paint = Paint {
                shader,
                anti_alias: true,
                ..Default::default()
            };
            self.pm.fill_path(
                &path,
                &paint,
                FillRule::EvenOdd,
                Transform::identity(),
                None,
            );
        }
    }
}
