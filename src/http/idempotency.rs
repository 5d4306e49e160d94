//! The `Idempotency-Key` header of submits, read before the body so that a duplicate arriving
//! while the first is in flight is refused at once, and the replay of a stored answer.

use std::convert::Infallible;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::state::AppState;
use crate::auth::PresentedKey;
use crate::refusal::ApiError;
use crate::store::Idempotency;
use crate::tasks::body::JsonObject;
use crate::tasks::idempotency::{check_key, fingerprint_of, Held};

/// The request header.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
/// The header on a replayed answer.
pub const REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// A submit's `Idempotency-Key` as its handler sees it: an extractor that reads only the
/// headers. The handler claims it with [`KeyHeader::held`] before it reads the body, so that a
/// duplicate arriving while the first is in flight is refused at once.
pub enum KeyHeader {
    Absent,
    /// A 400 to answer once the API key is known to be live.
    Invalid(ApiError),
    Present(String),
}

impl FromRequestParts<AppState> for KeyHeader {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &AppState) -> Result<Self, Infallible> {
        Ok(
            match parts
                .headers
                .get(IDEMPOTENCY_KEY)
                .map(|v| check_key(v.as_bytes()))
            {
                None => KeyHeader::Absent,
                Some(Ok(key)) => KeyHeader::Present(key),
                Some(Err(e)) => KeyHeader::Invalid(e),
            },
        )
    }
}

impl KeyHeader {
    /// The key, held for the API key `api_key` until the store has answered, when the request
    /// gave one; the refusal of a malformed key, or of one that another request with the same
    /// API key is using on this node.
    pub fn held(self, state: &AppState, api_key: &PresentedKey) -> Result<Option<Held>, ApiError> {
        match self {
            KeyHeader::Absent => Ok(None),
            KeyHeader::Invalid(e) => Err(e),
            KeyHeader::Present(key) => match state.idempotency.claim(api_key.0, key) {
                Some(held) => Ok(Some(held)),
                None => Err(ApiError::IdempotencyKeyInUse),
            },
        }
    }
}

/// What the store keeps of a held key with the first answer: the key, the fingerprint of the
/// body to the route `name` ([`fingerprint_of`]) and how long the answer is replayed. None
/// without a key, or when the body could not be read (a refusal is not stored).
pub fn keyed(
    state: &AppState,
    held: Option<&Held>,
    name: &str,
    body: &Result<JsonObject, ApiError>,
) -> Option<Idempotency> {
    match (held, body) {
        (Some(held), Ok(body)) => Some(Idempotency {
            key: held.key().to_string(),
            fingerprint: fingerprint_of(name, &body.0),
            ttl_ms: state.config.limits.idempotency_ttl.as_millis() as i64,
        }),
        _ => None,
    }
}

/// The `Idempotency-Key` header as the OpenAPI document describes it (`check_key` reads it).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
pub struct IdempotencyKey {
    /// Makes the submit safe to retry: the same key and request within `idempotency_ttl` (24
    /// hours by default) answer the first task id again, with `Idempotent-Replayed: true`,
    /// instead of making a second task. 1 to 255 printable ASCII characters; per account. Errors
    /// are not stored, so a retry after one runs again.
    #[param(
        rename = "Idempotency-Key",
        nullable = false,
        min_length = 1,
        max_length = 255,
        pattern = r"^[\x21-\x7E]([\x20-\x7E]*[\x21-\x7E])?$"
    )]
    pub key: Option<String>,
}

/// A stored first answer, sent again as it was with `Idempotent-Replayed: true`.
pub fn replay(status: u16, body: String) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    let mut response = (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response();
    response
        .headers_mut()
        .insert(REPLAYED, HeaderValue::from_static("true"));
    response
}
