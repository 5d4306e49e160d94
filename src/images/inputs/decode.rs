//! Decoding an input image under limits: format sniffed, dimensions checked before any pixel
//! buffer exists, and the memory decoding takes estimated from them ([`Header`]) so that it can
//! be reserved from the node's budget first.
//!
//! What is held is straight RGBA8, whatever the file: PNG is decoded row by row through the
//! `png` crate, 16-bit samples reduced to 8 bits as each row arrives, so that no 16-bit buffer of
//! the whole image exists; the other formats' decoders write their 8-bit pixels into the RGBA8
//! buffer itself, which is then widened in place.

use std::io::{self, Cursor};

use image::{ColorType, ImageDecoder, ImageFormat, ImageReader};

use super::{InputError, InputLimits};
use crate::images::RgbaImage;

/// Decoding may allocate this many bytes per pixel of the (already checked) image: the decoded
/// buffer at up to 16 bits per channel, plus the decoders' working buffers. The image crate's
/// second guard; the budget's estimate is [`Header::working_bytes`].
const ALLOC_BYTES_PER_PIXEL: u64 = 16;

/// What every decoder may allocate besides what scales with the image: Huffman and colour
/// tables, zlib's window and state, palettes.
const DECODER_FIXED_BYTES: u64 = 1 << 20;

/// What an image's header says, read without decoding its pixels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub format: ImageFormat,
    pub width: u32,
    pub height: u32,
    /// Whether JPEG's pixels are grey (one component rather than up to four).
    grey: bool,
    /// The file's size: decoders copy it, or buffer chunks of it.
    file_bytes: u64,
}

impl Header {
    fn pixels(&self) -> u64 {
        u64::from(self.width) * u64::from(self.height)
    }

    /// Bytes of the decoded image (straight RGBA8), held until the task's job is done.
    pub fn held_bytes(&self) -> u64 {
        self.pixels() * 4
    }

    /// Bytes the decoder may use besides the decoded image while it runs, given back when it
    /// ends: an upper bound from what each decoder allocates, checked against measurement in the
    /// tests (`each_format_decodes_within_its_estimate`).
    pub fn working_bytes(&self) -> u64 {
        let px = self.pixels();
        let file = self.file_bytes;
        let scaled = match self.format {
            // A few rows at a time (unfiltered, decompressed, converted), eight rows of 16-bit
            // RGBA covering them, and a non-pixel chunk buffered whole (at most the file).
            ImageFormat::Png => u64::from(self.width) * 8 * 8 + file,
            // A copy of the file; progressive or multi-scan JPEG keeps every component's
            // coefficients (two bytes each, up to four components) until its last scan.
            // Blocks are whole 16 x 16 MCUs.
            ImageFormat::Jpeg => {
                let padded = u64::from(self.width).div_ceil(16)
                    * 16
                    * (u64::from(self.height).div_ceil(16) * 16);
                let components = if self.grey { 1 } else { 4 };
                padded * 2 * components + file * 2
            }
            // Lossy: YUV planes and the alpha plane; lossless without alpha, or animated: a
            // whole RGBA frame and a canvas beside the output. The compressed partitions are
            // copied.
            ImageFormat::WebP => px * 8 + file * 2,
            // The first frame as RGBA beside the canvas, and its palette indices.
            _ => px * 5 + file * 2,
        };
        scaled + DECODER_FIXED_BYTES
    }

    /// The most bytes decoding takes at once: the image and the decoder's working memory.
    pub fn peak_bytes(&self) -> u64 {
        self.held_bytes() + self.working_bytes()
    }
}

/// Read an image's header: the format sniffed from the bytes (PNG, JPEG, WebP or GIF), its
/// dimensions checked against `max_pixels`. No pixel is decoded; cheap, but the parsing is of
/// hostile bytes all the same: run it where [`decode`] would run.
pub fn probe(bytes: &[u8], limits: &InputLimits) -> Result<Header, InputError> {
    let format = sniff(bytes)?;
    guarded(|| header_of(bytes, format, limits))
}

/// Decode image bytes (PNG, JPEG, WebP, GIF first frame) into straight RGBA8 under `limits`.
///
/// The format is sniffed from the bytes; the dimensions are read from the header and checked
/// against `max_pixels` before any pixel buffer is allocated, and [`image::Limits`] bound the
/// decoders as a second guard. Truncated or corrupt data gives an [`InputError`], never a
/// panic. CPU work: run it on a blocking thread.
pub fn decode(bytes: &[u8], limits: &InputLimits) -> Result<RgbaImage, InputError> {
    let header = probe(bytes, limits)?;
    decode_probed(bytes, &header, limits)
}

