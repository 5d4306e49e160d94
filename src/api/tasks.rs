//! Submitting tasks and reading them back.

use std::collections::HashMap;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};
use uuid::Uuid;

use super::json::{task_id, JsonObject, TaskIdPath};
use super::record::{rfc3339, TaskRecord};
use super::{access, ApiError, AppState};
use crate::auth::{Caller, PresentedKey};
use crate::domain::{AspectRatio, ProcessMode, Prompt, TaskType};
use crate::store::{NewTask, Redelivery, Submitted};
use crate::webhooks::ssrf::validate_webhook_url;

/// Most characters of a `webhook_secret`.
pub const WEBHOOK_SECRET_MAX_CHARS: usize = 256;
/// Most ids in one `fetch-many`.
pub const FETCH_MANY_MAX: usize = 20;

/// The answer to a submit.
#[derive(serde::Serialize)]
pub struct Accepted {
    task_id: Uuid,
}

/// `POST /api/v1/imagine`: validate, store durably, wake a worker, answer with the id.
pub async fn imagine(
    State(state): State<AppState>,
    key: PresentedKey,
    body: Result<JsonObject, ApiError>,
) -> Result<Json<Accepted>, ApiError> {
    let task = match body.and_then(|body| validate_imagine(&state, &body)) {
        Ok(task) => task,
        Err(e) => {
            // Only a live key learns what was wrong with its request.
            key.confirm(&state).await?;
            return Err(e);
        }
    };
    let limit = state.config.max_pending_per_account;
    let id = match state.store.submit(&task, &key.0, limit).await? {
        Submitted::Queued {
            account_id,
            task_id,
        } => {
            access::note_task(task_id);
            access::note_account(&account_id);
            task_id
        }
        Submitted::KeyNotLive => return Err(ApiError::Unauthorized),
        Submitted::QuotaFull => {
            return Err(ApiError::TooManyRequests {
                msg: format!(
                "the account already has {limit} tasks queued or running; wait for some to finish"
            ),
                retry_after_secs: 10,
            })
        }
    };
    // The request's own line ("request done", with the task id) says it was accepted; a second
    // line per submit at `info` cost about as much as the first.
    tracing::debug!(mode = task.process_mode, "task accepted");
    Ok(Json(Accepted { task_id: id }))
}

/// An `imagine` body as the task to store, or the first thing wrong with it.
fn validate_imagine(state: &AppState, body: &JsonObject) -> Result<NewTask, ApiError> {
    let prompt = Prompt::parse(body.req_str("prompt")?)
        .map_err(|e| ApiError::field("prompt", "invalid_value", e))?;
    let aspect_ratio = match body.opt_str("aspect_ratio")? {
        None => AspectRatio::SQUARE,
        Some(raw) => raw
            .parse::<AspectRatio>()
            .map_err(|e| ApiError::field("aspect_ratio", "invalid_value", e))?,
    };
    let process_mode = match body.opt_str("process_mode")? {
        None => ProcessMode::Fast,
        Some(raw) => raw
            .parse::<ProcessMode>()
            .map_err(|e| ApiError::field("process_mode", "invalid_value", e))?,
    };
    // Empty strings count as absent: some clients send every optional field.
    let webhook_url = match body.opt_str("webhook_url")?.filter(|s| !s.is_empty()) {
        None => None,
        Some(raw) => Some(
            validate_webhook_url(raw, &state.destinations)
                .map_err(|e| ApiError::field("webhook_url", "invalid_value", e))?
                .to_string(),
        ),
    };
    let webhook_secret = match body.opt_str("webhook_secret")?.filter(|s| !s.is_empty()) {
        None => None,
        Some(secret) => {
            if secret.chars().count() > WEBHOOK_SECRET_MAX_CHARS {
                return Err(ApiError::field(
                    "webhook_secret",
                    "invalid_value",
                    format!("must be at most {WEBHOOK_SECRET_MAX_CHARS} characters"),
                ));
            }
            // It travels back as an HTTP header value.
            if secret.chars().any(|c| c.is_control() || !c.is_ascii()) {
                return Err(ApiError::field(
                    "webhook_secret",
                    "invalid_value",
                    "must be printable ASCII",
                ));
            }
            Some(secret.to_string())
        }
    };
    if state.shutdown.is_cancelled() {
        return Err(ApiError::Unavailable {
            msg: "the server is shutting down; try again shortly".into(),
            retry_after_secs: 5,
        });
    }
    Ok(NewTask {
        task_type: TaskType::Imagine.as_str(),
        prompt: prompt.as_str().to_string(),
        aspect_ratio: aspect_ratio.to_string(),
        process_mode: process_mode.as_str(),
        priority: process_mode.priority(),
        seed: i64::from(rand::random::<u32>()),
        webhook_url,
        webhook_secret,
    })
}

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
    Ok(Json(json!(TaskRecord::new(&row, &state.blobs))))
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
        .map(|row| json!(TaskRecord::new(row, &state.blobs)))
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
    Ok((
        StatusCode::ACCEPTED,
        Json(json!(TaskRecord::new(&row, &state.blobs))),
    ))
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
