//! Upscaling with invented detail: the Catmull-Rom enlargement, sharpened by unsharp masking
//! against a soft B-spline enlargement of the same source, plus seeded fine grain whose strength
//! follows the local contrast of the source (busy areas gain texture, flat sky stays calm).
//! The output is made and PNG-encoded in bands of rows through png's StreamWriter, so memory is
//! the source, a few rows and the compressed file, never the whole enlarged RGBA buffer.

use std::io::Write;

use crate::images::RgbaImage;

use super::resize::Resampler;
use super::{hash, luma, to_u8, unit, usable, value_noise, Detail};

/// Rows resampled and handed to the encoder at a time.
const BAND_ROWS: usize = 32;

/// Largest side PNG allows.
const PNG_MAX_SIDE: u64 = (1 << 31) - 1;

/// How strongly each detail level sharpens and how much grain (in 0..=255 levels) it adds.
fn params(detail: Detail) -> (f32, f32) {
    match detail {
        Detail::Subtle => (0.3, 2.5),
        Detail::Creative => (1.0, 10.0),
    }
}

/// Per-source-pixel local contrast in [0, 1]: the mean absolute luma step to the four
/// neighbours, scaled so a clear edge is near 1.
fn contrast_map(src: &RgbaImage) -> Vec<f32> {
    let (w, h) = (src.width as usize, src.height as usize);
    let l: Vec<f32> = src
        .data
        .chunks_exact(4)
        .map(|p| luma([p[0], p[1], p[2], p[3]]))
        .collect();
    let mut out = vec![0f32; w * h];
    for y in 0..h {
        for x in 0..w {
            let c = l[y * w + x];
            let n = [
                l[y * w + x.saturating_sub(1)],
                l[y * w + (x + 1).min(w - 1)],
                l[y.saturating_sub(1) * w + x],
                l[(y + 1).min(h - 1) * w + x],
            ];
            let d: f32 = n.iter().map(|v| (v - c).abs()).sum::<f32>() / 4.0;
            out[y * w + x] = (d / 24.0).min(1.0);
        }
    }
    out
}

/// Bilinear lookup of the contrast map at output pixel (ox, oy).
fn contrast_at(map: &[f32], w: usize, h: usize, factor: f32, ox: usize, oy: usize) -> f32 {
    let fx = ((ox as f32 + 0.5) / factor - 0.5).clamp(0.0, (w - 1) as f32);
    let fy = ((oy as f32 + 0.5) / factor - 0.5).clamp(0.0, (h - 1) as f32);
    let (x0, y0) = (fx as usize, fy as usize);
    let (x1, y1) = ((x0 + 1).min(w - 1), (y0 + 1).min(h - 1));
    let (tx, ty) = (fx - x0 as f32, fy - y0 as f32);
    let top = map[y0 * w + x0] * (1.0 - tx) + map[y0 * w + x1] * tx;
    let bottom = map[y1 * w + x0] * (1.0 - tx) + map[y1 * w + x1] * tx;
    top * (1.0 - ty) + bottom * ty
}

/// `src` enlarged `factor` times (clamped to 1..=4; 2 and 4 are the ones used) with added
/// detail, as PNG file bytes: RGB when `src` is fully opaque, RGBA otherwise. `Detail::Creative`
/// sharpens harder and adds clearly more grain than `Detail::Subtle`. Deterministic in
/// (`src`, `factor`, `detail`, `seed`). An empty or malformed `src` (or an output too large for
/// PNG) gives an empty `Vec`.
pub fn upscale_png(src: &RgbaImage, factor: u32, detail: Detail, seed: u64) -> Vec<u8> {
    if !usable(src) {
        return Vec::new();
    }
    let factor = factor.clamp(1, 4);
    let (ow, oh) = (
        u64::from(src.width) * u64::from(factor),
        u64::from(src.height) * u64::from(factor),
    );
    if ow > PNG_MAX_SIDE || oh > PNG_MAX_SIDE {
        return Vec::new();
    }
    let (ow, oh) = (ow as u32, oh as u32);
    let opaque = src.data.chunks_exact(4).all(|p| p[3] == 255);
    let mut out = Vec::new();
    match encode(src, ow, oh, factor, detail, seed, opaque, &mut out) {
        Ok(()) => out,
        Err(_) => Vec::new(),
    }
}

