//! Resizing for the operations: [`resize`] is the `image` crate's Catmull-Rom (through
//! [`images::resize`](crate::images::resize), premultiplied by alpha). [`Resampler`] is the same cubic family computed
//! one output row at a time, which the upscaler needs to stream an enlargement into its PNG
//! without holding the whole result; nothing else uses it.

use crate::images::{self, Filter, RgbaImage};

use super::usable;

/// Weights of one axis: for each output index, the first source index and its weights.
struct Axis {
    taps: Vec<(usize, usize, usize)>,
    weights: Vec<f32>,
}

/// The Mitchell-Netravali cubic with parameters (b, c).
fn cubic(x: f32, b: f32, c: f32) -> f32 {
    let x = x.abs();
    if x < 1.0 {
        ((12.0 - 9.0 * b - 6.0 * c) * x * x * x
            + (-18.0 + 12.0 * b + 6.0 * c) * x * x
            + (6.0 - 2.0 * b))
            / 6.0
    } else if x < 2.0 {
        ((-b - 6.0 * c) * x * x * x
            + (6.0 * b + 30.0 * c) * x * x
            + (-12.0 * b - 48.0 * c) * x
            + (8.0 * b + 24.0 * c))
            / 6.0
    } else {
        0.0
    }
}

impl Axis {
    /// Weights for resampling `src` samples to `dst` (both > 0) with the (b, c) cubic widened
    /// by `blur` (1 = the plain filter).
    fn new(src: u32, dst: u32, b: f32, c: f32, blur: f32) -> Axis {
        let scale = f64::from(src) / f64::from(dst);
        let fscale = scale.max(1.0) * f64::from(blur);
        let support = 2.0 * fscale;
        let last = src as i64 - 1;
        let mut taps = Vec::with_capacity(dst as usize);
        let mut weights = Vec::new();
        for o in 0..dst {
            let centre = (f64::from(o) + 0.5) * scale;
            let lo = (centre - support).floor() as i64;
            let hi = (centre + support).ceil() as i64;
            let start = lo.clamp(0, last);
            let end = hi.clamp(0, last);
            let off = weights.len();
            let n = (end - start + 1) as usize;
            weights.resize(off + n, 0f32);
            let mut sum = 0f32;
            for i in lo..=hi {
                let w = cubic(((i as f64 + 0.5 - centre) / fscale) as f32, b, c);
                weights[off + (i.clamp(0, last) - start) as usize] += w;
                sum += w;
            }
            if sum.abs() < 1e-6 {
                // Cannot happen for these kernels; fall back to the nearest sample.
                weights[off..off + n].iter_mut().for_each(|w| *w = 0.0);
                let near = (centre as i64).clamp(start, end);
                weights[off + (near - start) as usize] = 1.0;
            } else {
                weights[off..off + n].iter_mut().for_each(|w| *w /= sum);
            }
            taps.push((start as usize, off, n));
        }
        Axis { taps, weights }
    }

    fn get(&self, o: usize) -> (usize, &[f32]) {
        let (start, off, n) = self.taps[o];
        (start, &self.weights[off..off + n])
    }
}

/// Row-at-a-time resampler of one usable source to `dst_w` x `dst_h`.
pub(super) struct Resampler<'a> {
    src: &'a RgbaImage,
    xs: Axis,
    ys: Axis,
    tmp: Vec<f32>,
}

