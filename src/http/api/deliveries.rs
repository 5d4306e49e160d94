//! A task's webhook deliveries: sent again on a fresh schedule, and every attempt made.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};

use crate::auth::Caller;
use crate::domain::rfc3339;
use crate::domain::wire::Record;
use crate::http::extract::TaskIdPath;
use crate::http::state::AppState;
use crate::refusal::ApiError;
use crate::store::Redelivery;

/// `POST /api/v1/tasks/{task_id}/redeliver`: send the task's result to its webhook again, on a
/// fresh schedule. 202 with the record; 409 when the task has no webhook or has not ended.
pub async fn redeliver(
    State(state): State<AppState>,
    Caller(account): Caller,
    TaskIdPath(id): TaskIdPath,
) -> Result<(StatusCode, Json<Record>), ApiError> {
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
        Redelivery::NotRequested => {
            return Err(ApiError::Conflict {
                code: "no_webhook",
                msg: "task_id: the task's webhook_events leave out how it ended, so it has no \
                      delivery to send again"
                    .into(),
            })
        }
    }
    let row = state
        .store
        .task_for_account(&account.id, &id)
        .await?
        .ok_or(ApiError::TaskNotFound)?;
    Ok((StatusCode::ACCEPTED, Json(state.record(&row).await)))
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
