//! A task's page, its progress fragment (which the task page and the playground show, and the
//! script reads again when a task ends), and the page's forms: cancel, and ask for a redelivery.

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;

use super::error_page::{render, WebError};
use super::page::{when, Layout};
use super::session::{task_id, Posted, SignedIn};
use super::studio::ActionsView;
use super::task_list::{prompt_or_type, TaskCard};
use super::thumbnails::{preview_path, PREVIEW_WIDTH};
use crate::domain::{Output, Retrying, TaskStatus};
use crate::http::state::AppState;
use crate::store::{Redelivery, Task};

/// The routes of these pages, beside their handlers.
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/tasks/{task_id}", get(page))
        .route("/tasks/{task_id}/progress", get(progress))
        .route("/tasks/{task_id}/redeliver", post(redeliver))
        .route("/tasks/{task_id}/cancel", post(cancel))
}

/// A task's state and what it made, as the task page and the playground show it (and poll until
/// it is final).
#[derive(Template)]
#[template(path = "progress.html")]
pub struct Progress {
    pub id: String,
    pub status: String,
    pub percentage: i64,
    pub is_final: bool,
    pub error: Option<String>,
    pub images: Vec<ImageView>,
    pub text: Vec<String>,
    pub seed: Option<i64>,
    /// When retention removed the task's images, shown in their place.
    pub removed: Option<String>,
    /// How many tasks are ahead of it while it waits, when known.
    pub queue_position: Option<u32>,
    /// The dashboard's address of its latest preview while it runs.
    pub preview: Option<String>,
    /// While it runs: the backend attempt that failed, when it waits to be tried again.
    pub retrying: Option<Retrying>,
    /// Once it has finished with images: what may be made from it (pages that can post
    /// forms add them, [`Progress::with_actions`]).
    pub actions: Option<ActionsView>,
}

pub struct ImageView {
    /// The scaled preview.
    pub src: String,
    /// The full image.
    pub href: String,
    pub alt: String,
    pub label: String,
}

impl Progress {
    pub fn of(state: &AppState, task: &Task) -> Progress {
        let is_final = task.has_ended();
        let prompt = prompt_or_type(task);
        let image = |n: usize, key: &str, label: String| ImageView {
            src: format!("/tasks/{}/image/{n}?w={PREVIEW_WIDTH}", task.id),
            href: state.blobs.url(key),
            alt: format!("{label} of the task “{prompt}”"),
            label,
        };
        let mut images = Vec::new();
        let (mut text, mut seed) = (Vec::new(), None);
        // A text result is the record itself, not a file: it stays.
        match task
            .output
            .as_ref()
            .filter(|o| !(task.data_removed() && o.images() > 0))
        {
            Some(Output::Grid {
                grid_key,
                image_keys,
                ..
            }) => {
                images.push(image(0, grid_key, "The grid of all four images".into()));
                for (i, key) in image_keys.iter().enumerate() {
                    images.push(image(i + 1, key, format!("Image {}", i + 1)));
                }
            }
            Some(Output::Single { image_key, .. }) => {
                images.push(image(0, image_key, "The image".into()))
            }
            Some(Output::Text { content }) => text = content.clone(),
            Some(Output::Seed { seed: s }) => seed = Some(*s),
            None => {}
        }
        Progress {
            id: task.id.clone(),
            status: task.status.to_string(),
            percentage: task.percentage,
            is_final,
            error: task.error.clone(),
            images,
            text,
            seed,
            removed: task.data_removed_at.map(when),
            queue_position: None,
            preview: task
                .preview_key
                .as_deref()
                .filter(|_| !is_final)
                .and_then(preview_path),
            retrying: task.retrying.clone(),
            actions: None,
        }
    }

    /// With the buttons of what may be made from the task, once it has finished.
    pub fn with_actions(mut self, state: &AppState, task: &Task, csrf: &str) -> Progress {
        if self.is_final {
            self.actions = ActionsView::of(state, task, csrf);
        }
        self
    }

    /// As [`Progress::of`], with the task's place in line while it waits.
    pub async fn load(state: &AppState, task: &Task) -> Progress {
        let mut progress = Progress::of(state, task);
        if crate::tasks::queue_position::waits(task) {
            progress.queue_position = state.tasks.record(task).await.queue_position;
        }
        progress
    }
}

pub struct AttemptView {
    at: String,
    outcome: String,
    ok: bool,
    duration_ms: i64,
    next: Option<String>,
}

pub struct Fact {
    name: String,
    value: String,
}

#[derive(Template)]
#[template(path = "task.html")]
struct TaskPage {
    layout: Layout,
    csrf: String,
    id: String,
    prompt: String,
    facts: Vec<Fact>,
    parameters: Vec<Fact>,
    progress: Progress,
    parent: Option<String>,
    children: Vec<TaskCard>,
    timeline: Vec<Fact>,
    webhook: Option<Fact>,
    attempts: Vec<AttemptView>,
    can_redeliver: bool,
    can_cancel: bool,
    notice: Option<String>,
}

#[derive(Deserialize, Default)]
pub struct PageQuery {
    #[serde(default)]
    redelivery: String,
    #[serde(default)]
    cancel: String,
}

