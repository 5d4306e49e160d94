//! `POST /api/v1/batch`: several submits in one request, stored together or not at all
//! (`crate::tasks::submit::batch`), behind the `Idempotency-Key` header as one submit is.

use axum::extract::{FromRequest, Request, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::doc::SubmitRefused;
use crate::auth::PresentedKey;
use crate::http::idempotency::{self, IdempotencyKey, KeyHeader};
use crate::http::state::AppState;
use crate::refusal::ApiError;
use crate::tasks::body::JsonObject;
use crate::tasks::idempotency::BATCH;
use crate::tasks::submit::batch::{members, submit_batch};
use crate::tasks::submit::Answer;

/// A batch: the requests, each an operation and the body its own route takes.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct BatchRequest {
    /// At most the plan's `batch_max` (default 20), at least one.
    #[schema(min_items = 1)]
    requests: Vec<BatchMember>,
}

/// One request of a batch.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct BatchMember {
    /// The operation's name, as in its route (`imagine`, `upscale-1x`, ...).
    #[schema(example = "imagine")]
    operation: String,
    /// The body the operation's own route takes (`POST /api/v1/{operation}`).
    #[schema(value_type = Object)]
    body: serde_json::Value,
}

/// The answer to a batch: its tasks' ids, in the requests' order.
#[derive(serde::Serialize, ToSchema)]
pub struct BatchAccepted {
    task_ids: Vec<Uuid>,
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(batch))
}

/// Submit several tasks at once
///
/// Every request is checked as its own route checks it, then all the tasks are stored in one
/// transaction, or none is: at most the plan's `batch_max` (default 20) requests, the account's
/// credits covering them all. A refusal names the request by its index (`requests[3].prompt:
/// ...`). One `Idempotency-Key` covers the whole batch. Each task is an ordinary task (its own
/// record, webhook and events), fairly queued. A prompt's `--repeat` and `{...}` permutations are
/// refused inside a batch: each request is one task.
#[utoipa::path(
    post,
    path = "/api/v1/batch",
    operation_id = "batch",
    params(IdempotencyKey),
    request_body = BatchRequest,
    responses(
        (status = 200, description = "Stored durably: the tasks' ids, in order",
            body = BatchAccepted),
        SubmitRefused,
    )
)]
pub async fn batch(
    State(state): State<AppState>,
    key: PresentedKey,
    idempotency: KeyHeader,
    req: Request,
) -> Result<Response, ApiError> {
    // Nothing of the body is read for a key that is not live.
    key.admit(&state.store, &state.live_keys).await?;
    // Held until the store has answered, and let go on every way out of this function.
    let held = idempotency.held(&state, &key)?;
    let body = JsonObject::from_request(req, &state).await;
    let keyed = idempotency::keyed(&state, held.as_ref(), BATCH, &body);
    let requests = body.and_then(|body| members(&body));
    let answer = submit_batch(&state, &key, requests, keyed).await;
    drop(held);
    match answer? {
        Answer::Batch(task_ids) => Ok(Json(BatchAccepted { task_ids }).into_response()),
        Answer::Replayed { status, body, .. } => Ok(idempotency::replay(status, body)),
        Answer::Accepted(task_id) => Ok(Json(BatchAccepted {
            task_ids: vec![task_id],
        })
        .into_response()),
    }
}
