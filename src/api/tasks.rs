//! Submitting tasks and reading them back.

use std::collections::HashMap;

use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use uuid::Uuid;

use super::json::{task_id, JsonObject, TaskIdPath};
use super::record::{rfc3339, task_record};
use super::{access, wait, ApiError, AppState};
use crate::auth::{Caller, PresentedKey};
use crate::domain::{OpKind, Outcome, PayloadHead, TaskStatus};
use crate::store::{Ending, Redelivery, StoreResult, Task, TaskFilter, LIST_LIMIT_MAX};

/// Tasks on a page of `GET /api/v1/tasks` when `limit` is not given.
pub const LIST_LIMIT_DEFAULT: u32 = 20;

/// The query of a listing: `limit`, `cursor`, `status` and `type`, checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListQuery {
    pub limit: u32,
    pub cursor: Option<Uuid>,
    pub filter: TaskFilter,
}

impl ListQuery {
    /// Read a query string. Empty values count as absent; unknown parameters are ignored; a
    /// parameter given twice, or a value out of range, is a 400 that names it.
    pub fn parse(raw: Option<&str>) -> Result<ListQuery, ApiError> {
        let mut query = ListQuery {
            limit: LIST_LIMIT_DEFAULT,
            ..ListQuery::default()
        };
        let mut seen: Vec<String> = Vec::new();
        for (name, value) in url::form_urlencoded::parse(raw.unwrap_or_default().as_bytes()) {
            if !matches!(name.as_ref(), "limit" | "cursor" | "status" | "type") {
                continue;
            }
            if seen.iter().any(|s| *s == name) {
                return Err(ApiError::field(
                    &name,
                    "invalid_value",
                    "must be given once",
                ));
            }
            seen.push(name.to_string());
            if value.is_empty() {
                continue;
            }
            match name.as_ref() {
                "limit" => {
                    query.limit = value
                        .parse::<u32>()
                        .ok()
                        .filter(|n| (1..=LIST_LIMIT_MAX).contains(n))
                        .ok_or_else(|| {
                            ApiError::field(
                                "limit",
                                "invalid_value",
                                format!("must be an integer from 1 to {LIST_LIMIT_MAX}"),
                            )
                        })?;
                }
                "cursor" => {
                    query.cursor = Some(Uuid::parse_str(&value).map_err(|_| invalid_cursor())?);
                }
                "status" => {
                    let status = value.parse::<TaskStatus>().map_err(|_| {
                        ApiError::field(
                            "status",
                            "invalid_value",
                            format!(
                                "must be one of {}",
                                TaskStatus::ALL.map(TaskStatus::as_str).join(", ")
                            ),
                        )
                    })?;
                    query.filter.status = Some(status.as_str().to_string());
                }
                _ => {
                    let kind = value.parse::<OpKind>().map_err(|_| {
                        ApiError::field(
                            "type",
                            "invalid_value",
                            format!(
                                "must be one of {}",
                                OpKind::ALL.map(OpKind::as_str).join(", ")
                            ),
                        )
                    })?;
                    query.filter.task_type = Some(kind.as_str().to_string());
                }
            }
        }
        Ok(query)
    }
}

fn invalid_cursor() -> ApiError {
    ApiError::field(
        "cursor",
        "invalid_value",
        "must be a next_cursor from an earlier page of this listing",
    )
}

/// `GET /api/v1/tasks`: the key's account's tasks, newest first, a page at a time.
pub async fn list_tasks(
    State(state): State<AppState>,
    Caller(account): Caller,
    RawQuery(raw): RawQuery,
) -> Result<Json<Value>, ApiError> {
    let query = ListQuery::parse(raw.as_deref())?;
    let page = state
        .store
        .list_tasks(
            &account.id,
            &query.filter,
            query.cursor.as_ref(),
            query.limit,
        )
        .await?
        .ok_or_else(invalid_cursor)?;
    let tasks: Vec<Value> = page
        .tasks
        .iter()
        .map(|t| task_record(t, &state.blobs, state.config.retention.keep))
        .collect();
    Ok(Json(
        json!({ "tasks": tasks, "next_cursor": page.next_cursor }),
    ))
}

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

