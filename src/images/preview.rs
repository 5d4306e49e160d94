//! Previews: what a generation looks like before it ends. A backend hands over what it has (an
//! encoded image as its server sent it, or pixels); the worker shrinks it to `preview_max_px` on
//! its long side and stores it as a small JPEG, at most once a second per task.

use std::time::Duration;

use super::inputs::{decode, InputLimits};
use super::{resize, Filter, RgbaImage};

/// The most bytes of an encoded preview that are decoded; a larger one is skipped.
pub const PREVIEW_MAX_BYTES: u64 = 8 * 1024 * 1024;
/// The most pixels of a preview that are decoded (a 4096 x 4096 image).
pub const PREVIEW_MAX_PIXELS: u64 = 4096 * 4096;

/// A preview as a generator has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PreviewImage {
    /// Image bytes as a server sent them (PNG, JPEG, WebP or GIF).
    Encoded(Vec<u8>),
    /// Pixels a generator drew itself.
    Pixels(RgbaImage),
}

/// `image` as a JPEG no larger than `max_px` on its long side. Encoded previews are decoded under
/// the limits above (they come from a backend's server). CPU work: run it on a blocking thread.
pub fn shrink(image: PreviewImage, max_px: u32) -> Result<Vec<u8>, String> {
    let pixels = match image {
        PreviewImage::Pixels(pixels) => pixels,
        PreviewImage::Encoded(bytes) => {
            if bytes.len() as u64 > PREVIEW_MAX_BYTES {
                return Err(format!(
                    "a preview of {} bytes is more than the {PREVIEW_MAX_BYTES} read",
                    bytes.len()
                ));
            }
            let limits = InputLimits {
                max_bytes: PREVIEW_MAX_BYTES,
                max_pixels: PREVIEW_MAX_PIXELS,
                timeout: Duration::ZERO,
                max_redirects: 0,
            };
            decode(&bytes, &limits).map_err(|e| e.to_string())?
        }
    };
    if pixels.width == 0 || pixels.height == 0 {
        return Err("an empty preview".into());
    }
    let long = pixels.width.max(pixels.height);
    let max_px = max_px.max(1);
    let small = if long > max_px {
        let scale = f64::from(max_px) / f64::from(long);
        let w = ((f64::from(pixels.width) * scale).round() as u32).max(1);
        let h = ((f64::from(pixels.height) * scale).round() as u32).max(1);
        resize(&pixels, w, h, Filter::Triangle)
    } else {
        pixels
    };
    // JPEG has no alpha: the preview is shown on a page, as an opaque thumbnail.
    let rgb: Vec<u8> = small
        .data
        .chunks_exact(4)
        .flat_map(|p| [p[0], p[1], p[2]])
        .collect();
    let mut out = Vec::new();
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 80)
        .encode(
            &rgb,
            small.width,
            small.height,
            image::ExtendedColorType::Rgb8,
        )
        .map_err(|e| format!("could not encode the preview: {e}"))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::images::encode_png;

    fn decoded(jpeg: &[u8]) -> image::DynamicImage {
        image::load_from_memory_with_format(jpeg, image::ImageFormat::Jpeg).expect("a JPEG")
    }

    #[test]
    fn a_large_preview_is_shrunk_to_its_long_side_and_a_small_one_kept() {
        let big = RgbaImage::new(1024, 512);
        let small = decoded(&shrink(PreviewImage::Encoded(encode_png(&big)), 256).unwrap());
        assert_eq!((small.width(), small.height()), (256, 128));
        let tiny = decoded(&shrink(PreviewImage::Pixels(RgbaImage::new(64, 96)), 256).unwrap());
        assert_eq!((tiny.width(), tiny.height()), (64, 96));
    }

    #[test]
    fn bytes_that_are_no_image_are_refused_not_a_panic() {
        assert!(shrink(PreviewImage::Encoded(b"not an image".to_vec()), 256).is_err());
        assert!(shrink(PreviewImage::Encoded(Vec::new()), 256).is_err());
    }
}
