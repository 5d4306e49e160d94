//! The built-in procedural generator: abstract vector pictures drawn from the
//! prompt's words. Words map to colours, palettes, subjects and moods; unknown
//! words still contribute a hue and a shape family from their hash. Everything
//! is drawn with tiny-skia from a private PRNG and private trigonometry, so the
//! same inputs give the same pixels whatever the crate versions.

mod art;
mod color;
mod figures;
mod land;
mod look;
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

use crate::images::RgbaImage;

use art::Art;
use color::Rgb;
use palette::Palette;
use rng::{clamp01, seed_hash, Rng};
use theme::Theme;

pub use look::Look;

/// Render variant `variant` (0..4) of the picture for `prompt` with `seed`, at width x height.
/// Deterministic: same (prompt, seed, variant, width, height) => identical pixels on every run/platform.
pub fn render(prompt: &str, seed: u64, variant: u32, width: u32, height: u32) -> RgbaImage {
    render_look(prompt, seed, variant, width, height, &Look::default())
}

/// [`render`], shaped by the prompt's parameters (`look`); the default look is [`render`]'s
/// picture. Deterministic in the same way.
pub fn render_look(
    prompt: &str,
    seed: u64,
    variant: u32,
    width: u32,
    height: u32,
    look: &Look,
) -> RgbaImage {
    if !look.tile || width < 2 || height < 2 {
        return draw(prompt, seed, variant, width, height, look);
    }
    // Drawn larger, and the overhang blended onto the opposite edges.
    let (mx, my) = look::tile_margin(width, height);
    let big = draw(prompt, seed, variant, width + mx, height + my, look);
    look::seamless(&big, width, height)
}

fn draw(prompt: &str, seed: u64, variant: u32, width: u32, height: u32, look: &Look) -> RgbaImage {
    let mut theme = Theme::parse_without(prompt, &look.without);
    if let Some(code) = look.style {
        look::apply_style(code, &mut theme);
    }
    // A style code's palette is the code's, whatever the prompt and seed.
    let base = look.style.unwrap_or_else(|| seed_hash(prompt, seed, None));
    let vseed = seed_hash(prompt, seed, Some(variant));
    let turns = look::apply_chaos(look.chaos, vseed, variant, &mut theme);
    let mut pal = Palette::build(&theme, base, variant);
    look::turn_palette(&mut pal, turns);
    let Some(pm) = Pixmap::new(width, height) else {
        return flat(width, height, pal.sky[0]);
    };
    let mut art = Art::new(pm, Rng(vseed), pal, theme.m);
    art.tile = look.tile;
    art.stop = look.stop.unwrap_or(100).min(100);
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
