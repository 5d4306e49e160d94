//! The one place where a refusal becomes a response: 401 with `{}`, everything else
//! `{"errors":[{"msg":..., "code":...}]}`, with the headers some refusals carry.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::refusal::ApiError;

/// What a caller is told when the task store cannot be reached, and when to try again.
const STORE_UNAVAILABLE: &str = "the task store is unavailable; try again shortly";
const STORE_RETRY_AFTER: &str = "5";

/// The body of every refusal but 401's.
#[derive(Serialize, ToSchema)]
pub struct Errors {
    #[schema(min_items = 1)]
    pub errors: Vec<Refused>,
}

/// One refusal: what was wrong, in words, and its stable code.
#[derive(Serialize, ToSchema)]
pub struct Refused {
    pub msg: String,
    pub code: &'static str,
}

impl Errors {
    fn one(msg: impl Into<String>, code: &'static str) -> Errors {
        Errors {
            errors: vec![Refused {
                msg: msg.into(),
                code,
            }],
        }
    }
}

/// A fault the caller cannot act on: logged with the request it came in, and answered only as
/// an internal error.
fn unexpected(error: String, code: &'static str) -> Errors {
    let (request_id, account, task_id) = crate::telemetry::request::context();
    tracing::error!(error, request_id, account, task_id, "unexpected fault");
    Errors::one("internal error", code)
}

/// The status and the stable code of `error`.
pub fn status_and_code(error: &ApiError) -> (StatusCode, &'static str) {
    match error {
        ApiError::Unauthorized => (StatusCode::UNAUTHORIZED, "unauthorized"),
        ApiError::BadRequest { code, .. } => (StatusCode::BAD_REQUEST, code),
        ApiError::TaskNotFound => (StatusCode::NOT_FOUND, "task_not_found"),
        ApiError::AccountNotFound => (StatusCode::NOT_FOUND, "account_not_found"),
        ApiError::RouteNotFound => (StatusCode::NOT_FOUND, "route_not_found"),
        ApiError::FileNotFound => (StatusCode::NOT_FOUND, "file_not_found"),
        ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
        ApiError::UploadNotFound { .. } => (StatusCode::NOT_FOUND, "upload_not_found"),
        ApiError::UnsupportedUploadType => {
            (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
        }
        ApiError::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
        ApiError::Conflict { code, .. } => (StatusCode::CONFLICT, code),
        ApiError::PayloadTooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
        ApiError::RequestTimeout => (StatusCode::REQUEST_TIMEOUT, "request_timeout"),
        ApiError::UnsupportedMediaType => {
            (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
        }
        ApiError::InsufficientCredits { .. } => {
            (StatusCode::PAYMENT_REQUIRED, "insufficient_credits")
        }
        ApiError::AccountExpired => (StatusCode::PAYMENT_REQUIRED, "account_expired"),
        ApiError::QuotaExceeded { .. } => (StatusCode::TOO_MANY_REQUESTS, "quota_exceeded"),
        ApiError::Unavailable { .. } => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        ApiError::RateLimited(_) => (StatusCode::TOO_MANY_REQUESTS, "rate_limited"),
        ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal_error"),
        ApiError::Store {
            unavailable: true, ..
        } => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        ApiError::Store { .. } => (StatusCode::INTERNAL_SERVER_ERROR, "internal_error"),
        ApiError::IdempotencyKeyReused => {
            (StatusCode::UNPROCESSABLE_ENTITY, "idempotency_key_reused")
        }
        ApiError::IdempotencyKeyInUse => (StatusCode::CONFLICT, "idempotency_key_in_use"),
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = status_and_code(&self);
        let body = match &self {
            // The contract's 401 says nothing, not even that the key was wrong.
            ApiError::Unauthorized => {
                return (status, axum::Json(serde_json::json!({}))).into_response()
            }
            ApiError::Internal(e) => unexpected(format!("{e:#}"), code),
            ApiError::Store { unavailable, cause } => {
                let kind = if *unavailable { "unavailable" } else { "other" };
                crate::metrics::store_error("api", kind);
                if *unavailable {
                    let (request_id, account, task_id) = crate::telemetry::request::context();
                    tracing::warn!(error = %cause, request_id, account, task_id, "store unavailable");
                    Errors::one(STORE_UNAVAILABLE, code)
                } else {
                    unexpected(format!("{cause:#}"), code)
                }
            }
            other => Errors::one(other.to_string(), code),
        };
        let mut response = (status, axum::Json(body)).into_response();
        if let ApiError::RateLimited(refusal) = &self {
            for (name, value) in refusal.headers() {
                response.headers_mut().insert(
                    name,
                    HeaderValue::from_str(&value).expect("digits and ASCII names"),
                );
            }
        }
        if let ApiError::QuotaExceeded {
            retry_after_secs, ..
        }
        | ApiError::Unavailable {
            retry_after_secs, ..
        } = &self
        {
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from_str(&retry_after_secs.to_string()).expect("digits"),
            );
        }
        if let ApiError::Store {
            unavailable: true, ..
        } = &self
        {
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from_static(STORE_RETRY_AFTER),
            );
        }
        if let ApiError::IdempotencyKeyInUse = &self {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}
