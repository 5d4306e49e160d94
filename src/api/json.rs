//! Request bodies: checked for media type and size, parsed as a JSON object, then read field by
//! field so that every error names the field it is about.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use serde_json::{Map, Value};
use uuid::Uuid;

use super::{ApiError, AppState};

/// A JSON object body.
pub struct JsonObject(pub Map<String, Value>);

impl FromRequest<AppState> for JsonObject {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let is_json = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"));
        if !is_json {
            return Err(ApiError::UnsupportedMediaType);
        }
        // A mask is a whole PNG: its operation's bodies have a limit of their own.
        let limit = if req.uri().path() == super::submit::MASK_ROUTE {
            state.config.limits.mask_body_limit
        } else {
            state.config.limits.body_limit
        };
        // A declared length over the limit is refused before any of the body is read.
        let declared = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > limit as u64) {
            return Err(ApiError::PayloadTooLarge { limit });
        }
        let read = tokio::time::timeout(
            state.config.server.body_timeout,
            Bytes::from_request(req, state),
        );
        let bytes = read
            .await
            .map_err(|_| ApiError::RequestTimeout)?
            .map_err(|rejection| {
                if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::PayloadTooLarge { limit }
                } else {
                    ApiError::BadRequest {
                        code: "invalid_body",
                        msg: format!("body: {}", rejection.body_text()),
                    }
                }
            })?;
        match serde_json::from_slice::<Value>(&bytes) {
            Ok(Value::Object(map)) => Ok(JsonObject(map)),
            Ok(_) => Err(ApiError::field(
                "body",
                "invalid_json",
                "must be a JSON object",
            )),
            Err(e) => Err(ApiError::field(
                "body",
                "invalid_json",
                format!("is not valid JSON ({e})"),
            )),
        }
    }
}

impl JsonObject {
    /// A string field; None when absent or null.
    pub fn opt_str(&self, field: &str) -> Result<Option<&str>, ApiError> {
        match self.0.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(ApiError::field(field, "invalid_type", "must be a string")),
        }
    }

    pub fn req_str(&self, field: &str) -> Result<&str, ApiError> {
        self.opt_str(field)?
            .ok_or_else(|| ApiError::field(field, "missing_field", "is required"))
    }

    pub fn req_array(&self, field: &str) -> Result<&Vec<Value>, ApiError> {
        match self.0.get(field) {
            None | Some(Value::Null) => Err(ApiError::field(field, "missing_field", "is required")),
            Some(Value::Array(items)) => Ok(items),
            Some(_) => Err(ApiError::field(field, "invalid_type", "must be an array")),
        }
    }
}

/// Parse a task id, naming `field` in the error.
pub fn task_id(field: &str, raw: &str) -> Result<Uuid, ApiError> {
    Uuid::try_parse(raw).map_err(|_| ApiError::field(field, "invalid_value", "must be a UUID"))
}

/// The `{task_id}` path segment as a UUID. Any segment that is not one (invalid percent-encoding
/// included) is a 400 in the contract's shape.
pub struct TaskIdPath(pub Uuid);

impl FromRequestParts<AppState> for TaskIdPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let not_uuid = || ApiError::field("task_id", "invalid_value", "must be a UUID");
        let Path(raw) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|_| not_uuid())?;
        let id = Uuid::try_parse(&raw).map_err(|_| not_uuid())?;
        super::access::note_task(id);
        Ok(TaskIdPath(id))
    }
}
