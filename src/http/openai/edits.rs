//! `POST /v1/images/edits` and `POST /v1/images/variations` (multipart forms), made of the
//! operations easel has:
//! - an edit without a mask: imagine tasks with the images as image prompts (uploads of the
//!   account), the text after them;
//! - an edit with a mask, and a variation: the (first) image, scaled to at most 1024 px on its
//!   long side, kept as an upload, becomes an `upscale-highres` 2x task (a follow-up's parent
//!   must be an upscale task easel made); then inpaint tasks of it with the mask made easel's
//!   (OpenAI's transparent pixels are redrawn), or variations tasks of it (`strong`).
//!
//! The form is read under `mask_body_limit`, after the key is checked; a declared length over it
//! is 413 before anything of the body is read.

use axum::body::Body as AxumBody;
use axum::extract::{FromRequest, Multipart, Request, State};
use axum::response::Response;
use base64::Engine;
use bytes::Bytes;
use serde_json::{json, Map, Value};
use tokio::time::Instant;

use super::auth::OpenAiCaller;
use super::doc::{EditRequest, FormRefusals, ImagesResponse, VariationRequest};
use super::error::{field, OpenAiError};
use super::fields::{Common, Fields};
use super::run::{self, Who};
use super::stream;
use crate::domain::OpKind;
use crate::http::body;
use crate::http::state::AppState;
use crate::images::convert;
use crate::refusal::ApiError;
use crate::tasks::upload;
use crate::tasks::Tasks;

/// The most images an edit takes (`image[]`), as many as an imagine's image prompts.
pub const IMAGES_MAX: usize = 5;
/// The long side a masked edit's or a variation's image is scaled to at most: its 2x upscale
/// must stay within the 2048 px a follow-up's parent may have.
const FOLLOW_UP_SIDE: u32 = 1024;

/// A form: its files by field, its other fields as text.
struct Form {
    images: Vec<Bytes>,
    mask: Option<Bytes>,
    fields: Fields,
}

async fn read_form(req: Request, state: &AppState) -> Result<Form, OpenAiError> {
    let is_form = req
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("multipart/form-data"));
    if !is_form {
        return Err(ApiError::UnsupportedUploadType.into());
    }
    let (parts, body) = req.into_parts();
    let bytes = body::read_body(&parts, body)
        .await
        .map_err(ApiError::from)?;
    let req = Request::from_parts(parts, AxumBody::from(bytes));
    let broken = |e: axum::extract::multipart::MultipartError| {
        field(
            "body",
            "invalid_body",
            format!("is not a valid form ({})", e.body_text()),
        )
    };
    let mut form = Multipart::from_request(req, state)
        .await
        .map_err(|e| field("body", "invalid_body", e.body_text()))?;
    let mut out = Form {
        images: Vec::new(),
        mask: None,
        fields: Fields {
            map: Map::new(),
            form: true,
        },
    };
    while let Some(part) = form.next_field().await.map_err(broken)? {
        let name = part.name().unwrap_or_default().to_string();
        let data = part.bytes().await.map_err(broken)?;
        match name.as_str() {
            "image" | "image[]" => {
                if data.is_empty() {
                    return Err(field("image", "missing_field", "is an empty file"));
                }
                out.images.push(data);
            }
            "mask" => out.mask = Some(data),
            _ => {
                // Text fields; a file under another name is ignored like any unknown field.
                if let Ok(text) = String::from_utf8(data.to_vec()) {
                    out.fields.map.insert(name, Value::String(text));
                }
            }
        }
    }
    if out.images.is_empty() {
        return Err(field(
            "image",
            "missing_field",
            "is required: a file part named image",
        ));
    }
    if out.images.len() > IMAGES_MAX {
        return Err(field(
            "image",
            "invalid_value",
            format!("at most {IMAGES_MAX} images"),
        ));
    }
    Ok(out)
}

/// Keep `bytes` as an upload of the caller's account; its easel URL.
async fn kept(tasks: &Tasks, who: &Who<'_>, bytes: Bytes) -> Result<String, OpenAiError> {
    let upload = upload::store_upload(tasks, who.account_id, "image", bytes).await?;
    Ok(tasks.blobs.url(&upload.key))
}

/// The image scaled for a follow-up, checked, kept and upscaled 2x: the upscale task's id and
/// its image's size. `mask` is checked against the image's size first, so that a bad mask
/// stores nothing.
async fn parent(
    tasks: &Tasks,
    who: &Who<'_>,
    image: Bytes,
    mask: Option<&Bytes>,
    until: Instant,
) -> Result<(uuid::Uuid, (u32, u32), (u32, u32)), OpenAiError> {
    let max = tasks.config.limits.input_max_pixels;
    let mask = mask.cloned();
    let fitted = tokio::task::spawn_blocking(move || {
        let (png, original, size) =
            convert::fit(&image, FOLLOW_UP_SIDE, max).map_err(|e| ("image", e))?;
        if let Some(mask) = mask {
            convert::openai_mask(&mask, original, original, max).map_err(|e| ("mask", e))?;
        }
        Ok::<_, (&str, String)>((png, original, size))
    })
    .await
    .map_err(|e| ApiError::Internal(e.into()))?;
    let (png, original, _) = fitted.map_err(|(name, e)| field(name, "invalid_image", e))?;
    let url = kept(tasks, who, png.into()).await?;
    let mut body = Map::new();
    body.insert("type".into(), json!("2x"));
    body.insert("image_url".into(), json!(url));
    let ids = run::submit_all(tasks, who, OpKind::UpscaleHighres, vec![body]).await?;
    let task = run::ended(tasks, who.key, &ids[0], until).await?;
    let (_, w, h) = run::images_of(&task, &ids)?;
    Ok((ids[0], original, (w, h)))
}

