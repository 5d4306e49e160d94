//! Blend: the inputs, each scaled to cover the canvas and centre-cropped, mixed by smooth
//! seeded weight fields. Every input owns a few seeded sites spread over the canvas; a pixel's
//! weight for an input falls off with the distance to its nearest sites (a soft Voronoi), and the
//! distances are measured in coordinates bent by low-frequency noise, so the regions have
//! organic borders. Each input thus shows its colours and part of its composition.

use crate::images::RgbaImage;

use super::{fractal_noise, hash, resize, to_u8, usable, Rng};

/// Sites per input.
const SITES: usize = 2;

/// `img` scaled to cover `w` x `h` (both > 0) and centre-cropped.
fn cover(img: &RgbaImage, w: u32, h: u32) -> RgbaImage {
    let (iw, ih) = (f64::from(img.width), f64::from(img.height));
    let scale = (f64::from(w) / iw).max(f64::from(h) / ih);
    let cw = ((f64::from(w) / scale).round() as u32).clamp(1, img.width);
    let ch = ((f64::from(h) / scale).round() as u32).clamp(1, img.height);
    // A crop of the whole image is the image: no copy of it (it may be 25 megapixels).
    if (cw, ch) == (img.width, img.height) {
        return resize(img, w, h);
    }
    let (cx, cy) = ((img.width - cw) / 2, (img.height - ch) / 2);
    let mut data = Vec::with_capacity(cw as usize * ch as usize * 4);
    for y in cy..cy + ch {
        let o = (y as usize * img.width as usize + cx as usize) * 4;
        data.extend_from_slice(&img.data[o..o + cw as usize * 4]);
    }
    let crop = RgbaImage {
        width: cw,
        height: ch,
        data,
    };
    resize(&crop, w, h)
}

