//! Pure image operations of the built-in procedural generator: resampling, upscaling,
//! variations, pan and outpaint, inpaint, blend, describe and shorten. Everything here is
//! synchronous CPU code on straight-alpha [`RgbaImage`]s and deterministic: the same inputs give
//! the same bytes on every run, from a private PRNG and plain arithmetic (no platform libm).
//! No function panics on odd sizes (0x0, 1x1, extreme ratios) or malformed images.

mod blend;
mod describe;
mod extend;
mod inpaint;
mod prompted;
mod resize;
mod shorten;
mod upscale;
mod variation;

#[cfg(test)]
mod testutil;

pub use blend::blend;
pub use describe::describe;
pub use extend::{outpaint, outpaint_placement, pan, pan_size};
pub use inpaint::{inpaint, mask_redraws, png_marks_any};
pub use prompted::{image_prompt_canvas, image_prompt_denoising, image_prompted, image_share};
pub use resize::resize;
pub use shorten::{important_words, shorten};
pub use upscale::upscale_png;
pub use variation::variation;

use crate::images::RgbaImage;

/// How far a variation departs from its parent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Strength {
    Subtle,
    Strong,
}

/// Which side a pan extends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    Up,
    Down,
    Left,
    Right,
}

impl From<crate::domain::operation::PanDirection> for Direction {
    fn from(d: crate::domain::operation::PanDirection) -> Direction {
        use crate::domain::operation::PanDirection;
        match d {
            PanDirection::Up => Direction::Up,
            PanDirection::Down => Direction::Down,
            PanDirection::Left => Direction::Left,
            PanDirection::Right => Direction::Right,
        }
    }
}

/// How much new detail an upscale invents.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Detail {
    Subtle,
    Creative,
}

/// True when `img` holds exactly `width * height * 4` bytes and is not empty; the ops treat
/// anything else as "no picture".
fn usable(img: &RgbaImage) -> bool {
    img.width > 0
        && img.height > 0
        && img.data.len() == img.width as usize * img.height as usize * 4
}

/// splitmix64 finaliser: a well-mixed 64-bit hash of one word.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Hash of a seed and a list of integers, for per-op, per-k and per-lattice-point streams.
fn hash(seed: u64, parts: &[u64]) -> u64 {
    parts.iter().fold(mix(seed), |h, &p| mix(h ^ p))
}

/// splitmix64 PRNG.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(mix(seed))
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn f(&mut self) -> f32 {
        (self.next() >> 40) as f32 / 16_777_216.0
    }

    fn range(&mut self, a: f32, b: f32) -> f32 {
        a + (b - a) * self.f()
    }
}

/// A hash mapped to [-1, 1).
fn unit(h: u64) -> f32 {
    (h >> 40) as f32 / 8_388_608.0 - 1.0
}

fn smoothstep(t: f32) -> f32 {
    let t = t.clamp(0.0, 1.0);
    t * t * (3.0 - 2.0 * t)
}

/// Smooth value noise in [-1, 1]: hashed lattice values at integer points, blended with a
/// smoothstep, so it is continuous and has no platform-dependent maths.
fn value_noise(seed: u64, x: f32, y: f32) -> f32 {
    let (fx, fy) = (x.floor(), y.floor());
    let (tx, ty) = (smoothstep(x - fx), smoothstep(y - fy));
    // Lattice coordinates wrap as integers; the casts saturate for absurd inputs.
    let (ix, iy) = (fx as i64, fy as i64);
    let at = |dx: i64, dy: i64| {
        unit(hash(
            seed,
            &[ix.wrapping_add(dx) as u64, iy.wrapping_add(dy) as u64],
        ))
    };
    let top = at(0, 0) + (at(1, 0) - at(0, 0)) * tx;
    let bottom = at(0, 1) + (at(1, 1) - at(0, 1)) * tx;
    top + (bottom - top) * ty
}

/// Two octaves of value noise, roughly in [-1, 1].
fn fractal_noise(seed: u64, x: f32, y: f32) -> f32 {
    (value_noise(seed, x, y) * 2.0 + value_noise(seed ^ 0x5151, x * 2.03 + 7.1, y * 2.03 + 3.7))
        / 3.0
}

/// Pixel (x, y) of a usable image.
fn px(img: &RgbaImage, x: usize, y: usize) -> [u8; 4] {
    let o = (y * img.width as usize + x) * 4;
    [
        img.data[o],
        img.data[o + 1],
        img.data[o + 2],
        img.data[o + 3],
    ]
}

/// Bilinear sample of a usable image at continuous pixel coordinates (pixel centres at +0.5),
/// clamped to the edges, alpha-weighted; returns straight RGBA as f32.
fn sample_bilinear(img: &RgbaImage, x: f32, y: f32) -> [f32; 4] {
    let (w, h) = (img.width as usize, img.height as usize);
    let fx = (x - 0.5).clamp(0.0, (w - 1) as f32);
    let fy = (y - 0.5).clamp(0.0, (h - 1) as f32);
    let (x0, y0) = (fx.floor() as usize, fy.floor() as usize);
    let (x1, y1) = ((x0 + 1).min(w - 1), (y0 + 1).min(h - 1));
    let (tx, ty) = (fx - x0 as f32, fy - y0 as f32);
    let mut acc = [0f32; 4];
    for (xx, yy, wt) in [
        (x0, y0, (1.0 - tx) * (1.0 - ty)),
        (x1, y0, tx * (1.0 - ty)),
        (x0, y1, (1.0 - tx) * ty),
        (x1, y1, tx * ty),
    ] {
        let p = px(img, xx, yy);
        let a = f32::from(p[3]) * wt;
        acc[0] += f32::from(p[0]) * a;
        acc[1] += f32::from(p[1]) * a;
        acc[2] += f32::from(p[2]) * a;
        acc[3] += a;
    }
    unpremultiply(acc)
}

/// Premultiplied (colour * alpha, alpha in 0..=255) to straight.
fn unpremultiply(acc: [f32; 4]) -> [f32; 4] {
    let a = acc[3];
    if a <= 1e-3 {
        [0.0, 0.0, 0.0, 0.0]
    } else {
        [acc[0] / a, acc[1] / a, acc[2] / a, a]
    }
}

/// Round and clamp a channel value to a byte.
fn to_u8(v: f32) -> u8 {
    if v.is_nan() {
        0
    } else {
        (v + 0.5).clamp(0.0, 255.0) as u8
    }
}

fn luma(p: [u8; 4]) -> f32 {
    (299.0 * f32::from(p[0]) + 587.0 * f32::from(p[1]) + 114.0 * f32::from(p[2])) / 1000.0
}
