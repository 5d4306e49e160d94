//! The built-in procedural generator: abstract vector pictures drawn from the
//! prompt's words. Words map to colours, palettes, subjects and moods; unknown
//! words still contribute a hue and a shape family from their hash. Everything
//! is drawn with tiny-skia from a private PRNG and private trigonometry, so the
//! same inputs give the same pixels whatever the crate versions.

mod art;
mod color;
mod figures;
mod land;
mod nature;
mod palette;
mod patterns;
mod rng;
mod scene;
mod shapes;
mod sky;
mod theme;
mod urban;
mod vocab;

#[cfg(test)]
mod tests;

use tiny_skia::Pixmap;

use crate::generate::raster::RgbaImage;

use art::Art;
use color::Rgb;
use palette::Palette;
use rng::{clamp01, seed_hash, Rng};
use theme::Theme;

/// Render variant `variant` (0..4) of the picture for `prompt` with `seed`, at width x height.
/// Deterministic: same (prompt, seed, variant, width, height) => identical pixels on every run/platform.
pub fn render(prompt: &str, seed: u64, variant: u32, width: u32, height: u32) -> RgbaImage {
    let theme = Theme::parse(prompt);
    let base = seed_hash(prompt, seed, None);
    let vseed = seed_hash(prompt, seed, Some(variant));
    let pal = Palette::build(&theme, base, variant);
    let Some(pm) = Pixmap::new(width, height) else {
        return flat(width, height, pal.sky[0]);
    };
    let mut art = Art::new(pm, Rng(vseed), pal, theme.m);
    art.paint(&theme);
    to_straight(&art.pm, width, height)
}

/// A flat image for sizes tiny-skia cannot allocate.
fn flat(width: u32, height: u32, c: Rgb) -> RgbaImage {
    let px = [to_u8(c.r), to_u8(c.g), to_u8(c.b), 255];
    let len = width as usize * height as usize;
    RgbaImage {
        width,
        height,
        data: px.repeat(len),
    }
}

fn to_u8(v: f32) -> u8 {
    (clamp01(v) * 255.0 + 0.5) as u8
}

/// Premultiplied tiny-skia pixels to straight RGBA.
fn to_straight(pm: &Pixmap, width: u32, height: u32) -> RgbaImage {
    let mut data = pm.data().to_vec();
    for px in data.chunks_exact_mut(4) {
        let a = u32::from(px[3]);
        if a == 0 {
            px.copy_from_slice(&[0, 0, 0, 0]);
        } else if a < 255 {
            for c in px.iter_mut().take(3) {
                *c = ((u32::from(*c) * 255 + a / 2) / a).min(255) as u8;
            }
        }
    }
    RgbaImage {
        width,
        height,
        data,
    }
}
