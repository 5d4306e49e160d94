//! PNG as easel writes it (fast compression, RGB when opaque) and reads it (every bit depth and
//! colour type, bounded before any pixel buffer is allocated).

use std::io::Cursor;

use super::RgbaImage;

/// Largest width or height accepted by [`decode_png`].
pub const MAX_DECODE_SIDE: u32 = 8192;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::images::testing::pattern;

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

    #[test]
    fn decode_other_formats() {
        use png::BitDepth::{Eight, One, Sixteen};
        use png::ColorType::{Grayscale, GrayscaleAlpha, Indexed, Rgb, Rgba};
        // A row of `width` pixels with these samples, decoded to RGBA.
        let decoded = |width, color, depth, samples: &[u8]| {
            decode_png(&encode_raw(width, 1, color, depth, samples))
                .unwrap()
                .data
        };
        let gray = decoded(2, Grayscale, Eight, &[10, 200]);
        assert_eq!(gray, [10, 10, 10, 255, 200, 200, 200, 255]);
        let gray_alpha = decoded(1, GrayscaleAlpha, Eight, &[50, 60]);
        assert_eq!(gray_alpha, [50, 50, 50, 60]);
        // 16-bit samples are reduced to their high bytes.
        let rgb16 = decoded(1, Rgb, Sixteen, &[1, 2, 3, 4, 255, 255]);
        assert_eq!(rgb16, [1, 3, 255, 255]);
        let rgba16 = decoded(1, Rgba, Sixteen, &[9, 0, 8, 0, 7, 0, 128, 0]);
        assert_eq!(rgba16, [9, 8, 7, 128]);
        // A palette with transparency, 8-bit indices.
        let palette = decoded(2, Indexed, Eight, &[0, 1]);
        assert_eq!(palette, [255, 0, 0, 255, 0, 0, 255, 128]);
        // 1-bit gray expands to 0/255.
        let bits = decoded(3, Grayscale, One, &[0b1010_0000]);
        assert_eq!(bits, [255, 255, 255, 255, 0, 0, 0, 255, 255, 255, 255, 255]);
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
}
