//! The images a backend answers with, read as every kind reads them: kept as sent, less their
//! metadata, checked side by side, or made the size asked; and that CPU work off the async
//! runtime.

use std::borrow::Cow;

use serde::Deserialize;

use crate::generate::{ops, Answered, GenerateError};
use crate::images::inputs::{decode, probe, InputLimits};
use crate::images::parallel::{side_by_side, side_by_side_by_size};
use crate::images::stored::{self, Kept, StoredImage};
use crate::images::RgbaImage;
use image::metadata::Orientation;

/// The base64 text of an image in a JSON answer, as bytes: borrowed from the answer's body where
/// it needed no unescaping, and never checked for UTF-8 (a pass over megabytes that the base64
/// decoder's check of every byte makes needless). A field of `Option<Cow<str>>` would be neither:
/// serde borrows a `Cow` only when it is the field's whole type.
#[derive(Deserialize)]
#[serde(transparent)]
pub struct Base64Text<'a>(#[serde(borrow)] pub Cow<'a, [u8]>);

/// Decode an image a backend made, under the input limits: a malformed one is the backend's
/// fault, never a panic.
pub fn decode_output(bytes: &[u8], what: &str) -> Result<RgbaImage, GenerateError> {
    decode(bytes, &InputLimits::default())
        .map_err(|e| GenerateError::Failed(format!("{what} from the backend: {e}")))
}

/// An image a backend made, as easel stores it ([`stored::keep`]: a PNG or JPEG less its
/// metadata, anything else as PNG), with its size. A kept file's chunks or segments have parsed
/// and its header is read (its size within the input limits); its pixels are decoded when its
/// task's grid is made ([`crate::images::grid`]). A malformed file fails the task, never a
/// panic.
pub fn keep_output(bytes: Cow<'_, [u8]>, what: &str) -> Result<Answered, GenerateError> {
    match keep_as_it_is(bytes, what)? {
        Ok(answered) => Ok(answered),
        Err((bytes, orientation)) => reencode(&bytes, orientation, what),
    }
}

/// A file [`keep_as_it_is`] leaves to [`reencode`] (its own copy: few such files come, and
/// decoding one costs far more), and how to turn it.
type ToReencode = (Vec<u8>, Orientation);

/// The light part of [`keep_output`]: a PNG or JPEG less its metadata, its header read
/// (`Ok`); or what is to be decoded and stored as PNG (`Err`), left to [`reencode`].
fn keep_as_it_is(
    bytes: Cow<'_, [u8]>,
    what: &str,
) -> Result<Result<Answered, ToReencode>, GenerateError> {
    let failed = |e: String| GenerateError::Failed(format!("{what} from the backend: {e}"));
    match stored::keep(bytes).map_err(failed)? {
        Kept::File(stored) => {
            let header =
                probe(&stored.bytes, &InputLimits::default()).map_err(|e| failed(e.to_string()))?;
            Ok(Ok(Answered {
                width: header.width,
                height: header.height,
                stored,
            }))
        }
        Kept::Reencode { bytes, orientation } => Ok(Err((bytes.into_owned(), orientation))),
    }
}

/// The heavy part of [`keep_output`]: a file easel does not keep as it came, decoded, turned
/// as its Exif says and encoded as PNG.
fn reencode(bytes: &[u8], orientation: Orientation, what: &str) -> Result<Answered, GenerateError> {
    let pixels = stored::orient(decode_output(bytes, what)?, orientation);
    Ok(Answered {
        stored: StoredImage::png(&pixels),
        width: pixels.width,
        height: pixels.height,
    })
}

/// [`keep_output`] of each file ([`keep_each`]), in order; the first failure by position when
/// any fails. Call it from a blocking thread.
pub fn keep_outputs(files: &[&[u8]]) -> Result<Vec<Answered>, GenerateError> {
    keep_each(files, |file| file.len(), |file, _| Ok(Cow::Borrowed(*file)))
}

