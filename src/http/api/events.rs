//! `GET /api/v1/tasks/{task_id}/events` and `GET /api/v1/events`: Server-Sent Events streams of
//! a task, or of all the caller's tasks, over the use case of `crate::tasks::events`.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};

use crate::auth::Caller;
use crate::http::extract::TaskIdPath;
use crate::http::state::AppState;
use crate::refusal::ApiError;
use crate::tasks::events::{account_stream, open_slot, task_stream, Said, StreamFilter};

/// A comment this often keeps proxies from closing an idle stream.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// `GET /api/v1/tasks/{task_id}/events`: the task's record, its progress, its final record.
pub async fn task_events(
    State(state): State<AppState>,
    Caller(account): Caller,
    id: Result<TaskIdPath, ApiError>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let TaskIdPath(id) = id?;
    crate::telemetry::request::note_task(id);
    let task = state
        .store
        .task_for_account(&account.id, &id)
        .await?
        .ok_or(ApiError::TaskNotFound)?;
    let slot = open_slot(&state.tasks, &account.id)?;
    let stream = task_stream(
        state.tasks.clone(),
        slot,
        &account.id,
        task,
        last_event_id(&headers),
    )
    .await?;
    Ok(sse(stream))
}

/// `GET /api/v1/events`: the same for every task of the caller's account (`task_type` and
/// `status` filter them).
pub async fn account_events(
    State(state): State<AppState>,
    Caller(account): Caller,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let filter = StreamFilter::parse(raw.as_deref())?;
    let slot = open_slot(&state.tasks, &account.id)?;
    let stream = account_stream(
        state.tasks.clone(),
        slot,
        &account.id,
        filter,
        last_event_id(&headers),
    )
    .await?;
    Ok(sse(stream))
}

/// The caller's `Last-Event-ID`, when it is readable text.
pub fn last_event_id(headers: &HeaderMap) -> Option<&str> {
    headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

/// `said` as a `text/event-stream` answer, with keep-alive comments, and headers that keep
/// proxies from buffering or caching it.
pub fn sse(said: impl Stream<Item = Said> + Send + 'static) -> Response {
    let events = said.map(|said| {
        Ok::<_, Infallible>(
            Event::default()
                .event(said.event)
                .id(said.id)
                .data(said.data),
        )
    });
    let mut response = Sse::new(events)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response();
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}
