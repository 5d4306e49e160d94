//! Plain raster utilities shared by the generators: an owned straight-alpha
//! RGBA8 image type, aspect-ratio sizing, PNG encoding/decoding and the 2x2
//! preview grid. Nothing in here knows anything about prompts or pictures.

use std::io::Cursor;

/// Largest width or height accepted by [`decode_png`].
pub const MAX_DECODE_SIDE: u32 = 8192;

/// Straight (non-premultiplied) RGBA8 image, row-major, width*height*4 bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RgbaImage {
    pub width: u32,
    pub height: u32,
    pub data: Vec<u8>,
}

impl RgbaImage {
    /// A `width` x `height` image filled with opaque black.
    pub fn new(width: u32, height: u32) -> Self {
        let len = width as usize * height as usize;
        let mut data = vec![0u8; len * 4];
        for px in data.chunks_exact_mut(4) {
            px[3] = 255;
        }
        RgbaImage {
            width,
            height,
            data,
        }
    }

    /// True when `data` holds exactly `width * height * 4` bytes.
    fn is_well_formed(&self) -> bool {
        self.data.len() == self.width as usize * self.height as usize * 4
    }
}

/// Pixel size for an aspect ratio W:H whose long side is `long_side` px.
/// Both results are even and >= 2: the long side is `long_side` rounded to the
/// nearest even number, the short side is the exact proportion rounded to the
/// nearest even number. A zero ratio term is treated as 1.
///
/// e.g. (1,1,1024)->(1024,1024); (16,9,1024)->(1024,576); (2,3,1024)->(682,1024)
pub fn dimensions(aspect_w: u32, aspect_h: u32, long_side: u32) -> (u32, u32) {
    let aw = u128::from(aspect_w.max(1));
    let ah = u128::from(aspect_h.max(1));
    // Nearest even number, at least 2 (u32::MAX rounds down, not up past the type).
    let long = (u128::from(long_side).div_ceil(2) * 2).clamp(2, u128::from(u32::MAX - 1));
    let (big, small) = if aw >= ah { (aw, ah) } else { (ah, aw) };
    // 2 * round(long * small / (2 * big)), in integers.
    let short = ((long * small + big) / (2 * big) * 2).clamp(2, long);
    let (long, short) = (long as u32, short as u32);
    if aw >= ah {
        (long, short)
    } else {
        (short, long)
    }
}

/// Encode as an 8-bit PNG: RGB when every alpha is 255, RGBA otherwise.
/// Uses the fast (fdeflate) compressor with the Sub filter.
///
/// Returns an empty `Vec` only for a degenerate image (zero width or height,
/// or `data` not `width * height * 4` bytes long), which PNG cannot represent.
pub fn encode_png(img: &RgbaImage) -> Vec<u8> {
    if img.width == 0 || img.height == 0 || !img.is_well_formed() {
        return Vec::new();
    }
    let opaque = img.data.chunks_exact(4).all(|px| px[3] == 255);
    let rgb: Vec<u8>;
    let (color, pixels) = if opaque {
        rgb = img
            .data
            .chunks_exact(4)
            .flat_map(|px| [px[0], px[1], px[2]])
            .collect();
        (png::ColorType::Rgb, rgb.as_slice())
    } else {
        (png::ColorType::Rgba, img.data.as_slice())
    };

    let mut out = Vec::with_capacity(pixels.len() / 4 + 1024);
    let written = (|| -> Result<(), png::EncodingError> {
        let mut encoder = png::Encoder::new(&mut out, img.width, img.height);
        encoder.set_color(color);
        encoder.set_depth(png::BitDepth::Eight);
        encoder.set_compression(png::Compression::Fast);
        encoder.set_filter(png::FilterType::Sub);
        encoder.set_adaptive_filter(png::AdaptiveFilterType::NonAdaptive);
        let mut writer = encoder.write_header()?;
        writer.write_image_data(pixels)?;
        writer.finish()
    })();
    match written {
        Ok(()) => out,
        Err(_) => Vec::new(),
    }
}

