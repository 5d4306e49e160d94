//! Images from one file format to another, for callers that ask for a format (the OpenAI Images
//! API's `output_format`), and the shapes its inputs come in: a caller's image fitted to a
//! size, and OpenAI's mask (transparent = redraw) made into easel's (opaque and light = redraw).
//! Decoding is bounded by a pixel limit given by the caller.

use std::io::Cursor;

use image::codecs::jpeg::JpegEncoder;
use image::codecs::png::PngEncoder;
use image::codecs::webp::WebPEncoder;
use image::imageops::FilterType;
use image::{DynamicImage, GenericImageView, ImageReader, Limits};

/// A file format a caller may ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Png,
    Jpeg,
    Webp,
}

impl Format {
    /// The format of `bytes` by their first bytes, when it is one of these.
    pub fn sniff(bytes: &[u8]) -> Option<Format> {
        if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
            Some(Format::Png)
        } else if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
            Some(Format::Jpeg)
        } else if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
            Some(Format::Webp)
        } else {
            None
        }
    }

    /// The format a file name's extension names.
    pub fn of_key(key: &str) -> Option<Format> {
        let ext = key.rsplit_once('.')?.1.to_ascii_lowercase();
        match ext.as_str() {
            "png" => Some(Format::Png),
            "jpg" | "jpeg" => Some(Format::Jpeg),
            "webp" => Some(Format::Webp),
            _ => None,
        }
    }

    /// The file name extension easel gives it.
    pub fn extension(self) -> &'static str {
        match self {
            Format::Png => "png",
            Format::Jpeg => "jpg",
            Format::Webp => "webp",
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::Png => "image/png",
            Format::Jpeg => "image/jpeg",
            Format::Webp => "image/webp",
        }
    }
}

/// Decode `bytes` (PNG, JPEG, WebP or GIF) of at most `max_pixels` pixels.
pub fn decode(bytes: &[u8], max_pixels: u64) -> Result<DynamicImage, String> {
    let mut reader = ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| format!("cannot be read ({e})"))?;
    let mut limits = Limits::default();
    // RGBA8 at the pixel limit, and room for the decoder's own buffers.
    limits.max_alloc = Some(max_pixels.saturating_mul(4).saturating_add(64 << 20));
    reader.limits(limits.clone());
    let (w, h) = reader
        .into_dimensions()
        .map_err(|e| format!("is not an image easel can read ({e})"))?;
    if u64::from(w) * u64::from(h) > max_pixels {
        return Err(format!("{w}x{h} is over the limit of {max_pixels} pixels"));
    }
    let mut reader = ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| format!("cannot be read ({e})"))?;
    reader.limits(limits);
    reader
        .decode()
        .map_err(|e| format!("is not an image easel can read ({e})"))
}

/// `image` written as `format`; `quality` (1 to 100) for JPEG. WebP is written lossless (the
/// only WebP encoder the `image` crate has).
pub fn encode(image: &DynamicImage, format: Format, quality: u8) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let result = match format {
        Format::Png => image.write_with_encoder(PngEncoder::new(&mut out)),
        Format::Jpeg => {
            // JPEG has no alpha channel.
            let rgb = DynamicImage::ImageRgb8(image.to_rgb8());
            rgb.write_with_encoder(JpegEncoder::new_with_quality(
                &mut out,
                quality.clamp(1, 100),
            ))
        }
        Format::Webp => {
            let rgba = DynamicImage::ImageRgba8(image.to_rgba8());
            rgba.write_with_encoder(WebPEncoder::new_lossless(&mut out))
        }
    };
    result.map_err(|e| format!("could not be encoded ({e})"))?;
    Ok(out)
}

/// `bytes` as `format`: as they are when they are in it already (encoded once, where they
/// were made), else decoded and encoded again.
pub fn convert(
    bytes: &[u8],
    format: Format,
    quality: u8,
    max_pixels: u64,
) -> Result<Vec<u8>, String> {
    if Format::sniff(bytes) == Some(format) {
        return Ok(bytes.to_vec());
    }
    encode(&decode(bytes, max_pixels)?, format, quality)
}

/// A fitted image: the PNG, the size it had, the size it has.
pub type Fitted = (Vec<u8>, (u32, u32), (u32, u32));

