//! Submitting tasks and reading them back.

use std::collections::HashMap;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};
use uuid::Uuid;

use super::json::{task_id, JsonObject, TaskIdPath};
use super::record::{rfc3339, task_record};
use super::{access, ApiError, AppState};
use crate::auth::{Caller, PresentedKey};
use crate::store::Redelivery;

/// Most ids in one `fetch-many`.
pub const FETCH_MANY_MAX: usize = 20;

/// `POST /api/v1/fetch`: one task record.
pub async fn fetch(
    State(state): State<AppState>,
    key: PresentedKey,
    body: Result<JsonObject, ApiError>,
) -> Result<Json<Value>, ApiError> {
    let id = match body.and_then(|body| task_id("task_id", body.req_str("task_id")?)) {
        Ok(id) => id,
        Err(e) => {
            key.confirm(&state).await?;
            return Err(e);
        }
    };
    one_record(&state, &key, id).await
}

/// `GET /api/v1/tasks/{task_id}`: the same record as fetch.
pub async fn get_task(
    State(state): State<AppState>,
    key: PresentedKey,
    id: Result<TaskIdPath, ApiError>,
) -> Result<Json<Value>, ApiError> {
    match id {
        Ok(TaskIdPath(id)) => one_record(&state, &key, id).await,
        Err(e) => {
            key.confirm(&state).await?;
            Err(e)
        }
    }
}

/// One task record, the key checked in the same statement.
async fn one_record(
    state: &AppState,
    key: &PresentedKey,
    id: Uuid,
) -> Result<Json<Value>, ApiError> {
    access::note_task(id);
    let (live, row) = state
        .store
        .task_for_key(&key.0, &id)
        .await?
        .ok_or(ApiError::Unauthorized)?;
    key.used(state, &live);
    let row = row.ok_or(ApiError::TaskNotFound)?;
    Ok(Json(task_record(&row, &state.blobs)))
}

/// `POST /api/v1/fetch-many`: up to 20 records in the order asked; unknown ids are left out.
pub async fn fetch_many(
    State(state): State<AppState>,
    key: PresentedKey,
    body: Result<JsonObject, ApiError>,
) -> Result<Json<Value>, ApiError> {
    let ids = match body.and_then(|body| fetch_many_ids(&body)) {
        Ok(ids) => ids,
        Err(e) => {
            key.confirm(&state).await?;
            return Err(e);
        }
    };
    let (live, rows) = state
        .store
        .tasks_for_key(&key.0, &ids)
        .await?
        .ok_or(ApiError::Unauthorized)?;
    key.used(&state, &live);
    let by_id: HashMap<&str, &_> = rows.iter().map(|r| (r.id.as_str(), r)).collect();
    let tasks: Vec<Value> = ids
        .iter()
        .filter_map(|id| by_id.get(id.to_string().as_str()).copied())
        .map(|row| task_record(row, &state.blobs))
        .collect();
    Ok(Json(json!({ "tasks": tasks })))
}

/// The `task_ids` of a fetch-many body.
fn fetch_many_ids(body: &JsonObject) -> Result<Vec<Uuid>, ApiError> {
    let items = body.req_array("task_ids")?;
    if items.is_empty() || items.len() > FETCH_MANY_MAX {
        return Err(ApiError::field(
            "task_ids",
            "invalid_value",
            format!("must hold 1 to {FETCH_MANY_MAX} ids (got {})", items.len()),
        ));
    }
    let mut ids = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let field = format!("task_ids[{i}]");
        let raw = item
            .as_str()
            .ok_or_else(|| ApiError::field(&field, "invalid_type", "must be a string"))?;
        ids.push(task_id(&field, raw)?);
    }
    Ok(ids)
}

/// `POST /api/v1/tasks/{task_id}/redeliver`: send the task's result to its webhook again, on a
/// fresh schedule. 202 with the record; 409 when the task has no webhook or has not ended.
pub async fn redeliver(
    State(state): State<AppState>,
    Caller(account): Caller,
    TaskIdPath(id): TaskIdPath,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    match state.store.redeliver(&account.id, &id).await? {
        Redelivery::Queued => {}
        Redelivery::TaskNotFound => return Err(ApiError::TaskNotFound),
        Redelivery::NoWebhook => {
            return Err(ApiError::Conflict {
                code: "no_webhook",
                msg: "task_id: the task was submitted without a webhook_url".into(),
            })
        }
        Redelivery::NotFinal => {
            return Err(ApiError::Conflict {
                code: "task_not_final",
                msg: "task_id: the task has not finished or failed yet".into(),
            })
        }
    }
    let row = state
        .store
        .task_for_account(&account.id, &id)
        .await?
        .ok_or(ApiError::TaskNotFound)?;
    Ok((StatusCode::ACCEPTED, Json(task_record(&row, &state.blobs))))
}

/// `GET /api/v1/tasks/{task_id}/webhook-attempts`: every recorded delivery attempt, oldest first.
pub async fn webhook_attempts(
    State(state): State<AppState>,
    Caller(account): Caller,
    TaskIdPath(id): TaskIdPath,
) -> Result<Json<Value>, ApiError> {
    let attempts = state
        .store
        .delivery_attempts(&account.id, &id)
        .await?
        .ok_or(ApiError::TaskNotFound)?;
    let attempts: Vec<Value> = attempts
        .iter()
        .map(|a| {
            let mut v = json!({
                "attempted_at": rfc3339(a.attempted_at),
                "duration_ms": a.duration_ms,
            });
            if let Some(code) = a.status_code {
                v["status_code"] = json!(code);
            }
            if let Some(error) = &a.error {
                v["error"] = json!(error);
            }
            if let Some(next) = a.next_attempt_at {
                v["next_attempt_at"] = json!(rfc3339(next));
            }
            v
        })
        .collect();
    Ok(Json(json!({ "task_id": id, "attempts": attempts })))
}