/// Decode any 8-bit or 16-bit (or packed low-bit-depth) PNG — gray, gray+alpha,
/// RGB, RGBA or palette, interlaced or not — into a straight-alpha RGBA8 image.
/// Only the first frame of an animated PNG is used. Images wider or taller than
/// [`MAX_DECODE_SIDE`] are rejected before any pixel buffer is allocated.
pub fn decode_png(bytes: &[u8]) -> Result<RgbaImage, String> {
    if bytes.is_empty() {
        return Err("invalid PNG: input is empty".to_string());
    }
    if !bytes.starts_with(&[0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a]) {
        return Err("invalid PNG: missing PNG signature".to_string());
    }
    let mut decoder = png::Decoder::new(Cursor::new(bytes));
    decoder.set_transformations(png::Transformations::normalize_to_color8());
    // The limit covers the decoder's internal buffers, not our output buffer;
    // the side check below bounds the output.
    decoder.set_limits(png::Limits {
        bytes: 1024 * 1024 * 1024,
    });
    let (width, height) = {
        let info = decoder
            .read_header_info()
            .map_err(|e| format!("invalid PNG header: {e}"))?;
        (info.width, info.height)
    };
    if width == 0 || height == 0 {
        return Err("invalid PNG: zero width or height".to_string());
    }
    if width > MAX_DECODE_SIDE || height > MAX_DECODE_SIDE {
        return Err(format!(
            "PNG too large: {width}x{height} exceeds the {MAX_DECODE_SIDE}x{MAX_DECODE_SIDE} limit"
        ));
    }
    let mut reader = decoder
        .read_info()
        .map_err(|e| format!("invalid PNG: {e}"))?;
    let mut buf = vec![0u8; reader.output_buffer_size()];
    let frame = reader
        .next_frame(&mut buf)
        .map_err(|e| format!("invalid PNG image data: {e}"))?;
    if frame.bit_depth != png::BitDepth::Eight {
        return Err(format!(
            "unsupported PNG bit depth after conversion: {:?}",
            frame.bit_depth
        ));
    }
    let (w, h) = (frame.width as usize, frame.height as usize);
    let channels = match frame.color_type {
        png::ColorType::Grayscale => 1,
        png::ColorType::GrayscaleAlpha => 2,
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        png::ColorType::Indexed => {
            return Err("unsupported PNG: palette was not expanded".to_string());
        }
    };
    let line = frame.line_size;
    if line < w * channels || buf.len() < line * h {
        return Err("invalid PNG: decoded buffer is shorter than expected".to_string());
    }
    let mut data = Vec::with_capacity(w * h * 4);
    for row in buf.chunks_exact(line).take(h) {
        let row = &row[..w * channels];
        match channels {
            1 => row
                .iter()
                .for_each(|&g| data.extend_from_slice(&[g, g, g, 255])),
            2 => row
                .chunks_exact(2)
                .for_each(|p| data.extend_from_slice(&[p[0], p[0], p[0], p[1]])),
            3 => row
                .chunks_exact(3)
                .for_each(|p| data.extend_from_slice(&[p[0], p[1], p[2], 255])),
            _ => data.extend_from_slice(row),
        }
    }
    Ok(RgbaImage {
        width: frame.width,
        height: frame.height,
        data,
    })
}

/// 2x2 grid of the four images in reading order (0 top-left, 1 top-right,
/// 2 bottom-left, 3 bottom-right).
///
/// The grid has the same pixel size as the first image. When every image has
/// that (even) size, each cell is its image scaled down by exactly 2 with a
/// 2x2 box average. Images of any other size are resampled straight to the
/// cell size (bilinear, widened to an area average when shrinking), which is
/// what resizing to the first image's size and then halving approximates.
/// Averaging is alpha-weighted, so transparent pixels do not bleed colour.
/// Malformed images (data length not matching the size) give a black cell.
pub fn compose_grid(images: &[RgbaImage; 4]) -> RgbaImage {
    let (w, h) = (images[0].width, images[0].height);
    let mut out = RgbaImage::new(w, h);
    if w == 0 || h == 0 {
        return out;
    }
    let left_w = w / 2;
    let top_h = h / 2;
    let cells = [
        (0, 0, left_w, top_h),
        (left_w, 0, w - left_w, top_h),
        (0, top_h, left_w, h - top_h),
        (left_w, top_h, w - left_w, h - top_h),
    ];
    for (img, &(x0, y0, cw, ch)) in images.iter().zip(cells.iter()) {
        if cw == 0 || ch == 0 || img.width == 0 || img.height == 0 || !img.is_well_formed() {
            continue; // stays opaque black
        }
        let cell = if img.width == cw * 2 && img.height == ch * 2 {
            halve(img)
        } else {
            resize(img, cw, ch, Filter::Triangle)
        };
        blit(&mut out, &cell, x0, y0);
    }
    out
}

