//! Tasks' records: read back one or many, listed, or canceled (which answers the record too);
//! the handlers over the use cases of `crate::tasks`.

use std::collections::HashMap;

use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::doc::{Checked, Conflict, OneTask, Posted};
use crate::auth::{Caller, PresentedKey};
use crate::domain::wire::Record;
use crate::http::extract::TaskIdPath;
use crate::http::prefer::{self, PreferWait};
use crate::http::state::AppState;
use crate::refusal::ApiError;
use crate::store::Task;
use crate::tasks::body::{task_id, JsonObject};
use crate::tasks::cancel::cancel_task;
use crate::tasks::list::{invalid_cursor, ListParams, ListQuery};
use crate::tasks::wait;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(fetch))
        .routes(routes!(fetch_many))
        .routes(routes!(list_tasks))
        .routes(routes!(get_task))
        .routes(routes!(cancel))
}

/// One page of a listing.
#[derive(Serialize, ToSchema)]
pub struct TaskPage {
    #[schema(max_items = 100)]
    tasks: Vec<Record>,
    /// The cursor of the next (older) page; null on the last page.
    #[schema(required = true, value_type = Option<Uuid>)]
    next_cursor: Option<String>,
}

/// The records fetch-many found.
#[derive(Serialize, ToSchema)]
pub struct Records {
    tasks: Vec<Record>,
}

/// fetch's body (read field by field, `fetch`).
#[derive(ToSchema)]
pub struct FetchRequest {
    pub task_id: Uuid,
}

/// fetch-many's body (read field by field, `fetch_many_ids`).
#[derive(ToSchema)]
pub struct FetchManyRequest {
    #[schema(min_items = 1, max_items = 20)]
    pub task_ids: Vec<Uuid>,
}

/// The account's tasks, newest first, a page at a time
///
/// Keyset-paged: pass the previous page's `next_cursor` as `cursor` for the next (older) page;
/// `next_cursor` is null on the last page. Tasks of other accounts are never listed; a cursor
/// that is not one of the account's tasks is 400. `q` searches the prompts: only the tasks whose
/// prompt holds every word of it (a full-text index in each store), still newest first; it
/// combines with `status`, `type` and `model`.
#[utoipa::path(
    get, path = "/api/v1/tasks", operation_id = "listTasks", params(ListParams),
    responses(
        (status = 200, description = "One page of task records", body = TaskPage),
        Checked
    )
)]
pub async fn list_tasks(
    State(state): State<AppState>,
    Caller(account): Caller,
    RawQuery(raw): RawQuery,
) -> Result<Json<TaskPage>, ApiError> {
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
    Ok(Json(TaskPage {
        tasks: state.records(&page.tasks).await,
        next_cursor: page.next_cursor,
    }))
}

/// Most ids in one `fetch-many`.
pub const FETCH_MANY_MAX: usize = 20;

/// Fetch one task record
#[utoipa::path(
    post, path = "/api/v1/fetch", operation_id = "fetch", request_body = FetchRequest,
    responses(
        (status = 200, description = "The task record", body = Record),
        OneTask, Posted
    )
)]
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

/// The task record (same as fetch); with `Prefer: wait`, once the task has ended
#[utoipa::path(
    get, path = "/api/v1/tasks/{task_id}", operation_id = "getTask", params(TaskIdPath, PreferWait),
    responses(
        (status = 200, description = "The task record", body = Record, headers(
            ("Preference-Applied" = String,
                description = "`wait=N` when the request asked to wait (`Prefer: wait`).")
        )),
        OneTask
    )
)]
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

/// Cancel a task that has not ended: it is canceled at once (a running one is stopped on its
/// backend), its credits go back, and its webhook is sent
///
/// 409 when it had already ended.
#[utoipa::path(
    post, path = "/api/v1/tasks/{task_id}/cancel", operation_id = "cancelTask", params(TaskIdPath),
    responses(
        (status = 200, description = "Canceled; the task record", body = Record),
        OneTask, Conflict
    )
)]
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

/// Fetch up to 20 task records, in the order asked; unknown ids are left out
#[utoipa::path(
    post, path = "/api/v1/fetch-many", operation_id = "fetchMany", request_body = FetchManyRequest,
    responses(
        (status = 200, description = "The records", body = Records),
        Posted
    )
)]
pub async fn fetch_many(
    State(state): State<AppState>,
    key: PresentedKey,
    body: Result<JsonObject, ApiError>,
) -> Result<Json<Records>, ApiError> {
    let ids = match body.and_then(|body| fetch_many_ids(&body)) {
        Ok(ids) => ids,
        Err(e) => {
            key.confirm(&state.store).await?;
            return Err(e);
        }
    };
    let rows = state.tasks.many_of_key(&key, &ids).await?;
    let by_id: HashMap<&str, &_> = rows.iter().map(|r| (r.id.as_str(), r)).collect();
    let found: Vec<&Task> = ids
        .iter()
        .filter_map(|id| by_id.get(id.to_string().as_str()).copied())
        .collect();
    Ok(Json(Records {
        tasks: state.records(&found).await,
    }))
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
