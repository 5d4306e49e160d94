//! Colour: the `Rgb` type with its mixing and HSL helpers, below both the theme (which names
//! colours) and the palette (which the theme becomes).

use tiny_skia::Color;

use super::rng::clamp01;

#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Rgb {
    pub(super) r: f32,
    pub(super) g: f32,
    pub(super) b: f32,
}

pub(super) const WHITE: Rgb = Rgb {
    r: 1.0,
    g: 1.0,
    b: 1.0,
};
pub(super) const BLACK: Rgb = Rgb {
    r: 0.0,
    g: 0.0,
    b: 0.0,
};

impl Rgb {
    pub(super) fn hex(v: u32) -> Rgb {
        Rgb {
            r: ((v >> 16) & 255) as f32 / 255.0,
            g: ((v >> 8) & 255) as f32 / 255.0,
            b: (v & 255) as f32 / 255.0,
        }
    }
    pub(super) fn mix(self, o: Rgb, t: f32) -> Rgb {
        Rgb {
            r: self.r + (o.r - self.r) * t,
            g: self.g + (o.g - self.g) * t,
            b: self.b + (o.b - self.b) * t,
        }
    }
    pub(super) fn lighten(self, t: f32) -> Rgb {
        self.mix(WHITE, t)
    }
    pub(super) fn darken(self, t: f32) -> Rgb {
        self.mix(BLACK, t)
    }
    pub(super) fn lum(self) -> f32 {
        0.2126 * self.r + 0.7152 * self.g + 0.0722 * self.b
    }
    /// Scale saturation by `k` around the luminance.
    pub(super) fn saturate(self, k: f32) -> Rgb {
        let l = self.lum();
        Rgb {
            r: clamp01(l + (self.r - l) * k),
            g: clamp01(l + (self.g - l) * k),
            b: clamp01(l + (self.b - l) * k),
        }
    }
    pub(super) fn color(self, a: f32) -> Color {
        Color::from_rgba(
            clamp01(self.r),
            clamp01(self.g),
            clamp01(self.b),
            clamp01(a),
        )
        .unwrap_or(Color::BLACK)
    }
    pub(super) fn hsl(h: f32, s: f32, l: f32) -> Rgb {
        let h = (h - h.floor()) * 6.0;
        let c = (1.0 - (2.0 * l - 1.0).abs()) * s;
        let x = c * (1.0 - ((h - 2.0 * (h / 2.0).floor()) - 1.0).abs());
        let (r, g, b) = match h as u32 {
            0 => (c, x, 0.0),
            1 => (x, c, 0.0),
            2 => (0.0, c, x),
            3 => (0.0, x, c),
            4 => (x, 0.0, c),
            _ => (c, 0.0, x),
        };
        let m = l - c / 2.0;
        Rgb {
            r: clamp01(r + m),
            g: clamp01(g + m),
            b: clamp01(b + m),
        }
    }
    /// Hue in [0, 1).
    pub(super) fn hue(self) -> f32 {
        let max = self.r.max(self.g).max(self.b);
        let min = self.r.min(self.g).min(self.b);
        let d = max - min;
        if d <= 1e-6 {
            return 0.0;
        }
        let h = if max == self.r {
            (self.g - self.b) / d
        } else if max == self.g {
            (self.b - self.r) / d + 2.0
        } else {
            (self.r - self.g) / d + 4.0
        };
        let h = h / 6.0;
        h - h.floor()
    }
    pub(super) fn sat(self) -> f32 {
        let max = self.r.max(self.g).max(self.b);
        let min = self.r.min(self.g).min(self.b);
        max - min
    }
    /// Rotate the hue by `dh` turns keeping saturation/lightness roughly.
    pub(super) fn shift_hue(self, dh: f32) -> Rgb {
        let max = self.r.max(self.g).max(self.b);
        let min = self.r.min(self.g).min(self.b);
        let l = (max + min) / 2.0;
        let d = max - min;
        if d <= 1e-4 {
            return self;
        }
        let s = d / (1.0 - (2.0 * l - 1.0).abs()).max(1e-4);
        Rgb::hsl(self.hue() + dh, clamp01(s), l)
    }
}
