//! `POST /api/v1/upload`: an image from the caller, as `multipart/form-data` with one file part
//! named `image` (Apiframe's v1 SDK) or `file` (its v2 SDK), or as the raw bytes with an image
//! `Content-Type`. The key is checked before any of the body is read; the body is read under
//! `mask_body_limit`.

use axum::body::Body;
use axum::extract::{FromRequest, Multipart, Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;

use crate::auth::Caller;
use crate::http::body;
use crate::http::state::AppState;
use crate::refusal::ApiError;
use crate::tasks::upload;

/// The file parts an upload may name.
const PARTS: [&str; 2] = ["image", "file"];

pub async fn upload(
    State(state): State<AppState>,
    Caller(account): Caller,
    req: Request,
) -> Result<Response, ApiError> {
    let (field, bytes) = image_of(req, &state).await?;
    let stored = upload::store_upload(&state, &account.id, &field, bytes).await?;
    Ok((StatusCode::CREATED, Json(upload::answer(&state, &stored))).into_response())
}

/// The image the request carries and the name of its field (`image` for a raw body).
pub async fn image_of(req: Request, state: &AppState) -> Result<(String, Bytes), ApiError> {
    let media = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|m| m.trim().to_ascii_lowercase())
        .unwrap_or_default();
    let multipart = media == "multipart/form-data";
    if !multipart
        && !matches!(
            media.as_str(),
            "image/png" | "image/jpeg" | "image/webp" | "image/gif"
        )
    {
        return Err(ApiError::UnsupportedUploadType);
    }
    let (parts, body) = req.into_parts();
    let bytes = body::read_body(&parts, body).await?;
    let missing = || {
        ApiError::field(
            "image",
            "missing_field",
            "is required: a file part named image (or file), or the image as the body",
        )
    };
    if !multipart {
        if bytes.is_empty() {
            return Err(missing());
        }
        return Ok(("image".to_string(), bytes));
    }
    // The whole body is in hand (read under its limit): the form is parsed from memory.
    let req = Request::from_parts(parts, Body::from(bytes));
    let mut form = Multipart::from_request(req, state)
        .await
        .map_err(|e| ApiError::field("body", "invalid_body", e.body_text()))?;
    let broken = |e: axum::extract::multipart::MultipartError| {
        ApiError::field(
            "body",
            "invalid_body",
            format!("is not a valid form ({})", e.body_text()),
        )
    };
    while let Some(part) = form.next_field().await.map_err(broken)? {
        let Some(name) = part
            .name()
            .filter(|n| PARTS.contains(n))
            .map(str::to_string)
        else {
            continue;
        };
        let data = part.bytes().await.map_err(broken)?;
        if data.is_empty() {
            return Err(ApiError::field(&name, "missing_field", "is an empty file"));
        }
        return Ok((name, data));
    }
    Err(missing())
}