/// `GET /api/v1/tasks/{task_id}`: the same record as fetch; with `Prefer: wait`, once the task
/// has ended or the wait is over.
pub async fn get_task(
    State(state): State<AppState>,
    headers: HeaderMap,
    key: PresentedKey,
    id: Result<TaskIdPath, ApiError>,
) -> Result<Response, ApiError> {
    let asked = id.and_then(|id| Ok((id, wait::preferred_wait(&headers)?)));
    let (TaskIdPath(id), wait) = match asked {
        Ok((id, wait)) => (id, wait.map(|asked| wait::served(&state, asked))),
        Err(e) => {
            key.confirm(&state).await?;
            return Err(e);
        }
    };
    let task = one_task(&state, &key, id).await?;
    Ok(match wait {
        None => Json(task_record(
            &task,
            &state.blobs,
            state.config.retention.keep,
        ))
        .into_response(),
        Some(secs) => {
            let task = wait::until_ended(&state, &key, &id, task, secs).await;
            (
                [wait::applied(secs)],
                Json(task_record(
                    &task,
                    &state.blobs,
                    state.config.retention.keep,
                )),
            )
                .into_response()
        }
    })
}

/// One task record, the key checked in the same statement.
async fn one_record(
    state: &AppState,
    key: &PresentedKey,
    id: Uuid,
) -> Result<Json<Value>, ApiError> {
    let task = one_task(state, key, id).await?;
    Ok(Json(task_record(
        &task,
        &state.blobs,
        state.config.retention.keep,
    )))
}

/// One of the key's account's tasks, the key checked in the same statement.
async fn one_task(state: &AppState, key: &PresentedKey, id: Uuid) -> Result<Task, ApiError> {
    access::note_task(id);
    let (live, row) = state
        .store
        .task_for_key(&key.0, &id)
        .await?
        .ok_or(ApiError::Unauthorized)?;
    key.used(state, &live);
    row.ok_or(ApiError::TaskNotFound)
}

/// `POST /api/v1/tasks/{task_id}/cancel`: a task that has not ended is `canceled` at once (a
/// running one is stopped on its backend), its credits go back and its webhook is sent; 200 with
/// the record. 409 when it had already ended.
pub async fn cancel(
    State(state): State<AppState>,
    Caller(account): Caller,
    TaskIdPath(id): TaskIdPath,
) -> Result<Json<Value>, ApiError> {
    let (canceled, task) = cancel_task(&state, &account.id, &id)
        .await?
        .ok_or(ApiError::TaskNotFound)?;
    if !canceled {
        return Err(ApiError::Conflict {
            code: "task_already_ended",
            msg: format!("task_id: the task has already {}", task.status),
        });
    }
    Ok(Json(task_record(
        &task,
        &state.blobs,
        state.config.retention.keep,
    )))
}

/// Cancel the account's task `id`, for the API and the dashboard alike: None when it is not the
/// account's, else whether this call canceled it, and the task as it is now.
pub(crate) async fn cancel_task(
    state: &AppState,
    account_id: &str,
    id: &Uuid,
) -> StoreResult<Option<(bool, Task)>> {
    let Some(task) = state.store.task_for_account(account_id, id).await? else {
        return Ok(None);
    };
    let ending = canceled(state, &task);
    let canceled = state.store.cancel_task(task.seq, &ending).await?;
    if canceled {
        let operation = task.kind().map_or("unknown", OpKind::as_str);
        crate::metrics::task_ended(operation, TaskStatus::Canceled.as_str());
        tracing::info!("task canceled by its caller");
    }
    let now = state.store.task_for_account(account_id, id).await?;
    Ok(now.map(|task| (canceled, task)))
}

/// The end of a canceled task, with the webhook body a canceled task sends.
fn canceled(state: &AppState, task: &Task) -> Ending {
    let fields = task
        .operation
        .as_ref()
        .map(|op| op.public_fields())
        .unwrap_or_default();
    let head = PayloadHead {
        task_id: &task.id,
        task_type: &task.task_type,
        parent_task_id: task.parent_id.as_deref(),
        fields,
    };
    Ending::new(Outcome::Canceled, &head, &|key| state.blobs.url(key))
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
        .map(|row| task_record(row, &state.blobs, state.config.retention.keep))
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
        Json(task_record(&row, &state.blobs, state.config.retention.keep)),
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
