//! What a prompt's parameters change in a picture: `--no` (see [`Theme::parse_without`]),
//! `--chaos` (the four images of a grid drift apart) and `--tile` (the picture repeats
//! seamlessly), the style codes (palette and shapes) and `--stop` (a partial drawing). Each is deterministic: the same look, prompt and seed give the same pixels.

use super::palette::Palette;
use super::rng::Rng;
use super::theme::Theme;
use super::vocab::FAMILIES;
use crate::images::RgbaImage;

/// How the prompt's parameters shape its pictures.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Look {
    /// What must not be drawn (`--no`), as words.
    pub without: String,
    /// `--chaos`, 0..=100: 0 keeps the four images as close as they always were.
    pub chaos: u32,
    /// `--tile`: opposite edges continue each other.
    pub tile: bool,
    /// The style and personalization codes (`--sref CODE`, `--p`), hashed: they pick the
    /// palette and a shape family, the same for the same codes whatever the prompt.
    pub style: Option<u64>,
    /// `--stop` (and `--draft`, half): the share of the drawing done, in percent; None is all.
    pub stop: Option<u32>,
}

/// What a style code does to a theme: one shape family of its choosing joins the subjects
/// (unless `--no` names it). The palette's seed is the code's, in `draw`.
pub(super) fn apply_style(code: u64, theme: &mut Theme) {
    let fam = FAMILIES[(code % FAMILIES.len() as u64) as usize];
    if !theme.subjects.contains(&fam) && !theme.without.contains(&fam) {
        theme.subjects.insert(0, fam);
    }
}

/// How far round the colour wheel each of the four images turns at chaos 100: all pairs stay
/// within half a turn of each other, so that more chaos always means further apart.
const HUE_TURNS: [f32; 4] = [0.0, 1.0 / 6.0, 1.0 / 3.0, 0.5];

/// Variant `variant`'s share of `chaos`: its palette turned round the colour wheel in
/// proportion, and (more likely as chaos grows) a shape or two the prompt did not ask for.
pub(super) fn apply_chaos(chaos: u32, vseed: u64, variant: u32, theme: &mut Theme) -> f32 {
    if chaos == 0 {
        return 0.0;
    }
    let f = chaos.min(100) as f32 / 100.0;
    let mut rng = Rng(vseed ^ 0xC4A0_5EED);
    for chance in [f, f * 0.5] {
        if rng.chance(chance) {
            let fam = FAMILIES[rng.below(FAMILIES.len())];
            if !theme.subjects.contains(&fam) && !theme.without.contains(&fam) {
                theme.subjects.push(fam);
            }
        }
    }
    f * HUE_TURNS[variant as usize % 4]
}

/// `pal` turned `turns` round the colour wheel.
pub(super) fn turn_palette(pal: &mut Palette, turns: f32) {
    if turns == 0.0 {
        return;
    }
    for c in pal.sky.iter_mut().chain(pal.acc.iter_mut()) {
        *c = c.shift_hue(turns);
    }
}

/// The share of each side a tile's seam is blended over.
const SEAM_SHARE: u32 = 6;

/// The margin drawn beyond a `width` x `height` tile on each axis: its overhang is blended
/// onto the opposite edge.
pub(super) fn tile_margin(width: u32, height: u32) -> (u32, u32) {
    ((width / SEAM_SHARE).max(1), (height / SEAM_SHARE).max(1))
}

/// A `width` x `height` tile from `big`, a picture drawn [`tile_margin`] larger: near the left
/// (top) edge, each pixel fades from the overhang past the right (bottom) edge into the picture
/// itself, so that column 0 is what follows column `width - 1`, and row 0 what follows the last.
pub(super) fn seamless(big: &RgbaImage, width: u32, height: u32) -> RgbaImage {
    let (mx, my) = tile_margin(width, height);
    debug_assert_eq!((big.width, big.height), (width + mx, height + my));
    let px = |img: &RgbaImage, x: u32, y: u32| -> [f32; 4] {
        let i = (y as usize * img.width as usize + x as usize) * 4;
        std::array::from_fn(|c| f32::from(img.data[i + c]))
    };
    let weight = |d: u32, m: u32| smoothstep(d as f32 / m as f32);
    let mix = |a: [f32; 4], b: [f32; 4], t: f32| -> [f32; 4] {
        std::array::from_fn(|c| a[c] + (b[c] - a[c]) * t)
    };
    // Across first, keeping the margin rows below; then down.
    let across = |x: u32, y: u32| -> [f32; 4] {
        if x < mx {
            mix(px(big, x + width, y), px(big, x, y), weight(x, mx))
        } else {
            px(big, x, y)
        }
    };
    let mut data = Vec::with_capacity(width as usize * height as usize * 4);
    for y in 0..height {
        for x in 0..width {
            let v = if y < my {
                mix(across(x, y + height), across(x, y), weight(y, my))
            } else {
                across(x, y)
            };
            data.extend(v.map(|c| c.round().clamp(0.0, 255.0) as u8));
        }
    }
    RgbaImage {
        width,
        height,
        data,
    }
}

fn smoothstep(t: f32) -> f32 {
    let t = t.clamp(0.0, 1.0);
    t * t * (3.0 - 2.0 * t)
}
