//! The images a backend answers with, read as every kind reads them: kept as sent, less their
//! metadata, checked side by side, or made the size asked; and that CPU work off the async
//! runtime.

use std::borrow::Cow;

use serde::Deserialize;

use crate::generate::{ops, Answered, GenerateError};
use crate::images::inputs::{decode, probe, InputLimits};
use crate::images::parallel::side_by_side;
use crate::images::stored::{self, Kept, StoredImage};
use crate::images::RgbaImage;

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
    let failed = |e: String| GenerateError::Failed(format!("{what} from the backend: {e}"));
    match stored::keep(bytes).map_err(failed)? {
        Kept::File(stored) => {
            let header =
                probe(&stored.bytes, &InputLimits::default()).map_err(|e| failed(e.to_string()))?;
            Ok(Answered {
                width: header.width,
                height: header.height,
                stored,
            })
        }
        Kept::Reencode { bytes, orientation } => {
            let pixels = stored::orient(decode_output(&bytes, what)?, orientation);
            Ok(Answered {
                stored: StoredImage::png(&pixels),
                width: pixels.width,
                height: pixels.height,
            })
        }
    }
}

/// [`keep_output`] of each file, side by side ([`side_by_side`]), in order; the first
/// failure by position when any fails. Call it from a blocking thread.
pub fn keep_outputs(files: &[&[u8]]) -> Result<Vec<Answered>, GenerateError> {
    keep_each(files, |file, _| Ok(Cow::Borrowed(*file)))
}

/// [`keep_output`] of each of `files`, side by side ([`side_by_side`]; each reads its
/// whole file, and one that is not PNG or JPEG is decoded), where `bytes` gives a file's bytes
/// on its thread (decoding the base64 an answer carries, say); in order, the first failure by
/// position when any fails. Call it from a blocking thread.
pub fn keep_each<T: Sync>(
    files: &[T],
    bytes: impl for<'a> Fn(&'a T, &str) -> Result<Cow<'a, [u8]>, GenerateError> + Sync,
) -> Result<Vec<Answered>, GenerateError> {
    side_by_side(files, |i, file| {
        let what = format!("image {}", i + 1);
        keep_output(bytes(file, &what)?, &what)
    })
    .into_iter()
    .collect()
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