/// Image `k` (0..4) of a `w` x `h` blend of `inputs` (meant for 2..=5). Empty or malformed
/// inputs are skipped; with none left the result is opaque black, with one it is that input
/// covering the canvas. Deterministic in (`inputs`, `w`, `h`, `seed`, `k`).
pub fn blend(inputs: &[RgbaImage], w: u32, h: u32, seed: u64, k: u32) -> RgbaImage {
    if w == 0 || h == 0 {
        return RgbaImage {
            width: w,
            height: h,
            data: Vec::new(),
        };
    }
    let imgs: Vec<RgbaImage> = inputs
        .iter()
        .filter(|i| usable(i))
        .map(|i| cover(i, w, h))
        .collect();
    match imgs.len() {
        0 => return RgbaImage::new(w, h),
        1 => {
            return imgs
                .into_iter()
                .next()
                .unwrap_or_else(|| RgbaImage::new(w, h))
        }
        _ => {}
    }
    let s = hash(seed, &[0x0062_6c65_6e64, u64::from(k), imgs.len() as u64]);
    let mut rng = Rng::new(s);
    // Sites on a jittered grid of at least n * SITES cells, dealt to the inputs in a seeded
    // order, so each input gets its own part of the canvas.
    let n = imgs.len();
    let total = n * SITES;
    let aspect = w as f32 / h as f32;
    let mut cols = 1usize;
    while cols < total && ((cols * cols) as f32) < total as f32 * aspect {
        cols += 1;
    }
    let rows = total.div_ceil(cols);
    let mut cells: Vec<usize> = (0..cols * rows).collect();
    for i in (1..cells.len()).rev() {
        let j = (rng.next() % (i as u64 + 1)) as usize;
        cells.swap(i, j);
    }
    // Site positions in units of the canvas height.
    let sites: Vec<(usize, f32, f32)> = (0..total)
        .map(|i| {
            let cell = cells[i];
            let (cx, cy) = ((cell % cols) as f32, (cell / cols) as f32);
            let x = (cx + rng.range(0.2, 0.8)) / cols as f32 * aspect;
            let y = (cy + rng.range(0.2, 0.8)) / rows as f32;
            (i % n, x, y)
        })
        .collect();
    let softness = 0.02f32;
    let hf = h as f32;
    let mut out = RgbaImage::new(w, h);
    let mut weights = vec![0f32; n];
    for y in 0..h as usize {
        for x in 0..w as usize {
            let u = (x as f32 + 0.5) / hf;
            let v = (y as f32 + 0.5) / hf;
            let qu = u + 0.12 * fractal_noise(s ^ 1, u * 2.5, v * 2.5);
            let qv = v + 0.12 * fractal_noise(s ^ 2, u * 2.5 + 9.0, v * 2.5);
            weights.iter_mut().for_each(|wt| *wt = 0.0);
            for &(i, sx, sy) in &sites {
                let d2 = (qu - sx) * (qu - sx) + (qv - sy) * (qv - sy) + softness;
                weights[i] += 1.0 / (d2 * d2);
            }
            let sum: f32 = weights.iter().sum();
            let o = (y * w as usize + x) * 4;
            let mut acc = [0f32; 4];
            for (img, &wt) in imgs.iter().zip(&weights) {
                let wt = wt / sum;
                let p = &img.data[o..o + 4];
                let a = f32::from(p[3]) * wt;
                acc[0] += f32::from(p[0]) * a;
                acc[1] += f32::from(p[1]) * a;
                acc[2] += f32::from(p[2]) * a;
                acc[3] += a;
            }
            if acc[3] < 0.5 {
                out.data[o..o + 4].copy_from_slice(&[0, 0, 0, 0]);
            } else {
                for c in 0..3 {
                    out.data[o + c] = to_u8(acc[c] / acc[3]);
                }
                out.data[o + 3] = to_u8(acc[3]);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{channel_means, mean_abs_diff, scene, scene_of, solid};
    use super::*;

    #[test]
    fn size_determinism_and_k() {
        let inputs = [
            scene(64, 48),
            scene_of("a forest of tall pine trees", 48, 64),
        ];
        let a = blend(&inputs, 64, 64, 2, 0);
        assert_eq!((a.width, a.height), (64, 64));
        assert_eq!(a, blend(&inputs, 64, 64, 2, 0));
        for k in 1..4 {
            assert!(
                mean_abs_diff(&a, &blend(&inputs, 64, 64, 2, k)) > 1.0,
                "k={k}"
            );
        }
    }

    #[test]
    fn colours_of_all_inputs_appear() {
        let red = solid(40, 30, [220, 20, 20, 255]);
        let blue = solid(30, 40, [20, 20, 220, 255]);
        let green = solid(50, 50, [20, 200, 20, 255]);
        let out = blend(&[red, blue, green], 64, 48, 7, 1);
        let m = channel_means(&out);
        for c in m {
            assert!((20.0..=220.0).contains(&c), "{m:?}");
        }
        // Each input dominates somewhere.
        for want in [[220, 20, 20], [20, 20, 220], [20, 200, 20]] {
            let near = out
                .data
                .chunks_exact(4)
                .any(|p| (0..3).all(|c| (i32::from(p[c]) - want[c]).abs() < 40));
            assert!(near, "{want:?}");
        }
    }

    #[test]
    fn means_lie_between_two_inputs() {
        let a = solid(16, 16, [200, 40, 90, 255]);
        let b = solid(16, 16, [10, 180, 120, 255]);
        for k in 0..4 {
            let m = channel_means(&blend(&[a.clone(), b.clone()], 32, 24, 3, k));
            assert!((10.0..=200.0).contains(&m[0]) && m[0] > 15.0 && m[0] < 195.0);
            assert!(m[1] > 45.0 && m[1] < 175.0, "{m:?}");
            assert!((90.0..=120.0).contains(&m[2]), "{m:?}");
        }
    }

    #[test]
    fn degenerate_inputs() {
        assert_eq!(blend(&[], 4, 4, 0, 0), RgbaImage::new(4, 4));
        assert!(blend(&[scene(8, 8)], 0, 4, 0, 0).data.is_empty());
        let one = blend(
            &[solid(3, 3, [1, 2, 3, 255]), RgbaImage::new(0, 0)],
            5,
            2,
            0,
            0,
        );
        assert_eq!(one, solid(5, 2, [1, 2, 3, 255]));
        let odd = blend(&[scene(300, 2), scene(1, 1), scene(2, 300)], 17, 5, 0, 0);
        assert_eq!(odd.data.len(), 17 * 5 * 4);
    }
}
