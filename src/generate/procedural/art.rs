//! The painter: `Art` holds the pixmap, PRNG, palette and layout state, and
//! offers the fill / stroke / glow primitives every subject is drawn with.

use tiny_skia::{FillRule, Paint, Path, Pixmap, Shader, Transform};

use super::color::Rgb;
use super::palette::Palette;
use super::rng::Rng;
use super::shapes::{circle, radial};
use super::theme::Mods;

pub(super) struct Art {
    pub(super) pm: Pixmap,
    pub(super) rng: Rng,
    pub(super) pal: Palette,
    pub(super) m: Mods,
    pub(super) w: f32,
    pub(super) h: f32,
    /// Shorter side.
    pub(super) s: f32,
    /// Horizon y (landscape) or h.
    pub(super) horizon: f32,
    /// Element-count multiplier.
    pub(super) density: f32,
    pub(super) sun: Option<(f32, f32, f32)>,
    /// Drawn to repeat (`--tile`): no border effects.
    pub(super) tile: bool,
    /// `--stop`: the share of the drawing done, in percent (100: all of it).
    pub(super) stop: u32,
}

impl Art {
    pub(super) fn new(pm: Pixmap, rng: Rng, pal: Palette, m: Mods) -> Art {
        let (w, h) = (pm.width() as f32, pm.height() as f32);
        let density = if m.minimal {
            0.35
        } else if m.busy {
            1.7
        } else if m.calm {
            0.7
        } else {
            1.0
        };
        Art {
            pm,
            rng,
            pal,
            m,
            w,
            h,
            s: w.min(h),
            horizon: h,
            density,
            sun: None,
            tile: false,
            stop: 100,
        }
    }

    /// A point anywhere on the canvas, at random.
    pub(super) fn anywhere(&mut self) -> (f32, f32) {
        let x = self.rng.range(0.0, self.w);
        let y = self.rng.range(0.0, self.h);
        (x, y)
    }

    /// One of the palette's accents, at random.
    pub(super) fn any_accent(&mut self) -> Rgb {
        self.pal.acc(self.rng.below(self.pal.acc.len()))
    }

    pub(super) fn fill(&mut self, path: Option<Path>, c: Rgb, a: f32) {
        self.fill_t(path, c, a, Transform::identity());
    }

    pub(super) fn fill_t(&mut self, path: Option<Path>, c: Rgb, a: f32, t: Transform) {
        if let Some(p) = path {
            let mut paint = Paint::default();
            paint.set_color(c.color(a));
            paint.anti_alias = true;
            self.pm.fill_path(&p, &paint, FillRule::Winding, t, None);
        }
    }

    pub(super) fn fill_shader(
        &mut self,
        path: Option<Path>,
        shader: Option<Shader<'static>>,
        fb: Rgb,
    ) {
        let Some(p) = path else { return };
        let mut paint = Paint::default();
        match shader {
            Some(s) => paint.shader = s,
            None => paint.set_color(fb.color(1.0)),
        }
        paint.anti_alias = true;
        self.pm
            .fill_path(&p, &paint, FillRule::Winding, Transform::identity(), None);
    }

    pub(super) fn stroke(&mut self, path: Option<Path>, c: Rgb, a: f32, width: f32) {
        if let Some(p) = path {
            let mut paint = Paint::default();
            paint.set_color(c.color(a));
            paint.anti_alias = true;
            let stroke = tiny_skia::Stroke {
                width: width.max(0.1),
                line_cap: tiny_skia::LineCap::Round,
                line_join: tiny_skia::LineJoin::Round,
                ..Default::default()
            };
            self.pm
                .stroke_path(&p, &paint, &stroke, Transform::identity(), None);
        }
    }

    /// A soft radial glow.
    pub(super) fn glow(&mut self, x: f32, y: f32, r: f32, c: Rgb, a: f32) {
        if r < 0.5 {
            return;
        }
        let sh = radial(
            (x, y),
            r,
            &[(0.0, c, a), (0.35, c, a * 0.45), (1.0, c, 0.0)],
        );
        if sh.is_some() {
            self.fill_shader(circle(x, y, r), sh, c);
        }
    }
}
