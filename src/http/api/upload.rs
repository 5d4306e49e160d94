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

use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::doc::{Posted, Refusal};
use crate::auth::Caller;
use crate::http::body;
use crate::http::state::AppState;
use crate::refusal::ApiError;
use crate::tasks::upload;

/// The file parts an upload may name.
const PARTS: [&str; 2] = ["image", "file"];

/// A form with the image as one file part, `image` or `file`.
#[derive(ToSchema)]
pub struct UploadForm {
    #[schema(value_type = Option<ImageBytes>, nullable = false)]
    pub image: Option<Vec<u8>>,
    #[schema(value_type = Option<ImageBytes>, nullable = false)]
    pub file: Option<Vec<u8>>,
}

/// An image file's bytes.
#[derive(ToSchema)]
#[schema(value_type = String, format = Binary)]
pub struct ImageBytes(pub Vec<u8>);

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(upload))
}

/// Upload an image, to use in image fields and image prompts
///
/// The image as `multipart/form-data` with one file part named `image` (Apiframe's v1 SDK) or
/// `file` (its v2 SDK), or as the raw bytes with an image Content-Type. Checked by its content:
/// PNG, JPEG, WebP or GIF (first frame), at most `input_max_bytes` (20 MiB) and
/// `input_max_pixels` (25 megapixels), decoded whole, nothing after the image's end. The body
/// may be up to `mask_body_limit` (8 MiB). Kept for `upload_retention` (24 h); counts against
/// `max_upload_bytes_per_day` (1 GiB) per account.
#[utoipa::path(
    post,
    path = "/api/v1/upload",
    operation_id = "upload",
    request_body(content(
        (UploadForm = "multipart/form-data"),
        (ImageBytes = "image/png"),
        (ImageBytes = "image/jpeg"),
        (ImageBytes = "image/webp"),
        (ImageBytes = "image/gif"),
    )),
    responses(
        (status = 201, description = "Stored: the upload", body = upload::Answer),
        (status = 408, response = Refusal),
        Posted,
    )
)]
pub async fn upload(
    State(state): State<AppState>,
    Caller(account): Caller,
    req: Request,
) -> Result<Response, ApiError> {
    let (field, bytes) = image_of(req).await?;
    let stored = upload::store_upload(&state, &account.id, &field, bytes).await?;
    Ok((StatusCode::CREATED, Json(upload::answer(&state, &stored))).into_response())
}

/// The image the request carries and the name of its field (`image` for a raw body).
pub async fn image_of(req: Request) -> Result<(String, Bytes), ApiError> {
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
    if !multipart {
        if bytes.is_empty() {
            return Err(missing_image());
        }
        return Ok(("image".to_string(), bytes));
    }
    // The whole body is in hand (read under its limit): the form is parsed from memory.
    form_image(Request::from_parts(parts, Body::from(bytes))).await
}

/// The first file part named `image` or `file` of a form held in memory, and its name.
async fn form_image(req: Request) -> Result<(String, Bytes), ApiError> {
    let mut form = Multipart::from_request(req, &())
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
    Err(missing_image())
}

fn missing_image() -> ApiError {
    ApiError::field(
        "image",
        "missing_field",
        "is required: a file part named image (or file), or the image as the body",
    )
}

#[cfg(test)]
mod fuzz;