/// [`keep_output`] of each of `files`, where `bytes` gives a file's bytes on its thread
/// (decoding the base64 an answer carries, say) and `size` what a file takes as it came; in
/// order, the first failure by position when any fails. The light part (a PNG's chunks or a
/// JPEG's markers read, its header) goes side by side by size ([`side_by_side_by_size`]): a few
/// small files are read by the calling thread alone, as a helper thread took longer to start on
/// an idle CPU than it saved on them. Files to re-encode (WebP, GIF, a turned JPEG), few bytes
/// but much work, are decoded side by side ([`side_by_side`]). Call it from a blocking thread.
pub fn keep_each<T: Sync>(
    files: &[T],
    size: impl Fn(&T) -> usize,
    bytes: impl for<'a> Fn(&'a T, &str) -> Result<Cow<'a, [u8]>, GenerateError> + Sync,
) -> Result<Vec<Answered>, GenerateError> {
    let what = |i: usize| format!("image {}", i + 1);
    let light = side_by_side_by_size(files, size, |i, file| {
        let what = what(i);
        keep_as_it_is(bytes(file, &what)?, &what)
    });
    // Files to re-encode before the first that failed its light part: one of them failing
    // comes first by position. Those after it are not worth the work.
    let mut slots: Vec<Option<Answered>> = Vec::with_capacity(light.len());
    let mut heavy = Vec::new();
    let mut failed = None;
    for (i, file) in light.into_iter().enumerate() {
        match file {
            Ok(Ok(answered)) => slots.push(Some(answered)),
            Ok(Err(file)) => {
                slots.push(None);
                heavy.push((i, file));
            }
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    let reencoded = side_by_side(&heavy, |_, (i, (bytes, orientation))| {
        reencode(bytes, *orientation, &what(*i))
    });
    for ((i, _), answered) in heavy.iter().zip(reencoded) {
        slots[*i] = Some(answered?);
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(slots.into_iter().flatten().collect()),
    }
}

/// `images` decoded, resized to `w` x `h` and encoded as PNG, side by side: a
/// backend's images of another size than asked, made the size asked (their files cannot be
/// kept). The first failure by position when one does not decode.
pub fn resize_all(
    images: Vec<Answered>,
    (w, h): (u32, u32),
) -> Result<Vec<Answered>, GenerateError> {
    side_by_side(&images, |i, image| {
        let what = format!("image {}", i + 1);
        let pixels = ops::resize(&decode_output(&image.stored.bytes, &what)?, w, h);
        Ok(Answered {
            stored: StoredImage::png(&pixels),
            width: pixels.width,
            height: pixels.height,
        })
    })
    .into_iter()
    .collect()
}

/// CPU work (resampling, PNG coding) off the async runtime.
pub async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, GenerateError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| GenerateError::Failed(format!("image work crashed: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::images::inputs::samples::{gif_bytes, jpeg_bytes, png_bytes, webp_bytes};
    use crate::images::stored::Format;

    #[test]
    fn kept_files_and_reencoded_ones_come_back_in_order_small_or_large() {
        // Small files (read on the calling thread) and the same beside a large one (side by
        // side): PNG and JPEG kept as they came, WebP and GIF re-encoded as PNG, in order.
        let small = vec![
            png_bytes(24, 16),
            webp_bytes(24, 16),
            jpeg_bytes(24, 16),
            gif_bytes(24, 16),
        ];
        let mut large = small.clone();
        large[0] = png_bytes(800, 700);
        for (files, first) in [(&small, (24, 16)), (&large, (800, 700))] {
            let kept = keep_each(files, Vec::len, |f, _| Ok(Cow::Borrowed(f))).unwrap();
            let formats: Vec<Format> = kept.iter().map(|a| a.stored.format).collect();
            assert_eq!(
                formats,
                [Format::Png, Format::Png, Format::Jpeg, Format::Png]
            );
            assert_eq!(kept[0].size(), first);
            for answered in &kept[1..] {
                assert_eq!(answered.size(), (24, 16));
            }
            assert!(kept[1].stored.bytes.starts_with(b"\x89PNG\r\n"));
        }
    }

    #[test]
    fn the_first_file_to_fail_by_position_is_named() {
        let mut files = vec![png_bytes(8, 8), b"not an image".to_vec(), png_bytes(8, 8)];
        files[2].truncate(20);
        let failed = keep_each(&files, Vec::len, |f, _| Ok(Cow::Borrowed(f))).unwrap_err();
        assert!(failed.to_string().contains("image 2"), "{failed}");
        // A failure of the light part is named before a later one's, whichever thread had it.
        files[1] = png_bytes(8, 8);
        let failed = keep_each(&files, Vec::len, |f, _| Ok(Cow::Borrowed(f))).unwrap_err();
        assert!(failed.to_string().contains("image 3"), "{failed}");
    }

    #[test]
    fn base64_text_is_borrowed_from_the_body_unless_it_was_escaped() {
        #[derive(Deserialize)]
        struct Item<'a> {
            #[serde(default, borrow)]
            b64_json: Option<Base64Text<'a>>,
        }
        let body = br#"[{"b64_json": "aGVsbG8="}, {"b64_json": "a\/b+"}, {"b64_json": null}, {}]"#;
        let items: Vec<Item> = serde_json::from_slice(body).unwrap();
        let text = |i: usize| items[i].b64_json.as_ref().map(|t| &t.0);
        match text(0) {
            Some(Cow::Borrowed(b)) => {
                assert_eq!(*b, b"aGVsbG8=");
                assert!(
                    body.as_ptr_range().contains(&b.as_ptr()),
                    "a slice of the body itself"
                );
            }
            other => panic!("not borrowed: {other:?}"),
        }
        assert!(
            matches!(text(1), Some(Cow::Owned(b)) if b == b"a/b+"),
            "an escaped text is unescaped: {:?}",
            text(1)
        );
        assert!(text(2).is_none() && text(3).is_none());
        // Not a string at all: the backend's answer is malformed, and says where.
        let wrong = serde_json::from_slice::<Vec<Item>>(br#"[{"b64_json": 7}]"#);
        assert!(wrong.is_err());
    }
}