#[allow(clippy::too_many_arguments)]
fn encode(
    src: &RgbaImage,
    ow: u32,
    oh: u32,
    factor: u32,
    detail: Detail,
    seed: u64,
    opaque: bool,
    out: &mut Vec<u8>,
) -> Result<(), png::EncodingError> {
    let (sharpen, grain) = params(detail);
    let seed = hash(seed, &[0x0075_7073_6361_6c65, u64::from(factor)]);
    let map = contrast_map(src);
    let (sw, sh) = (src.width as usize, src.height as usize);
    let fac = factor as f32;
    // The grain's soft component has a feature size of about two output pixels.
    let grain_scale = 0.55f32;

    let mut encoder = png::Encoder::new(out, ow, oh);
    encoder.set_color(if opaque {
        png::ColorType::Rgb
    } else {
        png::ColorType::Rgba
    });
    encoder.set_depth(png::BitDepth::Eight);
    encoder.set_compression(png::Compression::Fast);
    encoder.set_filter(png::FilterType::Sub);
    encoder.set_adaptive_filter(png::AdaptiveFilterType::NonAdaptive);
    let mut writer = encoder.write_header()?;
    let channels = if opaque { 3 } else { 4 };
    let (owu, ohu) = (ow as usize, oh as usize);
    {
        let mut stream = writer.stream_writer()?;
        let mut sharp = Resampler::new(src, ow, oh);
        let mut soft = Resampler::smooth(src, ow, oh, 1.0);
        let mut a = vec![0f32; owu * 4];
        let mut b = vec![0f32; owu * 4];
        let mut band = Vec::with_capacity(BAND_ROWS * owu * channels);
        for y in 0..ohu {
            sharp.row(y, &mut a);
            soft.row(y, &mut b);
            for (x, (pa, pb)) in a.chunks_exact(4).zip(b.chunks_exact(4)).enumerate() {
                let alpha = pa[3].clamp(0.0, 255.0);
                let px = if alpha < 0.5 {
                    [0u8; 4]
                } else {
                    // Unsharp mask on the premultiplied values, then back to straight colour.
                    let k = 255.0 / alpha;
                    let c = contrast_at(&map, sw, sh, fac, x, y);
                    let white = unit(hash(seed, &[x as u64, y as u64]));
                    let smooth =
                        value_noise(seed ^ 1, x as f32 * grain_scale, y as f32 * grain_scale);
                    let g = grain * (0.25 + 0.75 * c) * (0.55 * white + 0.45 * smooth);
                    let mut o = [0u8; 4];
                    for ch in 0..3 {
                        let v = pa[ch] + sharpen * (pa[ch] - pb[ch]);
                        o[ch] = to_u8(v * k + g);
                    }
                    o[3] = to_u8(alpha);
                    o
                };
                band.extend_from_slice(&px[..channels]);
            }
            if (y + 1) % BAND_ROWS == 0 || y + 1 == ohu {
                stream.write_all(&band)?;
                band.clear();
            }
        }
        stream.finish()?;
    }
    writer.finish()
}

#[cfg(test)]
mod tests {
    use super::super::resize;
    use super::super::testutil::{mean_abs_diff, scene, solid};
    use super::*;
    use crate::images::decode_png;

    #[test]
    fn sizes_decode_and_colour_type() {
        let img = scene(32, 24);
        for factor in [2, 4] {
            let bytes = upscale_png(&img, factor, Detail::Subtle, 1);
            let out = decode_png(&bytes).expect("decodes");
            assert_eq!((out.width, out.height), (32 * factor, 24 * factor));
            assert_eq!(bytes[25], 2, "opaque source gives RGB");
        }
        let mut alpha = solid(8, 8, [10, 200, 30, 255]);
        alpha.data[3] = 100;
        let bytes = upscale_png(&alpha, 2, Detail::Creative, 1);
        assert_eq!(bytes[25], 6, "transparent source gives RGBA");
        assert_eq!(decode_png(&bytes).unwrap().width, 16);
    }

    #[test]
    fn adds_detail_beyond_a_resize() {
        let img = scene(48, 32);
        let plain = resize(&img, 96, 64);
        let subtle = decode_png(&upscale_png(&img, 2, Detail::Subtle, 5)).unwrap();
        let creative = decode_png(&upscale_png(&img, 2, Detail::Creative, 5)).unwrap();
        let ds = mean_abs_diff(&plain, &subtle);
        let dc = mean_abs_diff(&plain, &creative);
        assert!(ds > 0.2, "subtle differs from a resize: {ds}");
        assert!(ds < 4.0, "subtle stays close to a resize: {ds}");
        assert!(dc > 1.5 * ds, "creative adds more: {dc} vs {ds}");
        // Still the same picture.
        assert!(dc < 12.0, "{dc}");
    }

    #[test]
    fn deterministic_and_seeded() {
        let img = scene(24, 24);
        let a = upscale_png(&img, 4, Detail::Creative, 9);
        assert_eq!(a, upscale_png(&img, 4, Detail::Creative, 9));
        assert_ne!(a, upscale_png(&img, 4, Detail::Creative, 10));
    }

    #[test]
    fn degenerate_sources() {
        assert!(upscale_png(&RgbaImage::new(0, 0), 2, Detail::Subtle, 0).is_empty());
        let one = decode_png(&upscale_png(
            &solid(1, 1, [1, 2, 3, 255]),
            4,
            Detail::Subtle,
            0,
        ));
        assert_eq!(one.unwrap().width, 4);
        let thin = decode_png(&upscale_png(&scene(100, 1), 2, Detail::Creative, 0)).unwrap();
        assert_eq!((thin.width, thin.height), (200, 2));
    }
}
