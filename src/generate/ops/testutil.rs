//! Helpers shared by the ops' unit tests.

use crate::generate::procedural;
use crate::images::RgbaImage;

/// A realistic picture from the procedural generator.
pub(super) fn scene(w: u32, h: u32) -> RgbaImage {
    procedural::render("a lighthouse on a rocky coast at sunset", 7, 0, w, h)
}

pub(super) fn scene_of(prompt: &str, w: u32, h: u32) -> RgbaImage {
    procedural::render(prompt, 11, 1, w, h)
}

pub(super) fn solid(w: u32, h: u32, rgba: [u8; 4]) -> RgbaImage {
    RgbaImage {
        width: w,
        height: h,
        data: rgba.repeat(w as usize * h as usize),
    }
}

/// Mean absolute difference per channel byte of two images of one size.
pub(super) fn mean_abs_diff(a: &RgbaImage, b: &RgbaImage) -> f64 {
    assert_eq!((a.width, a.height), (b.width, b.height));
    let sum: u64 = a
        .data
        .iter()
        .zip(&b.data)
        .map(|(&x, &y)| u64::from(x.abs_diff(y)))
        .sum();
    sum as f64 / a.data.len().max(1) as f64
}

/// Mean of each RGB channel.
pub(super) fn channel_means(img: &RgbaImage) -> [f64; 3] {
    let mut s = [0u64; 3];
    for p in img.data.chunks_exact(4) {
        for c in 0..3 {
            s[c] += u64::from(p[c]);
        }
    }
    let n = (img.data.len() / 4).max(1) as f64;
    s.map(|v| v as f64 / n)
}
