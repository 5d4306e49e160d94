//! Tasks' records: read back one or many, listed, or canceled (which answers the record too);
//! the handlers over the use cases of `crate::tasks`.

use std::collections::HashMap;

use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::auth::{Caller, PresentedKey};
use crate::domain::wire::Record;
use crate::http::extract::TaskIdPath;
use crate::http::prefer;
use crate::http::state::AppState;
use crate::refusal::ApiError;
use crate::store::Task;
use crate::tasks::body::{task_id, JsonObject};
use crate::tasks::cancel::cancel_task;
use crate::tasks::list::{invalid_cursor, ListQuery};
use crate::tasks::wait;

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
    let tasks: Vec<Record> = state.records(&page.tasks).await;
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
) -> Result<Json<Record>, ApiError> {
    let id = match body.and_then(|body| task_id("task_id", body.req_str("task_id")?)) {
        Ok(id) => id,
        Err(e) => {
            key.confirm(&state.store).await?;
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
    let asked = id.and_then(|id| Ok((id, prefer::preferred_wait(&headers)?)));
    let (TaskIdPath(id), wait) = match asked {
        Ok((id, wait)) => (id, wait.map(|asked| wait::served(&state, asked))),
        Err(e) => {
            key.confirm(&state.store).await?;
            return Err(e);
        }
    };
    let task = state.one(&key, id).await?;
    Ok(match wait {
        None => Json(state.record(&task).await).into_response(),
        Some(secs) => {
            let task = wait::until_ended(&state, &key, &id, task, secs).await;
            ([prefer::applied(secs)], Json(state.record(&task).await)).into_response()
        }
    })
}

/// One task record, the key checked in the same statement.
async fn one_record(
    state: &AppState,
    key: &PresentedKey,
    id: Uuid,
) -> Result<Json<Record>, ApiError> {
    let task = state.one(key, id).await?;
    Ok(Json(state.record(&task).await))
}

/// `POST /api/v1/tasks/{task_id}/cancel`: a task that has not ended is `canceled` at once (a
/// running one is stopped on its backend), its credits go back and its webhook is sent; 200 with
/// the record. 409 when it had already ended.
pub async fn cancel(
    State(state): State<AppState>,
    Caller(account): Caller,
    TaskIdPath(id): TaskIdPath,
) -> Result<Json<Record>, ApiError> {
    let (canceled, task) = cancel_task(&state, &account.id, &id)
        .await?
        .ok_or(ApiError::TaskNotFound)?;
    if !canceled {
        return Err(ApiError::Conflict {
            code: "task_already_ended",
            msg: format!("task_id: the task has already {}", task.status),
        });
    }
    Ok(Json(state.record(&task).await))
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
            key.confirm(&state.store).await?;
            return Err(e);
        }
    };
    let (live, rows) = state
        .store
        .tasks_for_key(&key.0, &ids)
        .await?
        .ok_or(ApiError::Unauthorized)?;
    key.used(&state.store, &live);
    let by_id: HashMap<&str, &_> = rows.iter().map(|r| (r.id.as_str(), r)).collect();
    let found: Vec<&Task> = ids
        .iter()
        .filter_map(|id| by_id.get(id.to_string().as_str()).copied())
        .collect();
    let tasks: Vec<Record> = state.records(&found).await;
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
