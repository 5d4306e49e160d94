//! `GET /files/{key}`: the images, read from whichever blob store is configured, so that any
//! node serves any task's images. `HEAD` is answered by the same route without the body. Not in
//! the OpenAPI document: the images' URLs come in records, and are fetched as they are.

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sha2::{Digest, Sha256};
use utoipa_axum::router::OpenApiRouter;

use crate::blobs;
use crate::http::extract::list_items;
use crate::http::state::AppState;
use crate::images::grid::follow as grids;
use crate::refusal::ApiError;

/// Keys carry a random token and are written once, so what a client has cached never goes stale.
const CACHE_CONTROL: &str = "public, max-age=31536000, immutable";

/// The image files' route, routed but left out of the document.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().route("/files/{*key}", get(serve))
}

async fn serve(
    State(state): State<AppState>,
    key: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    // A key that easel cannot have made (traversal, an absolute path, a backslash, bytes that
    // are not UTF-8) is simply not there.
    let Ok(Path(key)) = key else {
        return Err(ApiError::FileNotFound);
    };
    if !blobs::is_valid_key(&key) {
        return Err(ApiError::FileNotFound);
    }
    // A task's grid may follow it by a moment, or not have been made at all (a node stopped
    // between the two): made now when its four images are there.
    let bytes = match grids::get(&state.blobs, &key).await {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Err(ApiError::FileNotFound),
        Err(e) if e.is_transient() => {
            tracing::warn!(key, error = %e, "blob store unavailable");
            return Err(ApiError::Unavailable {
                msg: "the image store is unavailable; try again shortly".into(),
                retry_after_secs: 5,
            });
        }
        Err(e) => return Err(ApiError::Internal(e.into())),
    };
    // The content at a key never changes, so the key itself identifies the version.
    let etag = format!("\"{}\"", hex::encode(&Sha256::digest(key.as_bytes())[..16]));
    let etag = HeaderValue::from_str(&etag).expect("hex is a valid header value");
    let common = [
        (header::ETAG, etag.clone()),
        (
            header::CACHE_CONTROL,
            HeaderValue::from_static(CACHE_CONTROL),
        ),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
    ];
    if matches_etag(&headers, &etag) {
        return Ok((StatusCode::NOT_MODIFIED, common).into_response());
    }
    Ok((
        common,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static(blobs::content_type_of(&key)),
        )],
        bytes,
    )
        .into_response())
}

/// Whether `If-None-Match` names `etag` (or is `*`), compared weakly as RFC 9110 asks.
fn matches_etag(headers: &HeaderMap, etag: &HeaderValue) -> bool {
    let ours = etag.as_bytes();
    list_items(headers, header::IF_NONE_MATCH)
        .map(|tag| tag.trim())
        .any(|tag| tag == "*" || tag.trim_start_matches("W/").as_bytes() == ours)
}
