//! Decoding an input image under limits: format sniffed, dimensions checked before any pixel
//! buffer exists.

use std::io::{self, Cursor};

use image::{DynamicImage, ImageDecoder, ImageFormat, ImageReader};

use super::{InputError, InputLimits};
use crate::generate::raster::RgbaImage;

/// Decoding may allocate this many bytes per pixel of the (already checked) image: the decoded
/// buffer at up to 16 bits per channel, plus the decoders' working buffers.
const ALLOC_BYTES_PER_PIXEL: u64 = 16;

/// Decode image bytes (PNG, JPEG, WebP, GIF first frame) into straight RGBA8 under `limits`.
///
/// The format is sniffed from the bytes; the dimensions are read from the header and checked
/// against `max_pixels` before any pixel buffer is allocated, and [`image::Limits`] bound the
/// decoders as a second guard. Truncated or corrupt data gives an [`InputError`], never a
/// panic. CPU work: run it on a blocking thread.
pub fn decode(bytes: &[u8], limits: &InputLimits) -> Result<RgbaImage, InputError> {
    let format = match image::guess_format(bytes) {
        Ok(
            format @ (ImageFormat::Png | ImageFormat::Jpeg | ImageFormat::WebP | ImageFormat::Gif),
        ) => format,
        _ => return Err(InputError::UnsupportedFormat),
    };
    // The decoders are third-party code fed hostile bytes: a panic in one is a bad image, not
    // a crashed worker thread.
    match std::panic::catch_unwind(|| decode_as(bytes, format, limits)) {
        Ok(result) => result,
        Err(_) => Err(InputError::Decode("the decoder failed".to_owned())),
    }
}

/// `true` when a JPEG's last scan is followed by its end-of-image marker. The image crate's
/// JPEG decoder is lenient and fills a cut-off scan with grey rather than failing, so a
/// truncated upload would otherwise pass as an image. Inside scan data every 0xFF byte is
/// followed by 0x00 or a restart marker, so 0xFF 0xDA (start of scan) and 0xFF 0xD9 (end of
/// image) occur only as markers; comparing the last of each also looks past a complete EXIF
/// thumbnail ahead of a cut-off main image.
fn jpeg_is_complete(bytes: &[u8]) -> bool {
    let last = |marker: u8| bytes.windows(2).rposition(|w| w == [0xff, marker]);
    match (last(0xda), last(0xd9)) {
        (Some(scan), Some(end)) => end > scan,
        _ => false,
    }
}

fn decode_as(
    bytes: &[u8],
    format: ImageFormat,
    limits: &InputLimits,
) -> Result<RgbaImage, InputError> {
    let max_alloc = limits.max_pixels.saturating_mul(ALLOC_BYTES_PER_PIXEL);
    // Reading the header allocates little (the PNG decoder's own buffers are bounded by
    // max_alloc); no side limit yet, so that an oversized image is reported by its size.
    let mut header_limits = image::Limits::default();
    header_limits.max_image_width = None;
    header_limits.max_image_height = None;
    header_limits.max_alloc = Some(max_alloc);
    let mut reader = ImageReader::with_format(Cursor::new(bytes), format);
    reader.limits(header_limits);
    let mut decoder = reader.into_decoder().map_err(decode_error)?;

    let (width, height) = decoder.dimensions();
    if u64::from(width) * u64::from(height) > limits.max_pixels {
        return Err(InputError::TooManyPixels {
            width,
            height,
            max_pixels: limits.max_pixels,
        });
    }
    if width == 0 || height == 0 {
        return Err(InputError::Decode(format!(
            "{width}x{height} has no pixels"
        )));
    }

    // The second guard: no side longer than the pixel limit allows, and the decoded buffer
    // plus the decoders' working memory within max_alloc.
    let side = u32::try_from(limits.max_pixels).unwrap_or(u32::MAX);
    let mut full = image::Limits::default();
    full.max_image_width = Some(side);
    full.max_image_height = Some(side);
    full.max_alloc = Some(max_alloc);
    full.reserve(decoder.total_bytes()).map_err(decode_error)?;
    decoder.set_limits(full).map_err(decode_error)?;

    if format == ImageFormat::Jpeg && !jpeg_is_complete(bytes) {
        return Err(InputError::Decode("the data is truncated".to_owned()));
    }
    let rgba = DynamicImage::from_decoder(decoder)
        .map_err(decode_error)?
        .into_rgba8();
    Ok(RgbaImage {
        width,
        height,
        data: rgba.into_raw(),
    })
}