/// Edit images from a prompt (OpenAI's Images API)
///
/// Without a mask, imagine tasks with the images as image prompts; with a mask (transparent =
/// redraw), the first image upscaled 2x, then inpaint tasks of it. See docs/openai.md.
#[utoipa::path(
    post,
    path = "/v1/images/edits",
    operation_id = "openaiImagesEdit",
    tag = "OpenAI Images API",
    request_body(content = EditRequest, content_type = "multipart/form-data"),
    responses(
        (status = 200, description = "The images; with `stream`, `text/event-stream`",
            body = ImagesResponse),
        FormRefusals,
    )
)]
pub async fn edits(
    State(state): State<AppState>,
    caller: OpenAiCaller,
    req: Request,
) -> Result<Response, OpenAiError> {
    let form = read_form(req, &state).await?;
    let prompt = form.fields.required("prompt")?.to_string();
    let common = Common::read(&form.fields, &state)?;
    let until = run::deadline(&state);
    let who = Who {
        key: &caller.key,
        account_id: &caller.account.id,
    };
    let Some(mask) = &form.mask else {
        let mut urls = Vec::with_capacity(form.images.len());
        for image in form.images {
            urls.push(kept(&state, &who, image).await?);
        }
        let mut body = Map::new();
        body.insert(
            "prompt".into(),
            json!(format!("{} {prompt}", urls.join(" "))),
        );
        common.aspect_into(&mut body);
        let bodies = common.task_bodies(body);
        return stream::submit_and_answer(
            &state.tasks,
            caller,
            common,
            OpKind::Imagine,
            bodies,
            until,
            "image_edit",
        )
        .await;
    };
    // The inpaint's prompt is checked by the moderation lists before the upscale is stored, so
    // that a refused prompt leaves no task behind.
    state.moderation.check("prompt", &prompt, |_| true)?;
    let image = form.images[0].clone();
    let (parent_id, original, size) = parent(&state, &who, image, Some(mask), until).await?;
    let max = state.config.limits.input_max_pixels;
    let mask = mask.clone();
    let easels =
        tokio::task::spawn_blocking(move || convert::openai_mask(&mask, original, size, max))
            .await
            .map_err(|e| ApiError::Internal(e.into()))?
            .map_err(|e| field("mask", "invalid_image", e))?;
    let data_url = format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(easels)
    );
    let mut body = Map::new();
    body.insert("parent_task_id".into(), json!(parent_id.to_string()));
    body.insert("mask".into(), json!(data_url));
    body.insert("prompt".into(), json!(prompt));
    let bodies = common.task_bodies(body);
    stream::submit_and_answer(
        &state.tasks,
        caller,
        common,
        OpKind::Inpaint,
        bodies,
        until,
        "image_edit",
    )
    .await
}

/// Variations of an image (OpenAI's Images API)
///
/// The image upscaled 2x, then ceil(n/4) variations tasks of it. See docs/openai.md.
#[utoipa::path(
    post,
    path = "/v1/images/variations",
    operation_id = "openaiImagesVariations",
    tag = "OpenAI Images API",
    request_body(content = VariationRequest, content_type = "multipart/form-data"),
    responses(
        (status = 200, description = "The images", body = ImagesResponse),
        FormRefusals,
    )
)]
pub async fn variations(
    State(state): State<AppState>,
    caller: OpenAiCaller,
    req: Request,
) -> Result<Response, OpenAiError> {
    let mut form = read_form(req, &state).await?;
    // Variations do not stream in OpenAI's API.
    form.fields.map.remove("stream");
    let common = Common::read(&form.fields, &state)?;
    let until = run::deadline(&state);
    let who = Who {
        key: &caller.key,
        account_id: &caller.account.id,
    };
    let image = form.images[0].clone();
    let (parent_id, _, _) = parent(&state, &who, image, None, until).await?;
    let mut body = Map::new();
    body.insert("parent_task_id".into(), json!(parent_id.to_string()));
    body.insert("index".into(), json!("strong"));
    common.aspect_into(&mut body);
    let bodies = common.task_bodies(body);
    stream::submit_and_answer(
        &state.tasks,
        caller,
        common,
        OpKind::Variations,
        bodies,
        until,
        "image_variation",
    )
    .await
}
