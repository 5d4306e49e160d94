//! `GET /api/v1/tasks/{task_id}/events` and `GET /api/v1/events`: Server-Sent Events streams of
//! a task, or of all the caller's tasks, over the use case of `crate::tasks::events`.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use utoipa::{IntoParams, PartialSchema, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::doc::{Checked, OneTask};
use crate::auth::Caller;
use crate::domain::wire::TaskProgress;
use crate::http::extract::TaskIdPath;
use crate::http::state::AppState;
use crate::refusal::ApiError;
use crate::tasks::events::{account_stream, task_stream, Said, StreamFilter, StreamQuery};

/// A comment this often keeps proxies from closing an idle stream.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

pub fn routes() -> OpenApiRouter<AppState> {
    let mut router = OpenApiRouter::new()
        .routes(routes!(task_events))
        .routes(routes!(account_events));
    // The streams' progress data is named in their description, not referred to: said here.
    let mut progress = vec![(TaskProgress::name().into_owned(), TaskProgress::schema())];
    TaskProgress::schemas(&mut progress);
    let components = router.get_openapi_mut().components.get_or_insert_default();
    components.schemas.extend(progress);
    router
}

/// `Last-Event-ID`, to resume a stream.
#[derive(IntoParams)]
#[into_params(parameter_in = Header)]
pub struct LastEventId {
    /// The id of the last event received: the stream says what changed since (an id easel did
    /// not give starts from the current records).
    #[param(rename = "Last-Event-ID", nullable = false)]
    pub last_event_id: Option<String>,
}

/// What a stream's answer says of its events.
const STREAM: &str = "Server-Sent Events: `event: task` (data: a Task) on connect and at every \
    change of the task's stored state, `event: progress` (data: a TaskProgress) as it waits and \
    runs, each with an `id:`; a comment every 15 s. Resume with `Last-Event-ID`.";

/// A task's events as Server-Sent Events: its record, its progress, its final record, then the
/// end
#[utoipa::path(
    get, path = "/api/v1/tasks/{task_id}/events", operation_id = "taskEvents",
    params(TaskIdPath, LastEventId),
    responses(
        (status = 200, description = "The stream; it ends after the final record",
            content_type = "text/event-stream", body = inline(EventStream),
            headers(("Cache-Control" = String, description = "`no-store`"))),
        OneTask
    )
)]
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
    let last = last_event_id(&headers);
    let stream = task_stream(state.tasks.clone(), &account.id, task, last).await?;
    Ok(sse(stream))
}

/// Every task of the caller's account as Server-Sent Events
///
/// The same events as a task's stream, for each of the account's tasks that passes the filters.
#[utoipa::path(
    get, path = "/api/v1/events", operation_id = "accountEvents", params(LastEventId, StreamQuery),
    responses(
        (status = 200, description = "The stream; it does not end by itself",
            content_type = "text/event-stream", body = inline(EventStream),
            headers(("Cache-Control" = String, description = "`no-store`"))),
        Checked
    )
)]
pub async fn account_events(
    State(state): State<AppState>,
    Caller(account): Caller,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let filter = StreamFilter::parse(raw.as_deref())?;
    let last = last_event_id(&headers);
    let stream = account_stream(state.tasks.clone(), &account.id, filter, last).await?;
    Ok(sse(stream))
}

/// A stream's body, as the document describes it.
pub struct EventStream;

impl PartialSchema for EventStream {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::schema::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .description(Some(STREAM))
            .into()
    }
}

impl ToSchema for EventStream {}

/// The caller's `Last-Event-ID`, when it is readable text.
pub fn last_event_id(headers: &HeaderMap) -> Option<&str> {
    headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

/// `said` as a `text/event-stream` answer ([`sse_of`]).
pub fn sse(said: impl Stream<Item = Said> + Send + 'static) -> Response {
    sse_of(said.map(|said| {
        Ok(Event::default()
            .event(said.event)
            .id(said.id)
            .data(said.data))
    }))
}

/// `events` as a `text/event-stream` answer, with keep-alive comments, and headers that keep
/// proxies from buffering or caching it: every stream easel answers (the OpenAI routes' too).
pub fn sse_of(events: impl Stream<Item = Result<Event, Infallible>> + Send + 'static) -> Response {
    let mut response = Sse::new(events)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response();
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}