/// [`decode`] for bytes whose header [`probe`] has read (and which the budget has reserved
/// [`Header::peak_bytes`] for).
pub fn decode_probed(
    bytes: &[u8],
    header: &Header,
    limits: &InputLimits,
) -> Result<RgbaImage, InputError> {
    guarded(|| match header.format {
        ImageFormat::Png => decode_png(bytes, header),
        _ => decode_other(bytes, header, limits),
    })
}

fn sniff(bytes: &[u8]) -> Result<ImageFormat, InputError> {
    match image::guess_format(bytes) {
        Ok(
            format @ (ImageFormat::Png | ImageFormat::Jpeg | ImageFormat::WebP | ImageFormat::Gif),
        ) => Ok(format),
        _ => Err(InputError::UnsupportedFormat),
    }
}

/// The decoders are third-party code fed hostile bytes: a panic in one is a bad image, not a
/// crashed worker thread.
fn guarded<T>(work: impl FnOnce() -> Result<T, InputError>) -> Result<T, InputError> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)) {
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

/// The image crate's limits while reading a header: no side limit yet, so that an oversized
/// image is reported by its size; the decoders' own buffers bounded by the second guard.
fn header_limits(limits: &InputLimits) -> image::Limits {
    let mut header = image::Limits::default();
    header.max_image_width = None;
    header.max_image_height = None;
    header.max_alloc = Some(limits.max_pixels.saturating_mul(ALLOC_BYTES_PER_PIXEL));
    header
}

fn header_of(
    bytes: &[u8],
    format: ImageFormat,
    limits: &InputLimits,
) -> Result<Header, InputError> {
    let mut reader = ImageReader::with_format(Cursor::new(bytes), format);
    reader.limits(header_limits(limits));
    let decoder = reader.into_decoder().map_err(decode_error)?;
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
    Ok(Header {
        format,
        width,
        height,
        grey: matches!(decoder.color_type(), ColorType::L8 | ColorType::L16),
        file_bytes: bytes.len() as u64,
    })
}

/// PNG, row by row: the `png` crate expands palettes and low bit depths and strips 16-bit
/// samples to 8 as it hands each row over, and the row is widened to RGBA straight into the
/// image. Interlaced rows are put in place pass by pass.
fn decode_png(bytes: &[u8], header: &Header) -> Result<RgbaImage, InputError> {
    let mut decoder = png::Decoder::new_with_limits(
        Cursor::new(bytes),
        png::Limits {
            bytes: usize::try_from(header.working_bytes()).unwrap_or(usize::MAX),
        },
    );
    decoder.set_transformations(png::Transformations::normalize_to_color8());
    // Text and colour profiles are not used: not kept, so not allocated.
    decoder.set_ignore_text_chunk(true);
    decoder.set_ignore_iccp_chunk(true);
    let mut reader = decoder.read_info().map_err(png_error)?;
    let (width, height) = (reader.info().width, reader.info().height);
    if (width, height) != (header.width, header.height) {
        return Err(InputError::Decode("the header changed".to_owned()));
    }
    let channels = match reader.output_color_type() {
        (color, png::BitDepth::Eight) if color != png::ColorType::Indexed => color.samples(),
        (color, depth) => {
            return Err(InputError::Decode(format!(
                "unsupported: {color:?} at {depth:?} after conversion"
            )))
        }
    };
    let stride = width as usize * 4;
    let mut data = vec![0u8; stride * height as usize];
    let mut next = 0;
    let mut pass_row = Vec::new();
    while let Some(row) = reader.next_interlaced_row().map_err(png_error)? {
        match row.interlace() {
            png::InterlaceInfo::Null(_) => {
                let out = data
                    .get_mut(next..next + stride)
                    .ok_or_else(|| InputError::Decode("more rows than the header says".into()))?;
                widen(row.data(), channels, out);
                next += stride;
            }
            png::InterlaceInfo::Adam7(info) => {
                let info = *info;
                pass_row.resize(row.data().len() / channels * 4, 0);
                widen(row.data(), channels, &mut pass_row);
                png::expand_interlaced_row(&mut data, stride, &pass_row, &info, 32);
            }
        }
    }
    Ok(RgbaImage {
        width,
        height,
        data,
    })
}

/// 8-bit grey, grey and alpha, RGB or RGBA pixels in `src` as RGBA in `dst`. One loop per
/// channel count, so that each is compiled for its fixed pixel size.
fn widen(src: &[u8], channels: usize, dst: &mut [u8]) {
    fn each<const C: usize>(src: &[u8], dst: &mut [u8], rgba: impl Fn([u8; C]) -> [u8; 4]) {
        for (px, out) in src.chunks_exact(C).zip(dst.chunks_exact_mut(4)) {
            let px: [u8; C] = px.try_into().expect("chunks of C samples");
            out.copy_from_slice(&rgba(px));
        }
    }
    match channels {
        1 => each(src, dst, |[g]| [g, g, g, 255]),
        2 => each(src, dst, |[g, a]| [g, g, g, a]),
        3 => each(src, dst, |[r, g, b]| [r, g, b, 255]),
        _ => each(src, dst, |px: [u8; 4]| px),
    }
}

/// The first `pixels` pixels of `channels` samples at the front of `data` widened to RGBA in
/// place. From the back, a stretch at a time: the last pixels' RGBA bytes lie beyond every byte
/// of theirs and of the pixels before them, so each stretch is widened by [`widen`] from one
/// part of the buffer into another, and only the first few pixels go one by one.
fn widen_in_place(data: &mut [u8], pixels: usize, channels: usize) {
    let mut end = pixels;
    while end > 0 {
        // Pixels [start, end) can be widened into [4 * start, 4 * end) without overwriting
        // [0, channels * end) while 4 * start >= channels * end.
        let n = end * (4 - channels) / 4;
        if n == 0 {
            break;
        }
        let start = end - n;
        let (head, tail) = data.split_at_mut(start * 4);
        widen(
            &head[start * channels..end * channels],
            channels,
            &mut tail[..n * 4],
        );
        end = start;
    }
    for i in (0..end).rev() {
        let mut px = [0u8; 4];
        px[..channels].copy_from_slice(&data[i * channels..(i + 1) * channels]);
        let mut out = [0u8; 4];
        widen(&px[..channels], channels, &mut out);
        data[i * 4..i * 4 + 4].copy_from_slice(&out);
    }
}

/// JPEG, WebP and GIF: their decoders give 8-bit pixels of up to four channels, written into
/// the front of the RGBA buffer and then widened in place ([`widen_in_place`]).
fn decode_other(
    bytes: &[u8],
    header: &Header,
    limits: &InputLimits,
) -> Result<RgbaImage, InputError> {
    let mut reader = ImageReader::with_format(Cursor::new(bytes), header.format);
    reader.limits(header_limits(limits));
    let mut decoder = reader.into_decoder().map_err(decode_error)?;
    let (width, height) = decoder.dimensions();
    if (width, height) != (header.width, header.height) {
        return Err(InputError::Decode("the header changed".to_owned()));
    }
    // The second guard: no side longer than the pixel limit allows, and the decoded buffer
    // plus the decoders' working memory within max_alloc.
    let side = u32::try_from(limits.max_pixels).unwrap_or(u32::MAX);
    let mut full = header_limits(limits);
    full.max_image_width = Some(side);
    full.max_image_height = Some(side);
    full.reserve(decoder.total_bytes()).map_err(decode_error)?;
    decoder.set_limits(full).map_err(decode_error)?;

    if header.format == ImageFormat::Jpeg && !jpeg_is_complete(bytes) {
        return Err(InputError::Decode("the data is truncated".to_owned()));
    }
    let channels = match decoder.color_type() {
        ColorType::L8 => 1,
        ColorType::La8 => 2,
        ColorType::Rgb8 => 3,
        ColorType::Rgba8 => 4,
        other => return Err(InputError::Decode(format!("unsupported: {other:?} pixels"))),
    };
    let pixels = width as usize * height as usize;
    let mut data = vec![0u8; pixels * 4];
    decoder
        .read_image(&mut data[..pixels * channels])
        .map_err(decode_error)?;
    if channels < 4 {
        widen_in_place(&mut data, pixels, channels);
    }
    Ok(RgbaImage {
        width,
        height,
        data,
    })
}

fn png_error(err: png::DecodingError) -> InputError {
    match err {
        png::DecodingError::IoError(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
            InputError::Decode("the data is truncated".to_owned())
        }
        png::DecodingError::LimitsExceeded => {
            InputError::Decode("over a decoding limit: the decoder needs too much memory".into())
        }
        other => InputError::Decode(other.to_string()),
    }
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
    use image::DynamicImage;

    use super::*;
    use crate::images::inputs::samples::*;

    /// Widening in place gives what widening into a buffer of its own gives, for every channel
    /// count, from no pixels to many (the stretches and the first pixels one by one).
    #[test]
    fn widening_in_place_matches_widening_apart() {
        for channels in 1..=3 {
            for pixels in (0..40).chain([1000, 4097]) {
                let src: Vec<u8> = (0..pixels * channels)
                    .map(|i| (i * 7 % 251) as u8)
                    .collect();
                let mut apart = vec![0u8; pixels * 4];
                widen(&src, channels, &mut apart);
                let mut data = vec![0u8; pixels * 4];
                data[..src.len()].copy_from_slice(&src);
                widen_in_place(&mut data, pixels, channels);
                assert_eq!(data, apart, "{channels} channels, {pixels} pixels");
            }
        }
    }

    /// 16-bit samples come out as their high byte, interlaced or not: the pattern exactly.
    #[test]
    fn sixteen_bit_pngs_decode_to_their_high_bytes() {
        for (w, h) in [(40, 30), (13, 11), (1, 1), (3, 9)] {
            for interlaced in [false, true] {
                let bytes = png16_bytes(w, h, interlaced);
                let img = decode(&bytes, &limits()).unwrap();
                assert_image(&img, w, h);
                assert_eq!(img.data, pattern(w, h).into_raw(), "{w}x{h} {interlaced}");
            }
        }
    }

    #[test]
    fn grey_images_are_widened_to_rgba() {
        let grey = DynamicImage::ImageRgba8(pattern(40, 30)).to_luma8();
        for format in [ImageFormat::Png, ImageFormat::Jpeg] {
            let bytes = encode(grey.clone().into(), format);
            assert_eq!(probe(&bytes, &limits()).unwrap().held_bytes(), 40 * 30 * 4);
            let img = decode(&bytes, &limits()).unwrap();
            assert_image(&img, 40, 30);
            for (px, g) in img.data.chunks_exact(4).zip(grey.as_raw()) {
                assert_eq!((px[0], px[1], px[2], px[3]), (px[0], px[0], px[0], 255));
                if format == ImageFormat::Png {
                    assert_eq!(px[0], *g);
                }
            }
        }
    }

    /// What each decoder really allocates, measured, stays within what the budget reserves for
    /// it; and a 16-bit PNG never has a 16-bit buffer of the whole image (8 bytes a pixel more
    /// than the RGBA8 it becomes).
    #[test]
    fn each_format_decodes_within_its_estimate() {
        use super::super::metered::peak_of;
        let (w, h) = (1000, 700);
        let grey = DynamicImage::ImageRgba8(pattern(w, h)).to_luma8();
        let opaque = DynamicImage::ImageRgba8(pattern(w, h)).to_rgb8();
        let samples = [
            ("png 16-bit", png16_bytes(w, h, false)),
            ("png 16-bit interlaced", png16_bytes(w, h, true)),
            ("png 8-bit", png_bytes(w, h)),
            ("png grey", encode(grey.clone().into(), ImageFormat::Png)),
            ("jpeg", jpeg_bytes(w, h)),
            ("jpeg grey", encode(grey.into(), ImageFormat::Jpeg)),
            ("webp", webp_bytes(w, h)),
            ("webp opaque", encode(opaque.into(), ImageFormat::WebP)),
            ("gif", gif_bytes(w, h)),
        ];
        for (name, bytes) in samples {
            let header = probe(&bytes, &limits()).unwrap();
            let (img, peak) = peak_of(|| decode_probed(&bytes, &header, &limits()).unwrap());
            assert_image(&img, w, h);
            let held = header.held_bytes();
            assert!(peak >= held, "{name}: {peak} < {held}");
            assert!(
                peak <= header.peak_bytes(),
                "{name}: peak {peak} over the estimate {} (held {held}, working {})",
                header.peak_bytes(),
                header.working_bytes()
            );
            if name.starts_with("png 16-bit") {
                let whole_16_bit = u64::from(w * h) * 8;
                assert!(peak < held + whole_16_bit, "{name}: {peak}");
            }
        }
    }

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
