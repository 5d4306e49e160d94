use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::store::StoreError;

/// Every way an API request can fail, and the one place that turns it into a response:
/// 401 with `{}`, everything else `{"errors":[{"msg":..., "code":...}]}`.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("unauthorized")]
    Unauthorized,
    /// 400. `code` is stable; `msg` names the field first (`prompt: must not be empty`).
    #[error("{msg}")]
    BadRequest { code: &'static str, msg: String },
    #[error("task not found")]
    TaskNotFound,
    #[error("no such route")]
    RouteNotFound,
    #[error("file not found")]
    FileNotFound,
    #[error("method not allowed")]
    MethodNotAllowed,
    #[error("{msg}")]
    Conflict { code: &'static str, msg: String },
    #[error("request body is larger than {limit} bytes")]
    PayloadTooLarge { limit: usize },
    #[error("the request body did not arrive in time")]
    RequestTimeout,
    #[error("Content-Type must be application/json")]
    UnsupportedMediaType,
    /// 402: the account's credits do not cover the task.
    #[error("{msg}")]
    InsufficientCredits { msg: String },
    #[error("{msg}")]
    TooManyRequests { msg: String, retry_after_secs: u64 },
    #[error("{msg}")]
    Unavailable { msg: String, retry_after_secs: u64 },
    /// 429 `rate_limited`: the key's or the account's request rate limit is spent.
    #[error("too many requests for this {}; try again in {} s", .0.scope.as_str(), .0.retry_after_secs)]
    RateLimited(crate::ratelimit::Refusal),
    #[error("internal error: {0}")]
    Internal(anyhow::Error),
    /// 422 `idempotency_key_reused`: the key's first answer was to another request.
    #[error(
        "Idempotency-Key: this key was used for a different request (another operation or \
         body) within its time to live; send this request with a new key"
    )]
    IdempotencyKeyReused,
    /// 409 `idempotency_key_in_use`, with `Retry-After: 1`: a request with the same account and
    /// key is being handled.
    #[error("Idempotency-Key: a request with this key is in progress; retry it shortly")]
    IdempotencyKeyInUse,
}

impl ApiError {
    pub fn field(field: &str, code: &'static str, problem: impl std::fmt::Display) -> ApiError {
        ApiError::BadRequest {
            code,
            msg: format!("{field}: {problem}"),
        }
    }

    fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::Unauthorized => (StatusCode::UNAUTHORIZED, "unauthorized"),
            ApiError::BadRequest { code, .. } => (StatusCode::BAD_REQUEST, code),
            ApiError::TaskNotFound => (StatusCode::NOT_FOUND, "task_not_found"),
            ApiError::RouteNotFound => (StatusCode::NOT_FOUND, "route_not_found"),
            ApiError::FileNotFound => (StatusCode::NOT_FOUND, "file_not_found"),
            ApiError::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            ApiError::Conflict { code, .. } => (StatusCode::CONFLICT, code),
            ApiError::PayloadTooLarge { .. } => {
                (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
            }
            ApiError::RequestTimeout => (StatusCode::REQUEST_TIMEOUT, "request_timeout"),
            ApiError::UnsupportedMediaType => {
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
            }
            ApiError::InsufficientCredits { .. } => {
                (StatusCode::PAYMENT_REQUIRED, "insufficient_credits")
            }
            ApiError::TooManyRequests { .. } => (StatusCode::TOO_MANY_REQUESTS, "quota_exceeded"),
            ApiError::Unavailable { .. } => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            ApiError::RateLimited(_) => (StatusCode::TOO_MANY_REQUESTS, "rate_limited"),
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal_error"),
            ApiError::IdempotencyKeyReused => {
                (StatusCode::UNPROCESSABLE_ENTITY, "idempotency_key_reused")
            }
            ApiError::IdempotencyKeyInUse => (StatusCode::CONFLICT, "idempotency_key_in_use"),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable(e) => {
                crate::metrics::store_error("api", &StoreError::Unavailable(e.clone()));
                let (request_id, account, task_id) = super::access::context();
                tracing::warn!(error = %e, request_id, account, task_id, "store unavailable");
                ApiError::Unavailable {
                    msg: "the task store is unavailable; try again shortly".into(),
                    retry_after_secs: 5,
                }
            }
            other @ StoreError::Other(_) => {
                crate::metrics::store_error("api", &other);
                ApiError::Internal(other.into())
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        let body = match &self {
            ApiError::Unauthorized => json!({}),
            ApiError::Internal(e) => {
                let (request_id, account, task_id) = super::access::context();
                tracing::error!(
                    error = format!("{e:#}"),
                    request_id,
                    account,
                    task_id,
                    "unexpected fault"
                );
                json!({"errors": [{"msg": "internal error", "code": code}]})
            }
            other => json!({"errors": [{"msg": other.to_string(), "code": code}]}),
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
        if let ApiError::TooManyRequests {
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
        if let ApiError::IdempotencyKeyInUse = &self {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}