/// `bytes` as a PNG whose long side is at most `max_side` (scaled down, never up).
pub fn fit(bytes: &[u8], max_side: u32, max_pixels: u64) -> Result<Fitted, String> {
    let image = decode(bytes, max_pixels)?;
    let original = image.dimensions();
    let (w, h) = original;
    let image = if w.max(h) > max_side {
        image.resize(max_side, max_side, FilterType::Triangle)
    } else {
        image
    };
    Ok((
        encode(&image, Format::Png, 100)?,
        original,
        image.dimensions(),
    ))
}

/// OpenAI's mask (a PNG whose fully or partly transparent pixels, alpha below 128, are to be
/// redrawn; the size of the image it is for, `width` x `height`) as easel's: an opaque PNG of
/// `out_w` x `out_h`, white where to redraw and black elsewhere. Errors say what is wrong in
/// words; none marks a mask that redraws nothing.
pub fn openai_mask(
    bytes: &[u8],
    (width, height): (u32, u32),
    (out_w, out_h): (u32, u32),
    max_pixels: u64,
) -> Result<Vec<u8>, String> {
    let mask = decode(bytes, max_pixels)?;
    let (w, h) = mask.dimensions();
    if (w, h) != (width, height) {
        return Err(format!(
            "is {w}x{h}; it must be the size of the image, {width}x{height}"
        ));
    }
    if !mask.color().has_alpha() {
        return Err("has no alpha channel: its transparent pixels say what to redraw".into());
    }
    let alpha = mask.to_rgba8();
    let marks = image::GrayImage::from_fn(w, h, |x, y| {
        image::Luma([if alpha.get_pixel(x, y)[3] < 128 {
            255
        } else {
            0
        }])
    });
    if marks.pixels().all(|p| p[0] == 0) {
        return Err("has no transparent pixel: nothing is marked to redraw".into());
    }
    let scaled = image::imageops::resize(&marks, out_w, out_h, FilterType::Nearest);
    encode(&DynamicImage::ImageLuma8(scaled), Format::Png, 100)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rgba(w: u32, h: u32, f: impl Fn(u32, u32) -> [u8; 4]) -> Vec<u8> {
        let img = image::RgbaImage::from_fn(w, h, |x, y| image::Rgba(f(x, y)));
        encode(&DynamicImage::ImageRgba8(img), Format::Png, 100).unwrap()
    }

    #[test]
    fn formats_convert_and_are_sniffed() {
        let png = rgba(8, 6, |x, _| [x as u8 * 30, 10, 200, 255]);
        assert_eq!(Format::sniff(&png), Some(Format::Png));
        assert_eq!(convert(&png, Format::Png, 100, 1000).unwrap(), png);
        let jpeg = convert(&png, Format::Jpeg, 80, 1000).unwrap();
        assert_eq!(Format::sniff(&jpeg), Some(Format::Jpeg));
        let webp = convert(&png, Format::Webp, 100, 1000).unwrap();
        assert_eq!(Format::sniff(&webp), Some(Format::Webp));
        assert_eq!(decode(&webp, 1000).unwrap().dimensions(), (8, 6));
        assert!(decode(&png, 47).unwrap_err().contains("over the limit"));
        assert!(decode(b"nope", 1000).is_err());
    }

    #[test]
    fn an_openai_mask_becomes_easels() {
        let mask = rgba(4, 2, |x, _| [0, 0, 0, if x < 2 { 0 } else { 255 }]);
        let out = openai_mask(&mask, (4, 2), (8, 4), 1000).unwrap();
        let out = decode(&out, 1000).unwrap().to_luma8();
        assert_eq!(out.dimensions(), (8, 4));
        assert_eq!(out.get_pixel(0, 0)[0], 255);
        assert_eq!(out.get_pixel(7, 3)[0], 0);
        let e = openai_mask(&mask, (5, 2), (8, 4), 1000).unwrap_err();
        assert!(e.contains("must be the size of the image, 5x2"), "{e}");
        let opaque = rgba(4, 2, |_, _| [0, 0, 0, 255]);
        assert!(openai_mask(&opaque, (4, 2), (4, 2), 1000)
            .unwrap_err()
            .contains("no transparent pixel"));
        let (fitted, original, size) = fit(&mask, 2, 1000).unwrap();
        assert_eq!((original, size), ((4, 2), (2, 1)));
        assert_eq!(Format::sniff(&fitted), Some(Format::Png));
    }
}
