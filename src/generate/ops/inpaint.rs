//! Inpaint: the parent with its masked pixels redrawn from `fill`. Pixels just inside the mask's
//! edge are blended from the parent toward the fill so the seam is soft; nothing outside the
//! mask changes.

use crate::images::RgbaImage;

use super::usable;

/// How many pixels inside the mask's edge are blended rather than fully replaced.
const FEATHER: u8 = 2;

/// Whether a mask pixel asks for a redraw: alpha >= 128 and luminance
/// (299 R + 587 G + 114 B) / 1000 >= 128 on the straight values.
pub fn mask_redraws(px: [u8; 4]) -> bool {
    let l = (299 * u32::from(px[0]) + 587 * u32::from(px[1]) + 114 * u32::from(px[2])) / 1000;
    px[3] >= 128 && l >= 128
}

/// Whether a mask PNG marks any pixel to redraw, read a row at a time: a request's mask is
/// checked without holding its whole image (as 8-bit, as [`crate::images::decode_png`]
/// reads it).
pub fn png_marks_any(bytes: &[u8]) -> Result<bool, String> {
    let mut decoder = png::Decoder::new(std::io::Cursor::new(bytes));
    decoder.set_transformations(png::Transformations::normalize_to_color8());
    let mut reader = decoder
        .read_info()
        .map_err(|e| format!("is not a valid PNG ({e})"))?;
    let (color, _) = reader.output_color_type();
    while let Some(row) = reader
        .next_row()
        .map_err(|e| format!("is not a valid PNG ({e})"))?
    {
        let data = row.data();
        let marks = match color {
            png::ColorType::Grayscale => data.iter().any(|&v| mask_redraws([v, v, v, 255])),
            png::ColorType::GrayscaleAlpha => data
                .chunks_exact(2)
                .any(|p| mask_redraws([p[0], p[0], p[0], p[1]])),
            png::ColorType::Rgb => data
                .chunks_exact(3)
                .any(|p| mask_redraws([p[0], p[1], p[2], 255])),
            png::ColorType::Rgba => data
                .chunks_exact(4)
                .any(|p| mask_redraws([p[0], p[1], p[2], p[3]])),
            png::ColorType::Indexed => return Err("has a palette left after expansion".into()),
        };
        if marks {
            return Ok(true);
        }
    }
    Ok(false)
}

