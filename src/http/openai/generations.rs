//! `POST /v1/images/generations`: ceil(n/4) imagine tasks of the prompt, answered with their
//! first `n` images.

use axum::extract::{FromRequest, Request, State};
use axum::response::Response;
use serde_json::{json, Map};

use super::auth::OpenAiCaller;
use super::doc::{BodyRefusals, GenerationRequest, ImagesResponse};
use super::error::OpenAiError;
use super::fields::{Common, Fields};
use super::run;
use super::stream;
use crate::domain::OpKind;
use crate::http::state::AppState;
use crate::tasks::body::JsonObject;

/// Create images from a prompt (OpenAI's Images API)
///
/// Submits ceil(n/4) imagine tasks of the account (charged, queued fairly, listed and in the
/// dashboard like any other), waits for them (at most `openai_wait`), and answers their first
/// `n` images; with `stream`, Server-Sent Events. See docs/openai.md.
#[utoipa::path(
    post,
    path = "/v1/images/generations",
    operation_id = "openaiImagesGenerate",
    tag = "OpenAI Images API",
    request_body(content = GenerationRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The images; with `stream`, `text/event-stream`",
            body = ImagesResponse),
        BodyRefusals,
    )
)]
pub async fn generations(
    State(state): State<AppState>,
    caller: OpenAiCaller,
    req: Request,
) -> Result<Response, OpenAiError> {
    let JsonObject(map) = JsonObject::from_request(req, &state).await?;
    let fields = Fields { map, form: false };
    let prompt = fields.required("prompt")?.to_string();
    let common = Common::read(&fields, &state)?;
    let mut body = Map::new();
    body.insert("prompt".into(), json!(prompt));
    common.aspect_into(&mut body);
    let bodies = common.task_bodies(body);
    let until = run::deadline(&state);
    let kind = OpKind::Imagine;
    stream::submit_and_answer(
        &state.tasks,
        caller,
        common,
        kind,
        bodies,
        until,
        "image_generation",
    )
    .await
}
