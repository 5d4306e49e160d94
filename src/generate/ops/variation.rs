//! Variations: the parent resampled through a seeded, smooth displacement field (shapes shift
//! and bend a little) with gentle, slowly varying brightness and hue shifts on top, so the scene
//! and palette stay while details change. Each k draws its own fields.

use crate::images::RgbaImage;

use super::{fractal_noise, hash, sample_bilinear, to_u8, usable, Strength};

/// (displacement as a fraction of the short side, brightness shift in levels, hue rotation in
/// radians, field frequency in cycles across the short side).
fn params(strength: Strength) -> (f32, f32, f32, f32) {
    match strength {
        Strength::Subtle => (0.012, 5.0, 0.07, 2.5),
        Strength::Strong => (0.045, 16.0, 0.25, 3.5),
    }
}

/// Rotation of an RGB colour about the grey axis by `theta` (small, |theta| < 1), with
/// polynomial sine and cosine so the result is the same everywhere.
fn hue_rotate(rgb: [f32; 3], theta: f32) -> [f32; 3] {
    let t2 = theta * theta;
    let c = 1.0 - t2 / 2.0 + t2 * t2 / 24.0;
    let s = theta * (1.0 - t2 / 6.0 + t2 * t2 / 120.0);
    let third = (1.0 - c) / 3.0;
    let q = 0.577_350_3 * s;
    let [r, g, b] = rgb;
    [
        (c + third) * r + (third - q) * g + (third + q) * b,
        (third + q) * r + (c + third) * g + (third - q) * b,
        (third - q) * r + (third + q) * g + (c + third) * b,
    ]
}

/// Variation `k` (0..4) of `parent`: same size, same scene and palette, details changed.
/// `Strength::Strong` departs clearly further than `Strength::Subtle`. Deterministic in
/// (`parent`, `strength`, `seed`, `k`). An empty or malformed parent is returned as it is.
pub fn variation(parent: &RgbaImage, strength: Strength, seed: u64, k: u32) -> RgbaImage {
    if !usable(parent) {
        return parent.clone();
    }
    let (w, h) = (parent.width as usize, parent.height as usize);
    let short = parent.width.min(parent.height) as f32;
    let (warp, bright, hue, freq) = params(strength);
    // At least about a pixel of movement, so even tiny images change.
    let amp = (warp * short).max(1.2);
    let s = hash(seed, &[0x0076_6172_6961, u64::from(k)]);
    let mut out = RgbaImage::new(parent.width, parent.height);
    for y in 0..h {
        for x in 0..w {
            let u = x as f32 / short * freq;
            let v = y as f32 / short * freq;
            let dx = fractal_noise(s ^ 1, u, v) * amp;
            let dy = fractal_noise(s ^ 2, u + 31.7, v - 11.3) * amp;
            let p = sample_bilinear(parent, x as f32 + 0.5 + dx, y as f32 + 0.5 + dy);
            let b = fractal_noise(s ^ 3, u * 0.7, v * 0.7) * bright;
            let theta = fractal_noise(s ^ 4, u * 0.6 + 5.0, v * 0.6) * hue;
            let rgb = hue_rotate([p[0], p[1], p[2]], theta);
            let o = (y * w + x) * 4;
            out.data[o] = to_u8(rgb[0] + b);
            out.data[o + 1] = to_u8(rgb[1] + b);
            out.data[o + 2] = to_u8(rgb[2] + b);
            out.data[o + 3] = to_u8(p[3]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{mean_abs_diff, scene, solid};
    use super::*;

    #[test]
    fn same_size_differs_from_parent_and_between_k() {
        let parent = scene(64, 48);
        let vs: Vec<RgbaImage> = (0..4)
            .map(|k| variation(&parent, Strength::Subtle, 3, k))
            .collect();
        for (i, v) in vs.iter().enumerate() {
            assert_eq!((v.width, v.height), (64, 48));
            assert!(mean_abs_diff(v, &parent) > 0.5, "variation {i} differs");
            for other in &vs[i + 1..] {
                assert!(mean_abs_diff(v, other) > 0.3);
            }
        }
    }

    #[test]
    fn strong_changes_more_than_subtle() {
        let parent = scene(64, 64);
        for k in 0..4 {
            let subtle = mean_abs_diff(&variation(&parent, Strength::Subtle, 8, k), &parent);
            let strong = mean_abs_diff(&variation(&parent, Strength::Strong, 8, k), &parent);
            assert!(strong > subtle * 1.5, "k={k}: {strong} vs {subtle}");
            // Still the same picture.
            assert!(strong < 40.0, "{strong}");
        }
    }

    #[test]
    fn deterministic_and_degenerate() {
        let parent = scene(32, 32);
        assert_eq!(
            variation(&parent, Strength::Strong, 1, 2),
            variation(&parent, Strength::Strong, 1, 2)
        );
        assert_eq!(
            variation(&RgbaImage::new(0, 0), Strength::Strong, 1, 0),
            RgbaImage::new(0, 0)
        );
        let one = variation(&solid(1, 1, [100, 100, 100, 255]), Strength::Subtle, 1, 0);
        assert_eq!(one.data.len(), 4);
        assert_eq!(variation(&scene(200, 1), Strength::Strong, 1, 3).width, 200);
    }
}