/// Copy `src` into `dst` with its top-left corner at (x0, y0); clipped to `dst`.
fn blit(dst: &mut RgbaImage, src: &RgbaImage, x0: u32, y0: u32) {
    let dw = dst.width as usize;
    let (x0, y0) = (x0 as usize, y0 as usize);
    let copy_w = (src.width as usize).min(dw.saturating_sub(x0));
    let copy_h = (src.height as usize).min((dst.height as usize).saturating_sub(y0));
    for y in 0..copy_h {
        let s = y * src.width as usize * 4;
        let d = ((y0 + y) * dw + x0) * 4;
        dst.data[d..d + copy_w * 4].copy_from_slice(&src.data[s..s + copy_w * 4]);
    }
}

/// Exact 2x2 box average of a well-formed image with even width and height.
fn halve(img: &RgbaImage) -> RgbaImage {
    let (nw, nh) = (img.width / 2, img.height / 2);
    let sw = img.width as usize;
    let mut out = RgbaImage::new(nw, nh);
    for y in 0..nh as usize {
        for x in 0..nw as usize {
            let i = [
                ((2 * y) * sw + 2 * x) * 4,
                ((2 * y) * sw + 2 * x + 1) * 4,
                ((2 * y + 1) * sw + 2 * x) * 4,
                ((2 * y + 1) * sw + 2 * x + 1) * 4,
            ];
            let d = &img.data;
            let a_sum: u32 = i.iter().map(|&k| u32::from(d[k + 3])).sum();
            let o = (y * nw as usize + x) * 4;
            if a_sum == 4 * 255 {
                for c in 0..3 {
                    let s: u32 = i.iter().map(|&k| u32::from(d[k + c])).sum();
                    out.data[o + c] = ((s + 2) / 4) as u8;
                }
                out.data[o + 3] = 255;
            } else {
                // Alpha-weighted colour; a fully transparent block stays transparent black.
                for c in 0..3 {
                    let s: u32 = i
                        .iter()
                        .map(|&k| u32::from(d[k + c]) * u32::from(d[k + 3]))
                        .sum();
                    let v = (s + a_sum / 2).checked_div(a_sum).unwrap_or(0);
                    out.data[o + c] = v.min(255) as u8;
                }
                out.data[o + 3] = ((a_sum + 2) / 4) as u8;
            }
        }
    }
    out
}

/// How [`resize`] interpolates: `Nearest` copies source pixels (a mask stays two-valued),
/// `Triangle` is bilinear (an area average when shrinking), `CatmullRom` a sharper cubic.
pub use image::imageops::FilterType as Filter;