impl<'a> Resampler<'a> {
    /// Catmull-Rom resampler.
    pub(super) fn new(src: &'a RgbaImage, dst_w: u32, dst_h: u32) -> Resampler<'a> {
        Self::with_kernel(src, dst_w, dst_h, 0.0, 0.5, 1.0)
    }

    /// A soft resampler: the cubic B-spline widened by `blur`, a low-pass companion of [`new`]
    /// for unsharp masking.
    pub(super) fn smooth(src: &'a RgbaImage, dst_w: u32, dst_h: u32, blur: f32) -> Resampler<'a> {
        Self::with_kernel(src, dst_w, dst_h, 1.0, 0.0, blur)
    }

    fn with_kernel(
        src: &'a RgbaImage,
        dst_w: u32,
        dst_h: u32,
        b: f32,
        c: f32,
        blur: f32,
    ) -> Resampler<'a> {
        debug_assert!(usable(src) && dst_w > 0 && dst_h > 0);
        Resampler {
            src,
            xs: Axis::new(src.width, dst_w, b, c, blur),
            ys: Axis::new(src.height, dst_h, b, c, blur),
            tmp: vec![0f32; src.width as usize * 4],
        }
    }

    /// Output row `oy` as premultiplied f32 (colour * alpha / 255, alpha in 0..=255) into `out`
    /// (dst_w * 4 values). Values may overshoot slightly (the cubic's negative lobes).
    pub(super) fn row(&mut self, oy: usize, out: &mut [f32]) {
        let sw = self.src.width as usize;
        self.tmp.iter_mut().for_each(|v| *v = 0.0);
        let (start, wy) = self.ys.get(oy);
        for (j, &w) in wy.iter().enumerate() {
            let row = &self.src.data[(start + j) * sw * 4..(start + j + 1) * sw * 4];
            for (t, p) in self.tmp.chunks_exact_mut(4).zip(row.chunks_exact(4)) {
                let a = f32::from(p[3]);
                let wa = w * a / 255.0;
                t[0] += f32::from(p[0]) * wa;
                t[1] += f32::from(p[1]) * wa;
                t[2] += f32::from(p[2]) * wa;
                t[3] += w * a;
            }
        }
        for (ox, o) in out.chunks_exact_mut(4).enumerate() {
            let (start, wx) = self.xs.get(ox);
            let mut acc = [0f32; 4];
            for (j, &w) in wx.iter().enumerate() {
                let t = &self.tmp[(start + j) * 4..(start + j) * 4 + 4];
                acc[0] += t[0] * w;
                acc[1] += t[1] * w;
                acc[2] += t[2] * w;
                acc[3] += t[3] * w;
            }
            o.copy_from_slice(&acc);
        }
    }
}

/// Resample `src` to `w` x `h` with the alpha-weighted Catmull-Rom cubic (area averaging when
/// shrinking). A zero `w` or `h` gives an image with no pixels; an empty or
/// malformed `src` gives opaque black of the asked size. The same size returns a copy.
pub fn resize(src: &RgbaImage, w: u32, h: u32) -> RgbaImage {
    if w == 0 || h == 0 {
        return RgbaImage {
            width: w,
            height: h,
            data: Vec::new(),
        };
    }
    if !usable(src) {
        return RgbaImage::new(w, h);
    }
    if (src.width, src.height) == (w, h) {
        return src.clone();
    }
    images::resize(src, w, h, Filter::CatmullRom)
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{mean_abs_diff, scene, solid};
    use super::*;

    #[test]
    fn sizes_and_degenerate_inputs() {
        let img = scene(64, 48);
        for (w, h) in [(32, 24), (128, 96), (1, 1), (300, 7), (7, 300)] {
            let r = resize(&img, w, h);
            assert_eq!((r.width, r.height), (w, h));
            assert_eq!(r.data.len(), (w * h * 4) as usize);
        }
        assert!(resize(&img, 0, 10).data.is_empty());
        assert_eq!(resize(&RgbaImage::new(0, 0), 3, 2), RgbaImage::new(3, 2));
        let bad = RgbaImage {
            width: 5,
            height: 5,
            data: vec![1, 2, 3],
        };
        assert_eq!(resize(&bad, 2, 2), RgbaImage::new(2, 2));
        let one = solid(1, 1, [9, 99, 199, 255]);
        assert_eq!(resize(&one, 5, 3), solid(5, 3, [9, 99, 199, 255]));
        let thin = resize(&scene(200, 2), 1, 40);
        assert_eq!(thin.data.len(), 160);
    }

    #[test]
    fn flat_colour_stays_flat_and_identity_is_exact() {
        let flat = solid(17, 9, [200, 30, 60, 255]);
        assert_eq!(resize(&flat, 40, 5), solid(40, 5, [200, 30, 60, 255]));
        let img = scene(32, 32);
        assert_eq!(resize(&img, 32, 32), img);
    }

    #[test]
    fn round_trip_is_close_and_deterministic() {
        let img = scene(64, 48);
        let up = resize(&img, 128, 96);
        assert_eq!(up, resize(&img, 128, 96));
        let back = resize(&up, 64, 48);
        assert!(mean_abs_diff(&img, &back) < 6.0);
    }

    #[test]
    fn transparent_pixels_do_not_bleed() {
        let mut img = solid(4, 4, [255, 255, 255, 255]);
        for p in img.data.chunks_exact_mut(8) {
            p[4..8].copy_from_slice(&[255, 0, 0, 0]);
        }
        let r = resize(&img, 2, 2);
        for p in r.data.chunks_exact(4) {
            assert_eq!(&p[..3], &[255, 255, 255], "{p:?}");
        }
    }
}
