//! Extractors: the caller's key, the JSON body, the `{task_id}` path segment. Each refuses in
//! the contract's shape, and none reads more of the request than its check needs. Beside them,
//! the items of a list header, which several handlers read.

use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderName};
use serde_json::Value;
use uuid::Uuid;

use super::body;
use super::state::AppState;
use super::strict_json::{self, Unread};
use crate::auth::{self, Caller, PresentedKey};
use crate::refusal::ApiError;
use crate::tasks::body::JsonObject;
use crate::telemetry::request;

/// The items of a list header (RFC 9110's `#` rule: `Accept`, `Accept-Encoding`,
/// `If-None-Match`...) over all its lines, untrimmed; a line that is not text is passed over.
pub fn list_items(headers: &HeaderMap, name: HeaderName) -> impl Iterator<Item = &str> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
}

impl FromRequest<AppState> for JsonObject {
    type Rejection = ApiError;

    async fn from_request(req: Request, _state: &AppState) -> Result<Self, ApiError> {
        let is_json = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"));
        if !is_json {
            return Err(ApiError::UnsupportedMediaType);
        }
        let bytes = body::read(req).await?;
        match strict_json::parse(&bytes) {
            Ok(Value::Object(map)) => Ok(JsonObject(map)),
            Ok(_) => Err(ApiError::field(
                "body",
                "invalid_json",
                "must be a JSON object",
            )),
            Err(Unread::Duplicate(path)) => Err(ApiError::field(
                &path,
                "invalid_json",
                "appears more than once in the object; send each key once",
            )),
            Err(Unread::Invalid(e)) => Err(ApiError::field(
                "body",
                "invalid_json",
                format!("is not valid JSON ({e})"),
            )),
        }
    }
}

/// The `{task_id}` path segment as a UUID. Any segment that is not one (invalid percent-encoding
/// included) is a 400 in the contract's shape.
#[derive(utoipa::IntoParams)]
#[into_params(names("task_id"), parameter_in = Path)]
pub struct TaskIdPath(pub Uuid);

impl FromRequestParts<AppState> for TaskIdPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let not_uuid = || ApiError::field("task_id", "invalid_value", "must be a UUID");
        let Path(raw) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|_| not_uuid())?;
        let id = Uuid::try_parse(&raw).map_err(|_| not_uuid())?;
        request::note_task(id);
        Ok(TaskIdPath(id))
    }
}

/// The key in `Authorization`, if it has the shape of one; 401 otherwise.
fn presented_key(parts: &Parts) -> Result<[u8; 32], ApiError> {
    parts
        .headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .filter(|k| auth::well_formed(k))
        .map(auth::hash_key)
        .ok_or(ApiError::Unauthorized)
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let hash = presented_key(parts)?;
        Ok(Caller(owner_of(state, &hash).await?.account))
    }
}

/// The live key hashed `hash`'s owner, its use noted and its rate limits counted: what every
/// extractor of a caller's account does once it has the key (this API's, OpenAI's).
pub async fn owner_of(
    state: &AppState,
    hash: &[u8; 32],
) -> Result<crate::store::KeyOwner, ApiError> {
    let owner = auth::look_up(state.store.as_ref(), hash).await?;
    auth::touch(&state.store, &owner.key_id, owner.last_used_at);
    request::note_account(&owner.account.id);
    if state.rate_limits.enabled() {
        state
            .rate_limits
            .remember(hash, &owner.account.id, &owner.account.plan);
        state
            .rate_limits
            .check(hash, &owner.account.id, &owner.account.plan)
            .map_err(ApiError::RateLimited)?;
    }
    Ok(owner)
}

/// A caller whose key belongs to an operator (an admin account). Anyone else gets 404, as for
/// a route that does not exist (the admin page does the same), before any of the body is read.
pub struct Admin(pub crate::store::Account);

impl FromRequestParts<AppState> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let Caller(account) = Caller::from_request_parts(parts, state).await?;
        if !account.admin {
            return Err(ApiError::RouteNotFound);
        }
        Ok(Admin(account))
    }
}

impl FromRequestParts<AppState> for PresentedKey {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let hash = presented_key(parts)?;
        if state.rate_limits.enabled() {
            state
                .rate_limits
                .check_presented(state.store.as_ref(), &hash)
                .await?
                .map_err(ApiError::RateLimited)?;
        }
        Ok(PresentedKey(hash))
    }
}
