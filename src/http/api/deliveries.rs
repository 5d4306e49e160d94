//! A task's webhook deliveries: sent again on a fresh schedule, and every attempt made.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::doc::{Conflict, OneTask};
use crate::auth::Caller;
use crate::domain::rfc3339;
use crate::domain::wire::Record;
use crate::http::extract::TaskIdPath;
use crate::http::state::AppState;
use crate::refusal::ApiError;
use crate::store::Redelivery;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(redeliver))
        .routes(routes!(webhook_attempts))
}

/// A task's delivery attempts, oldest first.
#[derive(Serialize, ToSchema)]
pub struct Attempts {
    task_id: Uuid,
    attempts: Vec<Attempt>,
}

/// One attempt to deliver a task's result.
#[derive(Serialize, ToSchema)]
pub struct Attempt {
    #[schema(format = DateTime)]
    attempted_at: String,
    #[schema(minimum = 0)]
    duration_ms: i64,
    /// The destination's status, when it answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    status_code: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    error: Option<String>,
    /// When the next attempt is due, after a failed one.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, format = DateTime)]
    next_attempt_at: Option<String>,
}

/// Send the task's result to its webhook again, on a fresh schedule
///
/// 409 when the task has no webhook or has not ended.
#[utoipa::path(
    post, path = "/api/v1/tasks/{task_id}/redeliver", operation_id = "redeliver",
    params(TaskIdPath),
    responses(
        (status = 202, description = "Queued; the task record", body = Record),
        OneTask, Conflict
    )
)]
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

/// Every recorded attempt to deliver the task's result, oldest first
#[utoipa::path(
    get, path = "/api/v1/tasks/{task_id}/webhook-attempts", operation_id = "webhookAttempts",
    params(TaskIdPath),
    responses(
        (status = 200, description = "The attempts", body = Attempts),
        OneTask
    )
)]
pub async fn webhook_attempts(
    State(state): State<AppState>,
    Caller(account): Caller,
    TaskIdPath(id): TaskIdPath,
) -> Result<Json<Attempts>, ApiError> {
    let attempts = state
        .store
        .delivery_attempts(&account.id, &id)
        .await?
        .ok_or(ApiError::TaskNotFound)?;
    let attempts = attempts
        .iter()
        .map(|a| Attempt {
            attempted_at: rfc3339(a.attempted_at),
            duration_ms: a.duration_ms,
            status_code: a.status_code,
            error: a.error.clone(),
            next_attempt_at: a.next_attempt_at.map(rfc3339),
        })
        .collect();
    Ok(Json(Attempts {
        task_id: id,
        attempts,
    }))
}
