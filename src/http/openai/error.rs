//! Refusals in OpenAI's shape, `{"error": {"message", "type", "param", "code"}}`, for the routes
//! under `/v1`. Every refusal still goes through `http::refusal_response` first (its status, its
//! headers such as `Retry-After`, the logging and counting of faults); only the body is OpenAI's.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::http::refusal_response::status_and_code;
use crate::refusal::ApiError;

/// A refusal of the OpenAI routes: easel's own, or one of theirs that easel has no code for.
#[derive(Debug)]
pub enum OpenAiError {
    Api(ApiError),
    /// The tasks did not end within `openai_wait`; they go on.
    TimedOut {
        task_ids: Vec<String>,
    },
    /// A task failed or was canceled: its error.
    TaskFailed {
        message: String,
        policy: bool,
    },
}

impl From<ApiError> for OpenAiError {
    fn from(e: ApiError) -> Self {
        OpenAiError::Api(e)
    }
}

/// A refusal's body, as OpenAI's API writes it.
#[derive(Serialize, ToSchema)]
#[schema(as = OpenAiErrorBody)]
pub struct Body {
    pub error: Detail,
}

/// What went wrong: in words, its kind, the request field it is about, a stable code.
#[derive(Serialize, ToSchema)]
#[schema(as = OpenAiErrorDetail)]
pub struct Detail {
    pub message: String,
    #[serde(rename = "type")]
    #[schema(value_type = String)]
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<String>,
}

/// A field refused: 400 naming `param` (OpenAI's field name).
pub fn field(param: &str, code: &'static str, problem: impl std::fmt::Display) -> OpenAiError {
    OpenAiError::Api(ApiError::field(param, code, problem))
}

/// The OpenAI field an easel field of the request becomes (so that `param` names what the
/// caller sent).
fn openai_param(easel: &str) -> &str {
    match easel {
        "aspect_ratio" => "size",
        "metadata" => "user",
        "image_url" | "parent_task_id" => "image",
        p if p.starts_with("image_prompts") => "image",
        p => p,
    }
}

/// The field a 400's message names first (`prompt: must not be empty`), if it names one.
fn param_of(message: &str) -> Option<String> {
    let (head, _) = message.split_once(": ")?;
    let ok = !head.is_empty()
        && head
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_[].-".contains(&b));
    ok.then(|| openai_param(head).to_string())
}

impl OpenAiError {
    /// The status, body and (for easel's refusals) the headers easel gives them.
    fn parts(self) -> (Response, Detail) {
        let invalid = "invalid_request_error";
        match self {
            OpenAiError::TimedOut { task_ids } => {
                let message = format!(
                    "the images were not ready within openai_wait; the tasks go on and can be \
                     read from easel's API: {}",
                    task_ids.join(", ")
                );
                let response = StatusCode::GATEWAY_TIMEOUT.into_response();
                let detail = Detail {
                    message,
                    kind: "server_error",
                    param: None,
                    code: Some("timeout".into()),
                };
                (response, detail)
            }
            OpenAiError::TaskFailed { message, policy } => {
                let (status, kind, code) = if policy {
                    (StatusCode::BAD_REQUEST, invalid, "content_policy_violation")
                } else {
                    (
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "server_error",
                        "task_failed",
                    )
                };
                let detail = Detail {
                    message,
                    kind,
                    param: policy.then(|| "prompt".to_string()),
                    code: Some(code.into()),
                };
                (status.into_response(), detail)
            }
            OpenAiError::Api(e) => {
                let (status, code) = status_and_code(&e);
                let message = match &e {
                    ApiError::Unauthorized => {
                        "Incorrect API key provided: send an easel API key as \
                         `Authorization: Bearer <key>`"
                            .to_string()
                    }
                    ApiError::Internal(_) | ApiError::Store { .. } => String::new(),
                    other => other.to_string(),
                };
                let param = match &e {
                    ApiError::BadRequest { msg, .. } | ApiError::UploadNotFound { msg } => {
                        param_of(msg)
                    }
                    _ => None,
                };
                let (kind, code) = match &e {
                    ApiError::Unauthorized => ("invalid_request_error", "invalid_api_key"),
                    ApiError::RateLimited(_) => ("requests", "rate_limit_exceeded"),
                    ApiError::InsufficientCredits { .. } | ApiError::AccountExpired => {
                        ("insufficient_quota", code)
                    }
                    _ if status.is_server_error() => ("server_error", code),
                    _ => (invalid, code),
                };
                // Status, headers, and the logging of faults, as every refusal of easel's.
                let response = e.into_response();
                let message = if message.is_empty() {
                    // The contract's words for a fault, with no internals.
                    match status {
                        StatusCode::SERVICE_UNAVAILABLE => {
                            "the task store is unavailable; try again shortly".to_string()
                        }
                        _ => "internal error".to_string(),
                    }
                } else {
                    message
                };
                let detail = Detail {
                    message,
                    kind,
                    param,
                    code: Some(code.to_string()),
                };
                (response, detail)
            }
        }
    }
}

impl IntoResponse for OpenAiError {
    fn into_response(self) -> Response {
        let retry = !matches!(
            self,
            OpenAiError::TimedOut { .. } | OpenAiError::TaskFailed { .. }
        );
        let (response, detail) = self.parts();
        let (mut parts, _) = response.into_parts();
        parts.headers.remove(axum::http::header::CONTENT_LENGTH);
        if !retry {
            // The `openai` SDKs retry 5xx answers by themselves, which would submit the tasks
            // again; this header tells them not to (their `x-should-retry`).
            parts
                .headers
                .insert("x-should-retry", HeaderValue::from_static("false"));
        }
        let body = axum::Json(Body { error: detail }).into_response();
        let (body_parts, body) = body.into_parts();
        parts.headers.extend(body_parts.headers);
        Response::from_parts(parts, body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn param_is_the_field_a_message_names_in_openais_words() {
        assert_eq!(
            param_of("prompt: must not be empty").as_deref(),
            Some("prompt")
        );
        assert_eq!(
            param_of("aspect_ratio: must be ...").as_deref(),
            Some("size")
        );
        assert_eq!(param_of("image_prompts[0]: bad").as_deref(), Some("image"));
        assert_eq!(param_of("the account's credits: x"), None);
        assert_eq!(param_of("no field here"), None);
    }
}
