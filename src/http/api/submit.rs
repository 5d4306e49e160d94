//! `POST /api/v1/{operation}` for every operation: the submit use case (`crate::tasks::submit`)
//! behind the `Idempotency-Key` and `Prefer: wait` headers.

use axum::extract::{FromRequest, MatchedPath, Request, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use uuid::Uuid;

use crate::auth::PresentedKey;
use crate::domain::OpKind;
use crate::http::idempotency::{self, KeyHeader};
use crate::http::prefer;
use crate::http::state::AppState;
use crate::refusal::ApiError;
use crate::store::Idempotency;
use crate::tasks::body::JsonObject;
use crate::tasks::submit::alias::Alias;
use crate::tasks::submit::{submit_keyed, Answer};
use crate::tasks::{idempotency::fingerprint, wait};

/// The answer to a submit.
#[derive(serde::Serialize)]
pub struct Accepted {
    task_id: Uuid,
}

/// `POST /api/v1/{operation}`: validate, resolve the parent, store durably, answer with the id;
/// or, for a request whose `Idempotency-Key` has an answer stored, that answer again; with
/// `Prefer: wait`, answer the task's record once it has ended or the wait is over.
pub async fn submit(
    State(state): State<AppState>,
    path: MatchedPath,
    headers: HeaderMap,
    key: PresentedKey,
    idempotency: KeyHeader,
    req: Request,
) -> Result<Response, ApiError> {
    // Nothing of the body is read for a key that is not live.
    key.admit(&state.store, &state.live_keys).await?;
    let name = path.as_str().strip_prefix("/api/v1/");
    let alias = name.and_then(Alias::from_path);
    let kind = alias
        .map(Alias::kind)
        .or_else(|| name.and_then(|name| name.parse::<OpKind>().ok()))
        .expect("submit routes are made from the operations' names and the aliases");
    let wait = prefer::preferred_wait(&headers)?.map(|asked| wait::served(&state, asked));
    // Held until the store has answered, and let go on every way out of this function.
    let held = match idempotency {
        KeyHeader::Absent => None,
        KeyHeader::Held(held) => Some(held),
        KeyHeader::Invalid(e) => return Err(e),
        KeyHeader::InUse => return Err(ApiError::IdempotencyKeyInUse),
    };
    let body = match (alias, JsonObject::from_request(req, &state).await) {
        (Some(alias), Ok(given)) => alias.translate(&state, &key, given).await,
        (_, body) => body,
    };
    let keyed = match (&held, &body) {
        (Some(held), Ok(body)) => Some(Idempotency {
            key: held.key().to_string(),
            fingerprint: fingerprint(kind, &body.0),
            ttl_ms: state.config.limits.idempotency_ttl.as_millis() as i64,
        }),
        _ => None,
    };
    let answer = submit_keyed(&state, kind, &key, body, keyed).await;
    // The store has answered: a duplicate may come now, and will be replayed. A wait below
    // does not hold the key.
    drop(held);
    let (task_id, replayed) = match answer? {
        Answer::Accepted(task_id) => (task_id, None),
        Answer::Replayed {
            task_id,
            status,
            body,
        } => match (task_id, wait) {
            (Some(task_id), Some(_)) => (task_id, Some(())),
            _ => return Ok(idempotency::replay(status, body)),
        },
    };
    let accepted = || Json(Accepted { task_id }).into_response();
    let Some(secs) = wait else {
        return Ok(accepted());
    };
    // The task is stored: whatever happens to the reads, the caller learns its id.
    let task = match state.store.task_for_key(&key.0, &task_id).await {
        Ok(Some((_, Some(task)))) => task,
        _ => return Ok(accepted()),
    };
    let task = wait::until_ended(&state, &key, &task_id, task, secs).await;
    let mut response = ([prefer::applied(secs)], Json(state.record(&task).await)).into_response();
    if replayed.is_some() {
        // A replay that waits answers the record as a first request would, marked as a replay.
        response.headers_mut().insert(
            idempotency::REPLAYED,
            axum::http::HeaderValue::from_static("true"),
        );
    }
    Ok(response)
}
