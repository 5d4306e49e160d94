//! The tasks list, a task's page, its progress fragment (which the task page and the playground
//! show, and the script reads again when a task ends), its images scaled down, and asking for a
//! redelivery.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use askama::Template;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use uuid::Uuid;

use super::error_page::{render, WebError};
use super::page::{when, Layout};
use super::session::{Posted, SignedIn};
use crate::domain::{OpKind, Output, TaskStatus};
use crate::http::state::AppState;
use crate::store::{Redelivery, Task, TaskFilter};

/// Tasks on one page of the list.
pub const PAGE_SIZE: u32 = 24;
/// The widths images are scaled to, and their JPEG quality: thumbnails in lists (shown at 72 CSS
/// pixels), previews on a task's page. Thumbnails are small and rough so that a full page of
/// tasks stays under 100 KB (docs/benchmarks.md, "Dashboard page weight").
pub const THUMB_WIDTH: u32 = 96;
const THUMB_QUALITY: u8 = 70;
pub const PREVIEW_WIDTH: u32 = 320;
const PREVIEW_QUALITY: u8 = 80;
/// Scaled images kept in memory; past this the cache starts again empty.
const SCALED_CACHE_MAX: usize = 512;

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
fn prompt_or_type(task: &Task) -> String {
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
    let filter = TaskFilter { status, task_type };
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
        }
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

fn task_id(raw: &str) -> Result<Uuid, WebError> {
    raw.parse().map_err(|_| WebError::NotFound)
}

