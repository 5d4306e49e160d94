//! An image from the caller checked by its content, as every input image is decoded: the format
//! sniffed from the bytes, the dimensions read and bounded before any pixel is decoded, nothing
//! after the image's own end, then a full decode under the node's decode budget to catch
//! truncation and bombs. Neither its name nor its declared type is trusted.

use bytes::Bytes;
use image::ImageFormat;

use super::super::Tasks;
use crate::images::inputs::{check_whole, probe};
use crate::refusal::ApiError;

/// What the checked bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checked {
    pub content_type: &'static str,
    /// The file name extension its key gets (the files route serves its type from it).
    pub extension: &'static str,
    pub width: u32,
    pub height: u32,
}

/// Check `bytes` given as `field`: 400 `invalid_image` naming the field and what is wrong.
pub async fn check_image(tasks: &Tasks, field: &str, bytes: Bytes) -> Result<Checked, ApiError> {
    let limits = tasks.fetcher.limits();
    let bad = |problem: String| ApiError::BadRequest {
        code: "invalid_image",
        msg: format!("{field}: {problem}"),
    };
    if bytes.len() as u64 > limits.max_bytes {
        return Err(bad(format!(
            "is {} bytes, more than the {} bytes an input image may be",
            bytes.len(),
            limits.max_bytes
        )));
    }
    let probed = {
        let bytes = bytes.clone();
        tokio::task::spawn_blocking(move || {
            let header = probe(&bytes, &limits)?;
            check_whole(&bytes, header.format)?;
            Ok::<_, crate::images::inputs::InputError>(header)
        })
        .await
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("image check: {e}")))?
    };
    let header = probed.map_err(|e| bad(e.to_string()))?;
    // Every pixel, under the uploads' own budget (the workers' is another): what passes here
    // decodes there, and a flood of uploads neither waits for the workers' tasks nor makes them
    // wait.
    crate::metrics::image_check("decoded");
    tasks
        .upload_budget
        .decode_all(vec![(field.to_string(), bytes)], limits)
        .await
        .map_err(|e| ApiError::BadRequest {
            code: "invalid_image",
            msg: e,
        })?;
    let (content_type, extension) = match header.format {
        ImageFormat::Png => ("image/png", "png"),
        ImageFormat::Jpeg => ("image/jpeg", "jpg"),
        ImageFormat::WebP => ("image/webp", "webp"),
        _ => ("image/gif", "gif"),
    };
    Ok(Checked {
        content_type,
        extension,
        width: header.width,
        height: header.height,
    })
}
