//! A task's images scaled down to small JPEGs for lists and pages, kept in memory a while.

use axum::routing::get;
use axum::Router;
use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::error_page::WebError;
use super::session::SignedIn;
use crate::domain::Output;
use crate::http::state::AppState;

/// The routes of these pages, beside their handlers.
pub(super) fn routes() -> Router<AppState> {
    Router::new().route("/tasks/{task_id}/image/{n}", get(thumbnail))
}

/// The widths images are scaled to, and their JPEG quality: thumbnails in lists (shown at 72 CSS
/// pixels), previews on a task's page. Thumbnails are small and rough so that a full page of
/// tasks stays under 100 KB (docs/benchmarks.md, "Dashboard page weight").
pub const THUMB_WIDTH: u32 = 96;
const THUMB_QUALITY: u8 = 70;
pub const PREVIEW_WIDTH: u32 = 320;
const PREVIEW_QUALITY: u8 = 80;
/// The width the region editor shows an image at (its mask is made at the image's own size).
pub const EDITOR_WIDTH: u32 = 768;
/// Scaled images kept in memory; past this the cache starts again empty.
const SCALED_CACHE_MAX: usize = 512;

#[derive(Deserialize)]
pub struct ImageQuery {
    #[serde(default)]
    w: u32,
}

static SCALED: LazyLock<Mutex<HashMap<(String, u32), Bytes>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// `GET /tasks/{task_id}/image/{n}?w=96|320`: image `n` of the account's task (0: the grid or
/// the single image, 1 to 4: a grid's images) scaled down to JPEG, so that lists of tasks stay
/// light. Kept by browsers for good: the image at a key never changes.
pub async fn thumbnail(
    State(state): State<AppState>,
    user: SignedIn,
    Path((raw, n)): Path<(String, usize)>,
    Query(q): Query<ImageQuery>,
) -> Result<Response, WebError> {
    if ![THUMB_WIDTH, PREVIEW_WIDTH, EDITOR_WIDTH].contains(&q.w) {
        return Err(WebError::NotFound);
    }
    let task = user.own_task(&state, &raw).await?;
    let key = match (task.output.as_ref().filter(|_| !task.data_removed()), n) {
        (Some(Output::Grid { grid_key, .. }), 0) => grid_key.clone(),
        (Some(Output::Grid { image_keys, .. }), n) => {
            image_keys.get(n - 1).cloned().ok_or(WebError::NotFound)?
        }
        (Some(Output::Single { image_key, .. }), 0) => image_key.clone(),
        _ => return Err(WebError::NotFound),
    };
    let cached = SCALED
        .lock()
        .expect("not poisoned")
        .get(&(key.clone(), q.w))
        .cloned();
    let jpeg = match cached {
        Some(jpeg) => jpeg,
        None => {
            let file = stored(&state, &key).await?;
            let width = q.w;
            let jpeg = tokio::task::spawn_blocking(move || scale(&file, width))
                .await
                .map_err(|e| WebError::Internal(e.into()))?
                .map_err(WebError::Internal)?;
            let mut cache = SCALED.lock().expect("not poisoned");
            if cache.len() >= SCALED_CACHE_MAX {
                cache.clear();
            }
            cache.insert((key, q.w), jpeg.clone());
            jpeg
        }
    };
    Ok(private_jpeg(jpeg, "private, max-age=31536000, immutable"))
}

/// The bytes stored at `key`; 404 when there are none.
pub async fn stored(state: &AppState, key: &str) -> Result<Bytes, WebError> {
    state
        .blobs
        .get(key)
        .await
        .map_err(|e| WebError::Internal(e.into()))?
        .ok_or(WebError::NotFound)
}

/// `jpeg` as the answer, kept by the browser alone as `cache_control` says.
pub fn private_jpeg(jpeg: Bytes, cache_control: &'static str) -> Response {
    let headers = [
        (header::CONTENT_TYPE, HeaderValue::from_static("image/jpeg")),
        (
            header::CACHE_CONTROL,
            HeaderValue::from_static(cache_control),
        ),
    ];
    (headers, jpeg).into_response()
}

/// The dashboard's address of the preview at `key` (`{task_id}/{folder}/preview-{n}.jpg`).
pub fn preview_path(key: &str) -> Option<String> {
    let (task_id, rest) = key.split_once('/')?;
    is_preview(rest).then(|| format!("/tasks/{task_id}/preview/{rest}"))
}

/// Whether `rest` names a preview in a task's folder: `{folder}/preview-{n}.jpg`.
pub(super) fn is_preview(rest: &str) -> bool {
    let Some((folder, name)) = rest.split_once('/') else {
        return false;
    };
    let n = name
        .strip_prefix("preview-")
        .and_then(|n| n.strip_suffix(".jpg"));
    !folder.is_empty()
        && folder.bytes().all(|b| b.is_ascii_hexdigit())
        && n.is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// A stored image (PNG, or a backend's JPEG) scaled to fit `width` x `width`, as JPEG.
fn scale(file: &[u8], width: u32) -> anyhow::Result<Bytes> {
    let format = match image::guess_format(file)? {
        format @ (image::ImageFormat::Png | image::ImageFormat::Jpeg) => format,
        other => anyhow::bail!("a stored image is {other:?}, not PNG or JPEG"),
    };
    let img = image::load_from_memory_with_format(file, format)?;
    let small = img.thumbnail(width, width).to_rgb8();
    let quality = if width == THUMB_WIDTH {
        THUMB_QUALITY
    } else {
        PREVIEW_QUALITY
    };
    let mut out = Vec::new();
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, quality).encode_image(&small)?;
    Ok(Bytes::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_tasks_previews_have_a_dashboard_address() {
        assert_eq!(
            preview_path("0b1c/3fa9/preview-2.jpg").as_deref(),
            Some("/tasks/0b1c/preview/3fa9/preview-2.jpg")
        );
        assert_eq!(preview_path("0b1c/3fa9/grid.png"), None);
        assert_eq!(preview_path("0b1c/x/preview-2.jpg"), None);
        assert_eq!(preview_path("0b1c/3fa9/preview-.jpg"), None);
        assert_eq!(preview_path("0b1c/preview-2.jpg"), None);
        // A backend's JPEG kept as it came is an image of the task, not a preview.
        assert_eq!(preview_path("0b1c/3fa9/0.jpg"), None);
    }

    #[test]
    fn thumbnails_are_made_of_png_and_jpeg_and_nothing_else() {
        use crate::images::stored::StoredImage;
        use crate::images::RgbaImage;
        let image = RgbaImage::new(300, 200);
        let png = StoredImage::png(&image).bytes;
        let jpeg = StoredImage::jpeg(&image).unwrap().bytes;
        for file in [png, jpeg] {
            let thumb = scale(&file, THUMB_WIDTH).unwrap();
            let small = image::load_from_memory(&thumb).unwrap();
            assert_eq!((small.width(), small.height()), (THUMB_WIDTH, 64));
        }
        let mut gif = Vec::new();
        image::DynamicImage::new_rgba8(4, 4)
            .write_to(&mut std::io::Cursor::new(&mut gif), image::ImageFormat::Gif)
            .unwrap();
        assert!(scale(&gif, THUMB_WIDTH).is_err());
    }
}