/// The account's task, or 404 whether it does not exist or is someone else's.
pub(super) async fn own_task(
    state: &AppState,
    user: &SignedIn,
    raw: &str,
) -> Result<Task, WebError> {
    let id = task_id(raw)?;
    state
        .store
        .task_for_account(&user.account.id, &id)
        .await?
        .ok_or(WebError::NotFound)
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
    let task = own_task(&state, &user, &raw).await?;
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
        progress: Progress::load(&state, &task).await,
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
    let task = own_task(&state, &user, &raw).await?;
    render(&Progress::load(&state, &task).await)
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

#[derive(Deserialize)]
pub struct ImageQuery {
    #[serde(default)]
    w: u32,
}

static SCALED: LazyLock<Mutex<HashMap<(String, u32), Bytes>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// `GET /tasks/{task_id}/image/{n}?w=96|320`: image `n` of the account's task (0: the grid or
/// the single image, 1 to 4: a grid's images) scaled down to JPEG, so that lists of tasks stay
/// light. Kept by browsers for good: the image at a key never changes.
pub async fn thumbnail(
    State(state): State<AppState>,
    user: SignedIn,
    Path((raw, n)): Path<(String, usize)>,
    Query(q): Query<ImageQuery>,
) -> Result<Response, WebError> {
    if ![THUMB_WIDTH, PREVIEW_WIDTH].contains(&q.w) {
        return Err(WebError::NotFound);
    }
    let task = own_task(&state, &user, &raw).await?;
    let key = match (task.output.as_ref().filter(|_| !task.data_removed()), n) {
        (Some(Output::Grid { grid_key, .. }), 0) => grid_key.clone(),
        (Some(Output::Grid { image_keys, .. }), n) => {
            image_keys.get(n - 1).cloned().ok_or(WebError::NotFound)?
        }
        (Some(Output::Single { image_key, .. }), 0) => image_key.clone(),
        _ => return Err(WebError::NotFound),
    };
    let cached = SCALED
        .lock()
        .expect("not poisoned")
        .get(&(key.clone(), q.w))
        .cloned();
    let jpeg = match cached {
        Some(jpeg) => jpeg,
        None => {
            let file = state
                .blobs
                .get(&key)
                .await
                .map_err(|e| WebError::Internal(e.into()))?
                .ok_or(WebError::NotFound)?;
            let width = q.w;
            let jpeg = tokio::task::spawn_blocking(move || scale(&file, width))
                .await
                .map_err(|e| WebError::Internal(e.into()))?
                .map_err(WebError::Internal)?;
            let mut cache = SCALED.lock().expect("not poisoned");
            if cache.len() >= SCALED_CACHE_MAX {
                cache.clear();
            }
            cache.insert((key, q.w), jpeg.clone());
            jpeg
        }
    };
    Ok((
        [
            (header::CONTENT_TYPE, HeaderValue::from_static("image/jpeg")),
            (
                header::CACHE_CONTROL,
                HeaderValue::from_static("private, max-age=31536000, immutable"),
            ),
        ],
        jpeg,
    )
        .into_response())
}

/// The dashboard's address of the preview at `key` (`{task_id}/{folder}/preview-{n}.jpg`).
pub fn preview_path(key: &str) -> Option<String> {
    let (task_id, rest) = key.split_once('/')?;
    is_preview(rest).then(|| format!("/tasks/{task_id}/preview/{rest}"))
}

/// Whether `rest` names a preview in a task's folder: `{folder}/preview-{n}.jpg`.
pub(super) fn is_preview(rest: &str) -> bool {
    let Some((folder, name)) = rest.split_once('/') else {
        return false;
    };
    let n = name
        .strip_prefix("preview-")
        .and_then(|n| n.strip_suffix(".jpg"));
    !folder.is_empty()
        && folder.bytes().all(|b| b.is_ascii_hexdigit())
        && n.is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// A stored image (PNG, or a backend's JPEG) scaled to fit `width` x `width`, as JPEG.
fn scale(file: &[u8], width: u32) -> anyhow::Result<Bytes> {
    let format = match image::guess_format(file)? {
        format @ (image::ImageFormat::Png | image::ImageFormat::Jpeg) => format,
        other => anyhow::bail!("a stored image is {other:?}, not PNG or JPEG"),
    };
    let img = image::load_from_memory_with_format(file, format)?;
    let small = img.thumbnail(width, width).to_rgb8();
    let quality = if width == THUMB_WIDTH {
        THUMB_QUALITY
    } else {
        PREVIEW_QUALITY
    };
    let mut out = Vec::new();
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, quality).encode_image(&small)?;
    Ok(Bytes::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_tasks_previews_have_a_dashboard_address() {
        assert_eq!(
            preview_path("0b1c/3fa9/preview-2.jpg").as_deref(),
            Some("/tasks/0b1c/preview/3fa9/preview-2.jpg")
        );
        assert_eq!(preview_path("0b1c/3fa9/grid.png"), None);
        assert_eq!(preview_path("0b1c/x/preview-2.jpg"), None);
        assert_eq!(preview_path("0b1c/3fa9/preview-.jpg"), None);
        assert_eq!(preview_path("0b1c/preview-2.jpg"), None);
        // A backend's JPEG kept as it came is an image of the task, not a preview.
        assert_eq!(preview_path("0b1c/3fa9/0.jpg"), None);
    }

    #[test]
    fn thumbnails_are_made_of_png_and_jpeg_and_nothing_else() {
        use crate::images::stored::StoredImage;
        use crate::images::RgbaImage;
        let image = RgbaImage::new(300, 200);
        let png = StoredImage::png(&image).bytes;
        let jpeg = StoredImage::jpeg(&image).unwrap().bytes;
        for file in [png, jpeg] {
            let thumb = scale(&file, THUMB_WIDTH).unwrap();
            let small = image::load_from_memory(&thumb).unwrap();
            assert_eq!((small.width(), small.height()), (THUMB_WIDTH, 64));
        }
        let mut gif = Vec::new();
        image::DynamicImage::new_rgba8(4, 4)
            .write_to(&mut std::io::Cursor::new(&mut gif), image::ImageFormat::Gif)
            .unwrap();
        assert!(scale(&gif, THUMB_WIDTH).is_err());
    }
}
