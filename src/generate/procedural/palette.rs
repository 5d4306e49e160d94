//! The `Palette` that a prompt's theme becomes for one seed and variant.

use super::color::Rgb;
use super::rng::{clamp01, Rng};
use super::theme::Theme;

// ---------------------------------------------------------------------------
// Palette: what the theme's colours become for one seed and variant.

pub(super) struct Palette {
    /// Background stops, top to bottom.
    pub(super) sky: Vec<Rgb>,
    /// Subject colours, most important first.
    pub(super) acc: Vec<Rgb>,
    /// Whether the background is dark (stars show, lights glow).
    pub(super) dark_bg: bool,
}

impl Palette {
    pub(super) fn build(t: &Theme, base: u64, variant: u32) -> Palette {
        let mut rng = Rng(base ^ 0x5EED);
        let m = t.m;
        let mut acc: Vec<Rgb> = Vec::new();
        acc.extend(t.named.iter().copied());
        acc.extend(t.themed.iter().copied());
        if acc.is_empty() {
            acc.extend(t.unknown.iter().map(|u| u.0));
        } else if let Some(u) = t.unknown.first() {
            acc.push(u.0);
        }
        if acc.is_empty() {
            let h = (base % 1000) as f32 / 1000.0;
            acc.push(Rgb::hsl(h, 0.65, 0.55));
        }
        if acc.len() < 3 {
            // Harmonious companions of the main colour.
            let a = acc[0];
            let spread = if m.mono { 0.0 } else { rng.range(0.05, 0.12) };
            acc.push(a.shift_hue(spread).lighten(0.25));
            acc.push(a.shift_hue(-spread).darken(0.3));
        }
        // Palette emphasis differs by variant: rotate which accent leads
        // (named colours keep the lead on even variants).
        if acc.len() > 1 && variant % 2 == 1 {
            let k = 1 + (variant as usize / 2) % (acc.len() - 1);
            let k = k.min(acc.len() - 1);
            acc.rotate_left(k);
        }

        let mut sky: Vec<Rgb> = if !t.bg.is_empty() {
            let c = t.bg[0];
            if t.bg.len() == 1 {
                vec![c.darken(0.12), c, c.lighten(0.08)]
            } else {
                t.bg.clone()
            }
        } else if !t.sky.is_empty() {
            let mut s = t.sky.clone();
            // Skies darken upwards: order the stops by lightness.
            s.sort_by(|a, b| a.lum().total_cmp(&b.lum()));
            if let Some(&n) = t.named.first() {
                for c in s.iter_mut() {
                    *c = c.mix(n, 0.35);
                }
            }
            s
        } else if m.night {
            vec![Rgb::hex(0x04061a), Rgb::hex(0x0f1840), Rgb::hex(0x26306a)]
        } else {
            let a = acc[0];
            let b = acc.get(1).copied().unwrap_or(a);
            vec![a.darken(0.35), a.mix(b, 0.3), a.lighten(0.35)]
        };
        if sky.len() == 1 {
            let c = sky[0];
            sky = vec![c.darken(0.15), c, c.lighten(0.15)];
        }
        // Slight hue/lightness jitter per seed and variant keeps pictures alive.
        let dh = rng.range(-0.02, 0.02) + (variant as f32 - 1.5) * 0.008;
        let adjust = |c: Rgb, is_sky: bool| -> Rgb {
            let mut c = c.shift_hue(dh);
            if m.mono {
                let l = c.lum();
                let tint = t.named.first().copied().unwrap_or(Rgb::hex(0x808080));
                c = Rgb { r: l, g: l, b: l }.mix(tint, 0.12);
            }
            if m.muted {
                c = c.saturate(0.55);
            }
            if m.pastel {
                c = c.lighten(0.45).saturate(0.85);
            }
            if m.neon && !is_sky {
                c = c.saturate(1.6);
            }
            if m.bright {
                c = c.saturate(1.3).lighten(0.06);
            }
            if m.dark {
                c = c.darken(if is_sky { 0.55 } else { 0.3 });
            }
            if m.warm {
                c = c.mix(Rgb::hex(0xff9a40), 0.1);
            }
            if m.cool {
                c = c.mix(Rgb::hex(0x4a8ad8), 0.1);
            }
            c
        };
        let lead = acc[0];
        let sky: Vec<Rgb> = sky
            .into_iter()
            .map(|c| {
                // Palette emphasis per variant: as is, lighter, leaning on the
                // lead colour, deeper.
                // A background the prompt names ("on black") stays close to it.
                let k = if t.bg.is_empty() { 1.0 } else { 0.3 };
                let c = match variant % 4 {
                    0 => c,
                    1 => c.lighten(0.12 * k),
                    2 => c.mix(lead, 0.22 * k),
                    _ => c.darken(0.18 * k).saturate(1.0 + 0.15 * k),
                };
                adjust(c, true)
            })
            .collect();
        let acc: Vec<Rgb> = acc.into_iter().map(|c| adjust(c, false)).collect();
        let avg = sky.iter().map(|c| c.lum()).sum::<f32>() / sky.len() as f32;
        Palette {
            dark_bg: avg < 0.25,
            sky,
            acc,
        }
    }

    pub(super) fn acc(&self, i: usize) -> Rgb {
        self.acc[i % self.acc.len()]
    }

    /// Background colour at relative height `t` (0 top, 1 bottom).
    pub(super) fn sky_at(&self, t: f32) -> Rgb {
        let n = self.sky.len();
        if n == 1 {
            return self.sky[0];
        }
        let x = clamp01(t) * (n - 1) as f32;
        let i = (x.floor() as usize).min(n - 2);
        self.sky[i].mix(self.sky[i + 1], x - i as f32)
    }

    /// The darkest accent.
    pub(super) fn darkest(&self) -> Rgb {
        let mut best = self.acc[0];
        for &c in &self.acc {
            if c.lum() < best.lum() {
                best = c;
            }
        }
        best
    }

    /// The accent that contrasts most with the background at `t`.
    pub(super) fn contrast(&self, t: f32) -> Rgb {
        let bg = self.sky_at(t).lum();
        let mut best = self.acc[0];
        for &c in self.acc.iter().take(4) {
            if (c.lum() - bg).abs() > (best.lum() - bg).abs() + 0.15 {
                best = c;
            }
        }
        best
    }
}
