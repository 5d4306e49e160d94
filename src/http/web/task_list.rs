//! The account's tasks as a list (`/tasks`, and `/` when signed in), filtered and paged.

use askama::Template;
use axum::extract::{Query, State};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use serde::Deserialize;
use uuid::Uuid;

use super::error_page::{render, WebError};
use super::page::{when, Layout};
use super::session::SignedIn;
use super::thumbnails::THUMB_WIDTH;
use crate::domain::{OpKind, TaskStatus};
use crate::http::state::AppState;
use crate::store::{Task, TaskFilter};

/// The routes of these pages, beside their handlers.
pub(super) fn routes() -> Router<AppState> {
    Router::new().route("/tasks", get(list))
}

/// Tasks on one page of the list.
pub const PAGE_SIZE: u32 = 24;
/// A task as the list shows it.
pub struct TaskCard {
    pub id: String,
    pub prompt: String,
    pub task_type: String,
    pub status: String,
    pub created: String,
    /// How far it is while it runs.
    pub percentage: Option<i64>,
    /// Whether it has ended (the list follows only the rows that have not).
    pub ended: bool,
    /// The scaled image to show, if the task has made one.
    pub thumb: Option<String>,
}

impl TaskCard {
    pub fn of(task: &Task) -> TaskCard {
        TaskCard {
            id: task.id.clone(),
            prompt: prompt_or_type(task),
            task_type: task.task_type.to_string(),
            status: task.status.to_string(),
            created: when(task.created_at),
            percentage: (task.status == TaskStatus::Processing).then_some(task.percentage),
            ended: task.has_ended(),
            thumb: task
                .output
                .as_ref()
                .filter(|o| o.images() > 0 && !task.data_removed())
                .map(|_| format!("/tasks/{}/image/0?w={THUMB_WIDTH}", task.id)),
        }
    }
}

/// What a task is called where it has no prompt (an upscale, a describe).
pub(super) fn prompt_or_type(task: &Task) -> String {
    if task.prompt.trim().is_empty() {
        format!("({} task)", task.task_type)
    } else {
        task.prompt.clone()
    }
}

#[derive(Deserialize, Default)]
pub struct ListQuery {
    #[serde(default)]
    status: String,
    #[serde(default, rename = "type")]
    task_type: String,
    #[serde(default)]
    cursor: String,
}

/// An option of a filter.
pub struct Choice {
    value: &'static str,
    selected: bool,
}

fn choices(values: impl Iterator<Item = &'static str>, chosen: Option<&str>) -> Vec<Choice> {
    values
        .map(|value| Choice {
            value,
            selected: chosen == Some(value),
        })
        .collect()
}

#[derive(Template)]
#[template(path = "tasks.html")]
struct TasksPage {
    layout: Layout,
    tasks: Vec<TaskCard>,
    statuses: Vec<Choice>,
    types: Vec<Choice>,
    status: String,
    task_type: String,
    /// The query of the next (older) page, if any.
    next: Option<String>,
    first_page: bool,
}

/// `GET /tasks`.
pub async fn list(
    State(state): State<AppState>,
    user: SignedIn,
    Query(q): Query<ListQuery>,
) -> Result<Response, WebError> {
    list_page(&state, user, q).await
}

pub async fn list_page(
    state: &AppState,
    user: SignedIn,
    q: ListQuery,
) -> Result<Response, WebError> {
    let status = match q.status.as_str() {
        "" => None,
        s => Some(
            s.parse::<TaskStatus>()
                .map_err(|_| WebError::BadForm("Status: not one of the statuses.".into()))?,
        ),
    };
    let task_type = match q.task_type.as_str() {
        "" => None,
        t => Some(
            t.parse::<OpKind>()
                .map_err(|_| WebError::BadForm("Type: not one of the task types.".into()))?,
        ),
    };
    let cursor = match q.cursor.as_str() {
        "" => None,
        c => Some(c.parse::<Uuid>().map_err(|_| WebError::NotFound)?),
    };
    let filter = TaskFilter {
        status,
        task_type,
        ..TaskFilter::default()
    };
    let status = status.map(TaskStatus::as_str);
    let task_type = task_type.map(OpKind::as_str);
    let page = state
        .store
        .list_tasks(&user.account.id, &filter, cursor.as_ref(), PAGE_SIZE)
        .await?
        .ok_or(WebError::NotFound)?;
    let next = page.next_cursor.map(|c| {
        url::form_urlencoded::Serializer::new(String::new())
            .append_pair("status", status.unwrap_or(""))
            .append_pair("type", task_type.unwrap_or(""))
            .append_pair("cursor", &c)
            .finish()
    });
    let page = TasksPage {
        layout: Layout::new("Tasks", "tasks", Some(&user)),
        tasks: page.tasks.iter().map(TaskCard::of).collect(),
        statuses: choices(TaskStatus::ALL.iter().map(|s| s.as_str()), status),
        types: choices(OpKind::ALL.iter().map(|k| k.as_str()), task_type),
        status: status.unwrap_or_default().to_string(),
        task_type: task_type.unwrap_or_default().to_string(),
        next,
        first_page: cursor.is_none(),
    };
    render(&page)
}