fn decode_error(err: image::ImageError) -> InputError {
    match err {
        image::ImageError::Unsupported(e) => InputError::Decode(format!("unsupported: {e}")),
        image::ImageError::Limits(e) => InputError::Decode(format!("over a decoding limit: {e}")),
        image::ImageError::IoError(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
            InputError::Decode("the data is truncated".to_owned())
        }
        other => InputError::Decode(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::inputs::samples::*;

    #[test]
    fn the_first_frame_of_a_gif_is_used() {
        let img = decode(&gif_bytes(8, 6), &limits()).unwrap();
        assert_image(&img, 8, 6);
        for px in img.data.chunks_exact(4) {
            assert_eq!(px, [255, 0, 0, 255]);
        }
    }

    /// The header is read and the pixel count refused before any pixel buffer exists: decoding
    /// this would need 100000 * 100000 * 4 bytes.
    #[test]
    fn a_decompression_bomb_fails_on_its_pixel_count() {
        let bomb = bomb_png(100_000, 100_000);
        assert!(bomb.len() < 100);
        let err = decode(&bomb, &limits()).unwrap_err();
        assert!(
            matches!(
                err,
                InputError::TooManyPixels {
                    width: 100_000,
                    height: 100_000,
                    max_pixels: 25_000_000
                }
            ),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "100000x100000 is over the 25 megapixel limit"
        );
        // A side longer than the whole pixel limit, and a small limit, are refused the same way.
        let err = decode(&bomb_png(30_000_000, 1), &limits()).unwrap_err();
        assert!(matches!(err, InputError::TooManyPixels { .. }), "{err:?}");
        let tight = InputLimits {
            max_pixels: 40 * 30 - 1,
            ..limits()
        };
        for bytes in [
            png_bytes(40, 30),
            jpeg_bytes(40, 30),
            webp_bytes(40, 30),
            gif_bytes(40, 30),
        ] {
            let err = decode(&bytes, &tight).unwrap_err();
            assert_eq!(err.to_string(), "40x30 is over the 1199 pixel limit");
        }
    }

    /// A bomb whose pixel count passes still cannot decode from a dozen bytes of data.
    #[test]
    fn a_bomb_within_the_pixel_limit_fails_cleanly() {
        let err = decode(&bomb_png(5000, 5000), &limits()).unwrap_err();
        assert!(matches!(err, InputError::Decode(_)), "{err:?}");
    }

    #[test]
    fn truncated_and_random_bytes_fail_cleanly() {
        assert!(matches!(
            decode(&noise(4096, 1), &limits()),
            Err(InputError::UnsupportedFormat)
        ));
        assert!(matches!(
            decode(&[], &limits()),
            Err(InputError::UnsupportedFormat)
        ));
        assert_eq!(
            InputError::UnsupportedFormat.to_string(),
            "not a PNG, JPEG, WebP or GIF image"
        );
        // Formats the image crate knows but inputs do not take.
        for magic in [&b"BM"[..], b"II*\0", b"qoif", b"P6"] {
            let mut other = magic.to_vec();
            other.extend(noise(100, 3));
            assert!(matches!(
                decode(&other, &limits()),
                Err(InputError::UnsupportedFormat)
            ));
        }

        // Every prefix of every format, and each signature followed by noise, fails with an
        // error (or, for the whole file, decodes): no panic, no hang.
        for (name, bytes) in [
            ("png", png_bytes(12, 10)),
            ("jpeg", jpeg_bytes(12, 10)),
            ("webp", webp_bytes(12, 10)),
            ("gif", gif_bytes(12, 10)),
        ] {
            let whole = decode(&bytes, &limits()).unwrap();
            assert_image(&whole, 12, 10);
            for len in 0..bytes.len() {
                match decode(&bytes[..len], &limits()) {
                    Err(InputError::Decode(_) | InputError::UnsupportedFormat) => {}
                    // Cut only in what follows the pixel data (PNG's IEND, GIF's trailer).
                    Ok(img) if img == whole => {}
                    other => panic!("{name} cut at {len} of {}: {other:?}", bytes.len()),
                }
            }
            for seed in 1..20 {
                let mut corrupt = bytes[..16].to_vec();
                corrupt.extend(noise(2000, seed));
                assert!(decode(&corrupt, &limits()).is_err(), "{name} {seed}");
            }
        }
        let truncated = png_bytes(40, 30);
        let err = decode(&truncated[..truncated.len() / 2], &limits()).unwrap_err();
        assert!(
            err.to_string().starts_with("could not be decoded: "),
            "{err}"
        );
    }
}