/// A copy of `parent` whose redrawn pixels (per [`mask_redraws`] on `mask`) come from `fill`,
/// softened toward the parent within a couple of pixels of the mask's inner edge. Every pixel
/// outside the mask stays the parent's, bit for bit. When `mask` or `fill` does not have the
/// parent's size (or any image is malformed) the parent is returned unchanged.
pub fn inpaint(parent: &RgbaImage, mask: &RgbaImage, fill: &RgbaImage) -> RgbaImage {
    let same = |i: &RgbaImage| (i.width, i.height) == (parent.width, parent.height) && usable(i);
    if !usable(parent) || !same(mask) || !same(fill) {
        return parent.clone();
    }
    let (w, h) = (parent.width as usize, parent.height as usize);
    // Chessboard distance to the nearest kept pixel, capped: 0 outside the mask. The image
    // border does not count as an edge, so a full mask is a full redraw.
    let cap = FEATHER + 1;
    let mut d: Vec<u8> = mask
        .data
        .chunks_exact(4)
        .map(|p| {
            if mask_redraws([p[0], p[1], p[2], p[3]]) {
                cap
            } else {
                0
            }
        })
        .collect();
    for y in 0..h {
        for x in 0..w {
            let i = y * w + x;
            if d[i] == 0 {
                continue;
            }
            let mut m = d[i];
            if x > 0 {
                m = m.min(d[i - 1] + 1);
            }
            if y > 0 {
                m = m.min(d[i - w] + 1);
                if x > 0 {
                    m = m.min(d[i - w - 1] + 1);
                }
                if x + 1 < w {
                    m = m.min(d[i - w + 1] + 1);
                }
            }
            d[i] = m;
        }
    }
    for y in (0..h).rev() {
        for x in (0..w).rev() {
            let i = y * w + x;
            if d[i] == 0 {
                continue;
            }
            let mut m = d[i];
            if x + 1 < w {
                m = m.min(d[i + 1] + 1);
            }
            if y + 1 < h {
                m = m.min(d[i + w] + 1);
                if x + 1 < w {
                    m = m.min(d[i + w + 1] + 1);
                }
                if x > 0 {
                    m = m.min(d[i + w - 1] + 1);
                }
            }
            d[i] = m;
        }
    }
    let mut out = parent.clone();
    for (i, &dist) in d.iter().enumerate() {
        if dist == 0 {
            continue;
        }
        let o = i * 4;
        if dist >= cap {
            out.data[o..o + 4].copy_from_slice(&fill.data[o..o + 4]);
        } else {
            // Fill weight (dist + 1) / (cap + 1), in integers.
            let t = u32::from(dist) + 1;
            let n = u32::from(cap) + 1;
            for c in 0..4 {
                let p = u32::from(parent.data[o + c]);
                let f = u32::from(fill.data[o + c]);
                out.data[o + c] = ((p * (n - t) + f * t + n / 2) / n) as u8;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{scene, scene_of, solid};
    use super::*;

    fn png_of(w: u32, h: u32, color: png::ColorType, depth: png::BitDepth, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut encoder = png::Encoder::new(&mut out, w, h);
        encoder.set_color(color);
        encoder.set_depth(depth);
        let mut writer = encoder.write_header().unwrap();
        writer.write_image_data(data).unwrap();
        writer.finish().unwrap();
        out
    }

    #[test]
    fn a_mask_is_checked_row_by_row_in_every_color_type() {
        use png::{BitDepth, ColorType};
        let mut rgba = vec![0u8; 4 * 4 * 4];
        assert!(!png_marks_any(&png_of(4, 4, ColorType::Rgba, BitDepth::Eight, &rgba)).unwrap());
        rgba[4 * 4 * 3 + 4..4 * 4 * 3 + 8].copy_from_slice(&[255, 255, 255, 255]);
        assert!(png_marks_any(&png_of(4, 4, ColorType::Rgba, BitDepth::Eight, &rgba)).unwrap());
        // Light but transparent marks nothing.
        let faint = [255u8, 255, 255, 10].repeat(16);
        assert!(!png_marks_any(&png_of(4, 4, ColorType::Rgba, BitDepth::Eight, &faint)).unwrap());
        // 16-bit grey, white in its last pixel.
        let mut grey16 = vec![0u8; 4 * 4 * 2];
        grey16[30..32].copy_from_slice(&[0xff, 0xff]);
        assert!(png_marks_any(&png_of(
            4,
            4,
            ColorType::Grayscale,
            BitDepth::Sixteen,
            &grey16
        ))
        .unwrap());
        assert!(!png_marks_any(&png_of(4, 4, ColorType::Rgb, BitDepth::Eight, &[0; 48])).unwrap());
        assert!(png_marks_any(b"not a png").is_err());
    }

    fn circle_mask(w: u32, h: u32) -> RgbaImage {
        let mut m = solid(w, h, [0, 0, 0, 255]);
        for y in 0..h {
            for x in 0..w {
                let (dx, dy) = (x as i64 - w as i64 / 2, y as i64 - h as i64 / 2);
                if dx * dx + dy * dy < 15 * 15 {
                    let o = ((y * w + x) * 4) as usize;
                    m.data[o..o + 4].copy_from_slice(&[255, 255, 255, 255]);
                }
            }
        }
        m
    }

    #[test]
    fn mask_rule() {
        assert!(mask_redraws([255, 255, 255, 255]));
        assert!(mask_redraws([128, 128, 128, 128]));
        assert!(!mask_redraws([127, 127, 127, 255]));
        assert!(!mask_redraws([255, 255, 255, 127]));
        // Luminance, not the mean: pure green is bright, pure blue is not.
        assert!(mask_redraws([0, 255, 0, 255]));
        assert!(!mask_redraws([0, 0, 255, 255]));
    }

    #[test]
    fn outside_kept_inside_filled() {
        let parent = scene(64, 48);
        let fill = scene_of("a red balloon", 64, 48);
        let mask = circle_mask(64, 48);
        let out = inpaint(&parent, &mask, &fill);
        let mut changed = 0;
        for (i, m) in mask.data.chunks_exact(4).enumerate() {
            let o = i * 4;
            if !mask_redraws([m[0], m[1], m[2], m[3]]) {
                assert_eq!(&out.data[o..o + 4], &parent.data[o..o + 4], "pixel {i}");
            } else if out.data[o..o + 4] != parent.data[o..o + 4] {
                changed += 1;
            }
        }
        assert!(changed > 300, "{changed}");
        // The centre, far from the mask's edge, is the fill's.
        let c = ((24 * 64 + 32) * 4) as usize;
        assert_eq!(&out.data[c..c + 4], &fill.data[c..c + 4]);
    }

    #[test]
    fn full_mask_is_fill_and_empty_mask_is_parent() {
        let parent = scene(32, 32);
        let fill = scene_of("green hills", 32, 32);
        assert_eq!(
            inpaint(&parent, &solid(32, 32, [255, 255, 255, 255]), &fill),
            fill
        );
        assert_eq!(
            inpaint(&parent, &solid(32, 32, [0, 0, 0, 0]), &fill),
            parent
        );
    }

    #[test]
    fn size_mismatch_returns_parent() {
        let parent = scene(32, 32);
        let fill = scene(32, 32);
        assert_eq!(inpaint(&parent, &solid(31, 32, [255; 4]), &fill), parent);
        assert_eq!(
            inpaint(&parent, &solid(32, 32, [255; 4]), &scene(16, 16)),
            parent
        );
        let empty = RgbaImage::new(0, 0);
        assert_eq!(inpaint(&empty, &empty, &empty), empty);
    }
}