/// `img` resampled to `w` x `h` (both > 0) with `filter`, by the `image` crate. Colour is
/// filtered premultiplied by alpha, so transparent pixels do not bleed their colour, and a
/// pixel left with next to no alpha comes out transparent black. `img` must be well-formed.
pub fn resize(img: &RgbaImage, w: u32, h: u32, filter: Filter) -> RgbaImage {
    debug_assert!(img.is_well_formed() && w > 0 && h > 0);
    let opaque = img.data.chunks_exact(4).all(|p| p[3] == 255);
    if filter == Filter::Nearest || opaque {
        // Nothing to premultiply: the pixels are filtered as they are, read in place (an input
        // may be 25 megapixels).
        let src = image::ImageBuffer::<image::Rgba<u8>, _>::from_raw(
            img.width,
            img.height,
            img.data.as_slice(),
        )
        .expect("a well-formed image");
        let out = image::imageops::resize(&src, w, h, filter);
        return RgbaImage {
            width: w,
            height: h,
            data: out.into_raw(),
        };
    }
    // Premultiplied in 16 bits: colour keeps its precision where alpha is low.
    let premultiplied: Vec<u16> = img
        .data
        .chunks_exact(4)
        .flat_map(|p| {
            let a = u32::from(p[3]);
            let mul = |c: u8| ((u32::from(c) * a * 65535 + 32512) / 65025) as u16;
            [mul(p[0]), mul(p[1]), mul(p[2]), (a * 257) as u16]
        })
        .collect();
    let src =
        image::ImageBuffer::<image::Rgba<u16>, _>::from_raw(img.width, img.height, premultiplied)
            .expect("a well-formed image");
    let out = image::imageops::resize(&src, w, h, filter);
    let mut data = Vec::with_capacity(w as usize * h as usize * 4);
    for p in out.pixels() {
        let a = u32::from(p.0[3]);
        if a < 129 {
            data.extend_from_slice(&[0, 0, 0, 0]);
            continue;
        }
        let straight = |c: u16| ((u32::from(c) * 255 + a / 2) / a).min(255) as u8;
        data.extend_from_slice(&[
            straight(p.0[0]),
            straight(p.0[1]),
            straight(p.0[2]),
            ((a + 128) / 257) as u8,
        ]);
    }
    RgbaImage {
        width: w,
        height: h,
        data,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn solid(w: u32, h: u32, rgba: [u8; 4]) -> RgbaImage {
        RgbaImage {
            width: w,
            height: h,
            data: rgba.repeat(w as usize * h as usize),
        }
    }

    fn pattern(w: u32, h: u32, alpha: bool) -> RgbaImage {
        let mut img = RgbaImage::new(w, h);
        for y in 0..h {
            for x in 0..w {
                let o = ((y * w + x) * 4) as usize;
                img.data[o] = (x * 7 + y) as u8;
                img.data[o + 1] = (y * 13) as u8;
                img.data[o + 2] = (x ^ y) as u8;
                img.data[o + 3] = if alpha { (x * 31 + y * 3) as u8 } else { 255 };
            }
        }
        img
    }

    fn pixel(img: &RgbaImage, x: u32, y: u32) -> [u8; 4] {
        let o = ((y * img.width + x) * 4) as usize;
        [
            img.data[o],
            img.data[o + 1],
            img.data[o + 2],
            img.data[o + 3],
        ]
    }

    #[test]
    fn new_is_opaque_black() {
        let img = RgbaImage::new(3, 2);
        assert_eq!(img.data.len(), 24);
        assert!(img.data.chunks(4).all(|p| p == [0, 0, 0, 255]));
    }

    #[test]
    fn dimensions_table() {
        let cases = [
            ((1, 1, 1024), (1024, 1024)),
            ((16, 9, 1024), (1024, 576)),
            ((9, 16, 1024), (576, 1024)),
            ((2, 3, 1024), (682, 1024)),
            ((3, 2, 1024), (1024, 682)),
            ((4, 3, 1024), (1024, 768)),
            ((21, 9, 1024), (1024, 438)),
            ((1, 1, 1023), (1024, 1024)),
            ((1, 1, 1), (2, 2)),
            ((1, 1, 0), (2, 2)),
            ((100, 1, 64), (64, 2)),
            ((0, 0, 512), (512, 512)),
            ((1, 1, u32::MAX), (u32::MAX - 1, u32::MAX - 1)),
        ];
        for ((aw, ah, long), want) in cases {
            let got = dimensions(aw, ah, long);
            assert_eq!(got, want, "dimensions({aw}, {ah}, {long})");
            assert!(got.0 % 2 == 0 && got.1 % 2 == 0 && got.0 >= 2 && got.1 >= 2);
        }
    }

    #[test]
    fn png_encode_is_deterministic() {
        let img = pattern(37, 21, false);
        assert_eq!(encode_png(&img), encode_png(&img));
    }

    #[test]
    fn png_round_trip_opaque_and_alpha() {
        for alpha in [false, true] {
            let img = pattern(64, 33, alpha);
            let bytes = encode_png(&img);
            assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"));
            let back = decode_png(&bytes).expect("decodes");
            assert_eq!(back, img, "alpha={alpha}");
        }
    }

    #[test]
    fn png_opaque_is_written_as_rgb() {
        let bytes = encode_png(&pattern(8, 8, false));
        // IHDR colour type byte: signature(8) + length(4) + "IHDR"(4) + w(4) + h(4) + depth(1).
        assert_eq!(bytes[24], 8, "bit depth");
        assert_eq!(bytes[25], 2, "colour type RGB");
        let bytes = encode_png(&pattern(8, 8, true));
        assert_eq!(bytes[25], 6, "colour type RGBA");
    }

    #[test]
    fn encode_degenerate_image_gives_empty() {
        let bad = RgbaImage {
            width: 4,
            height: 4,
            data: vec![0; 3],
        };
        assert!(encode_png(&bad).is_empty());
        assert!(encode_png(&RgbaImage::new(0, 5)).is_empty());
    }

    fn encode_raw(
        w: u32,
        h: u32,
        color: png::ColorType,
        depth: png::BitDepth,
        px: &[u8],
    ) -> Vec<u8> {
        let mut out = Vec::new();
        {
            let mut enc = png::Encoder::new(&mut out, w, h);
            enc.set_color(color);
            enc.set_depth(depth);
            if color == png::ColorType::Indexed {
                enc.set_palette(vec![255, 0, 0, 0, 0, 255]);
                enc.set_trns(vec![255, 128]);
            }
            let mut wr = enc.write_header().unwrap();
            wr.write_image_data(px).unwrap();
        }
        out
    }

    #[test]
    fn decode_other_formats() {
        // 8-bit gray.
        let g = decode_png(&encode_raw(
            2,
            1,
            png::ColorType::Grayscale,
            png::BitDepth::Eight,
            &[10, 200],
        ))
        .unwrap();
        assert_eq!(g.data, vec![10, 10, 10, 255, 200, 200, 200, 255]);
        // 8-bit gray + alpha.
        let ga = decode_png(&encode_raw(
            1,
            1,
            png::ColorType::GrayscaleAlpha,
            png::BitDepth::Eight,
            &[50, 60],
        ))
        .unwrap();
        assert_eq!(ga.data, vec![50, 50, 50, 60]);
        // 16-bit RGB is reduced to its high bytes.
        let rgb16 = decode_png(&encode_raw(
            1,
            1,
            png::ColorType::Rgb,
            png::BitDepth::Sixteen,
            &[1, 2, 3, 4, 255, 255],
        ))
        .unwrap();
        assert_eq!(rgb16.data, vec![1, 3, 255, 255]);
        // 16-bit RGBA.
        let rgba16 = decode_png(&encode_raw(
            1,
            1,
            png::ColorType::Rgba,
            png::BitDepth::Sixteen,
            &[9, 0, 8, 0, 7, 0, 128, 0],
        ))
        .unwrap();
        assert_eq!(rgba16.data, vec![9, 8, 7, 128]);
        // Palette with transparency, 8-bit indices.
        let pal = decode_png(&encode_raw(
            2,
            1,
            png::ColorType::Indexed,
            png::BitDepth::Eight,
            &[0, 1],
        ))
        .unwrap();
        assert_eq!(pal.data, vec![255, 0, 0, 255, 0, 0, 255, 128]);
        // 1-bit gray expands to 0/255.
        let bits = decode_png(&encode_raw(
            3,
            1,
            png::ColorType::Grayscale,
            png::BitDepth::One,
            &[0b1010_0000],
        ))
        .unwrap();
        assert_eq!(
            bits.data,
            vec![255, 255, 255, 255, 0, 0, 0, 255, 255, 255, 255, 255]
        );
    }

    #[test]
    fn decode_rejects_garbage() {
        assert!(decode_png(&[]).is_err());
        assert!(decode_png(b"definitely not a png").is_err());
        let good = encode_png(&pattern(16, 16, false));
        assert!(decode_png(&good[..8]).is_err(), "signature only");
        assert!(decode_png(&good[..good.len() / 2]).is_err(), "truncated");
        let mut corrupt = good.clone();
        let mid = corrupt.len() / 2;
        for b in &mut corrupt[mid..mid + 16] {
            *b ^= 0x5a;
        }
        assert!(decode_png(&corrupt).is_err(), "corrupted data");
        let msg = decode_png(b"nope").unwrap_err();
        assert!(msg.contains("PNG"), "{msg}");
    }

    #[test]
    fn decode_rejects_oversized() {
        // A header claiming 9000x10 is refused before decoding pixel data.
        let bytes = encode_raw(
            9000,
            1,
            png::ColorType::Grayscale,
            png::BitDepth::One,
            &[0u8; 1125],
        );
        let err = decode_png(&bytes).unwrap_err();
        assert!(err.contains("too large"), "{err}");
    }

    #[test]
    fn grid_places_quadrants() {
        let colors = [
            [255, 0, 0, 255],
            [0, 255, 0, 255],
            [0, 0, 255, 255],
            [255, 255, 0, 255],
        ];
        let imgs = colors.map(|c| solid(64, 48, c));
        let grid = compose_grid(&imgs);
        assert_eq!((grid.width, grid.height), (64, 48));
        assert_eq!(grid.data.len(), 64 * 48 * 4);
        for (i, c) in colors.iter().enumerate() {
            let (qx, qy) = ((i % 2) as u32 * 32, (i / 2) as u32 * 24);
            for (x, y) in [(0, 0), (31, 0), (0, 23), (31, 23), (15, 11)] {
                assert_eq!(
                    &pixel(&grid, qx + x, qy + y),
                    c,
                    "quadrant {i} at ({x},{y})"
                );
            }
        }
    }

    #[test]
    fn grid_is_exact_box_average() {
        let imgs = [
            pattern(8, 6, false),
            pattern(8, 6, false),
            pattern(8, 6, false),
            pattern(8, 6, false),
        ];
        let grid = compose_grid(&imgs);
        let src = &imgs[0];
        for y in 0..3 {
            for x in 0..4 {
                let got = pixel(&grid, x, y);
                for (c, channel) in got.iter().enumerate().take(3) {
                    let s: u32 = [(0, 0), (1, 0), (0, 1), (1, 1)]
                        .iter()
                        .map(|&(dx, dy)| u32::from(pixel(src, 2 * x + dx, 2 * y + dy)[c]))
                        .sum();
                    assert_eq!(u32::from(*channel), (s + 2) / 4);
                }
            }
        }
    }

    #[test]
    fn grid_handles_mismatched_sizes() {
        let imgs = [
            solid(100, 80, [10, 20, 30, 255]),
            solid(37, 41, [200, 0, 0, 255]),
            solid(301, 7, [0, 200, 0, 255]),
            solid(1, 1, [0, 0, 200, 255]),
        ];
        let grid = compose_grid(&imgs);
        assert_eq!((grid.width, grid.height), (100, 80));
        assert_eq!(pixel(&grid, 10, 10), [10, 20, 30, 255]);
        assert_eq!(pixel(&grid, 75, 20), [200, 0, 0, 255]);
        assert_eq!(pixel(&grid, 25, 60), [0, 200, 0, 255]);
        assert_eq!(pixel(&grid, 99, 79), [0, 0, 200, 255]);
        // Odd sizes and degenerate inputs don't panic.
        let odd = [
            solid(5, 3, [1, 2, 3, 255]),
            RgbaImage::new(0, 0),
            RgbaImage {
                width: 9,
                height: 9,
                data: vec![],
            },
            solid(2, 2, [0, 0, 0, 0]),
        ];
        let g = compose_grid(&odd);
        assert_eq!((g.width, g.height, g.data.len()), (5, 3, 60));
        assert_eq!(
            compose_grid(&[
                RgbaImage::new(0, 0),
                RgbaImage::new(0, 0),
                RgbaImage::new(0, 0),
                RgbaImage::new(0, 0),
            ])
            .data
            .len(),
            0
        );
    }

    #[test]
    fn grid_transparency_does_not_bleed() {
        // Half-transparent-white / fully transparent-red checker: the average must stay white.
        let mut img = RgbaImage::new(4, 4);
        for (i, px) in img.data.chunks_exact_mut(4).enumerate() {
            if i % 2 == 0 {
                px.copy_from_slice(&[255, 255, 255, 128]);
            } else {
                px.copy_from_slice(&[255, 0, 0, 0]);
            }
        }
        let grid = compose_grid(&[img.clone(), img.clone(), img.clone(), img]);
        assert_eq!(pixel(&grid, 0, 0), [255, 255, 255, 64]);
    }

    #[test]
    fn resize_filters_premultiplied_and_nearest_copies_pixels() {
        // Half-transparent red beside fully transparent green: no green bleeds in.
        let mut img = solid(4, 4, [255, 0, 0, 128]);
        for px in img.data.chunks_exact_mut(8) {
            px[4..8].copy_from_slice(&[0, 255, 0, 0]);
        }
        for filter in [Filter::Triangle, Filter::CatmullRom, Filter::Lanczos3] {
            let r = resize(&img, 2, 3, filter);
            assert_eq!((r.width, r.height, r.data.len()), (2, 3, 24));
            for p in r.data.chunks_exact(4) {
                assert!(p[3] == 0 || p[..3] == [255, 0, 0], "{filter:?}: {p:?}");
            }
        }
        // Nearest neighbour keeps a two-valued mask two-valued.
        let mut mask = solid(6, 6, [0, 0, 0, 0]);
        for (i, px) in mask.data.chunks_exact_mut(4).enumerate() {
            if (i % 6 + i / 6) % 2 == 0 {
                px.copy_from_slice(&[255, 255, 255, 255]);
            }
        }
        let r = resize(&mask, 7, 11, Filter::Nearest);
        assert!(r
            .data
            .chunks_exact(4)
            .all(|p| p == [0, 0, 0, 0] || p == [255, 255, 255, 255]));
    }
}