/// `GET /tasks/{task_id}`.
pub async fn page(
    State(state): State<AppState>,
    user: SignedIn,
    Path(raw): Path<String>,
    Query(q): Query<PageQuery>,
) -> Result<Response, WebError> {
    let task = user.own_task(&state, &raw).await?;
    let id = task_id(&raw)?;
    let children = state
        .store
        .task_children(&user.account.id, task.seq)
        .await?;
    let attempts = state
        .store
        .delivery_attempts(&user.account.id, &id)
        .await?
        .unwrap_or_default();
    let fact = |name: &str, value: String| Fact {
        name: name.to_string(),
        value,
    };
    let mut facts = vec![
        fact("Task id", task.id.clone()),
        fact("Type", task.task_type.to_string()),
        fact("Status", task.status.to_string()),
        fact("Mode", task.process_mode.to_string()),
        fact("Aspect ratio", task.aspect_ratio.to_string()),
        fact("Seed", task.seed.to_string()),
        fact("Attempts", task.attempts.to_string()),
    ];
    if let Some(error) = &task.error {
        facts.push(fact("Error", error.clone()));
    }
    let parameters = task
        .operation
        .as_ref()
        .map(|op| {
            let fields = serde_json::to_value(op.public_fields()).unwrap_or_default();
            let serde_json::Value::Object(fields) = fields else {
                return Vec::new();
            };
            fields
                .into_iter()
                .map(|(k, v)| {
                    let value = match v {
                        serde_json::Value::String(s) => s,
                        other => other.to_string(),
                    };
                    fact(&k, value)
                })
                .collect()
        })
        .unwrap_or_default();
    let mut timeline = vec![fact("Submitted (pending)", when(task.created_at))];
    if let Some(t) = task.started_at {
        timeline.push(fact("Started", when(t)));
    }
    if let Some(t) = task.finished_at {
        let name = match task.status {
            TaskStatus::Failed => "Failed",
            TaskStatus::Canceled => "Canceled",
            _ => "Finished",
        };
        timeline.push(fact(name, when(t)));
    }
    match (
        task.data_removed_at,
        task.expires_at(state.config.retention.keep),
    ) {
        (Some(t), _) => timeline.push(fact("Images removed (retention)", when(t))),
        (None, Some(t)) => timeline.push(fact("Images kept until (retention)", when(t))),
        (None, None) => {}
    }
    let webhook = task.webhook.as_ref().map(|w| {
        fact(
            &w.url,
            format!(
                "{}, {} attempt(s) in its latest schedule",
                w.status, w.attempts
            ),
        )
    });
    let attempts = attempts
        .iter()
        .map(|a| {
            let ok = a.status_code.is_some_and(|c| (200..300).contains(&c));
            let outcome = match (&a.error, a.status_code) {
                (Some(e), Some(c)) if !e.contains(&c.to_string()) => format!("HTTP {c}: {e}"),
                (Some(e), _) => e.clone(),
                (None, Some(c)) => format!("HTTP {c}"),
                (None, None) => "no answer".into(),
            };
            AttemptView {
                at: when(a.attempted_at),
                outcome,
                ok,
                duration_ms: a.duration_ms,
                next: a.next_attempt_at.map(when),
            }
        })
        .collect();
    let is_final = task.has_ended();
    let notice = match q.redelivery.as_str() {
        "queued" => Some("A new delivery of the result is on its way.".to_string()),
        "no_webhook" => Some("This task has no webhook to deliver to.".to_string()),
        "not_final" => Some("The task has not finished yet; nothing to deliver.".to_string()),
        _ => match q.cancel.as_str() {
            "done" => Some("The task was canceled.".to_string()),
            "ended" => Some("The task had already ended; nothing to cancel.".to_string()),
            _ => None,
        },
    };
    let page = TaskPage {
        layout: Layout::new(format!("Task {}", task.id), "tasks", Some(&user)),
        csrf: user.csrf.clone(),
        id: task.id.clone(),
        prompt: prompt_or_type(&task),
        facts,
        parameters,
        progress: Progress::load(&state, &task)
            .await
            .with_actions(&state, &task, &user.csrf),
        parent: task.parent_id.clone(),
        children: children.iter().map(TaskCard::of).collect(),
        timeline,
        webhook,
        attempts,
        can_redeliver: task.webhook.is_some() && is_final,
        can_cancel: !is_final,
        notice,
    };
    render(&page)
}

/// `GET /tasks/{task_id}/progress`: the progress fragment, read by the script when the task's
/// stream ends (and now and then when no stream can be opened).
pub async fn progress(
    State(state): State<AppState>,
    user: SignedIn,
    Path(raw): Path<String>,
) -> Result<Response, WebError> {
    let task = user.own_task(&state, &raw).await?;
    let progress = Progress::load(&state, &task).await;
    render(&progress.with_actions(&state, &task, &user.csrf))
}

/// `POST /tasks/{task_id}/redeliver`: what `POST /api/v1/tasks/{id}/redeliver` does, for the
/// signed-in account.
pub async fn redeliver(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    Posted { user, .. }: Posted<super::auth::Empty>,
) -> Result<Response, WebError> {
    let id = task_id(&raw)?;
    let outcome = match state.store.redeliver(&user.account.id, &id).await? {
        Redelivery::TaskNotFound => return Err(WebError::NotFound),
        Redelivery::Queued => "queued",
        Redelivery::NoWebhook | Redelivery::NotRequested => "no_webhook",
        Redelivery::NotFinal => "not_final",
    };
    Ok(Redirect::to(&format!("/tasks/{id}?redelivery={outcome}")).into_response())
}

/// `POST /tasks/{task_id}/cancel`: what `POST /api/v1/tasks/{id}/cancel` does, for the
/// signed-in account.
pub async fn cancel(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    Posted { user, .. }: Posted<super::auth::Empty>,
) -> Result<Response, WebError> {
    let id = task_id(&raw)?;
    let outcome = match crate::tasks::cancel::cancel_task(&state, &user.account.id, &id).await? {
        None => return Err(WebError::NotFound),
        Some((true, _)) => "done",
        Some((false, _)) => "ended",
    };
    Ok(Redirect::to(&format!("/tasks/{id}?cancel={outcome}")).into_response())
}
