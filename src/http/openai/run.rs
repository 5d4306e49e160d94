//! What every OpenAI images call does once its request is read: submit its tasks through the
//! same use case as `POST /api/v1/{operation}` (credits, plans, fairness, moderation and the
//! dashboard all apply), wait for them within `openai_wait` (listening to their events, holding
//! no worker and no database connection), and answer their images in OpenAI's shape.

use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;
use serde_json::{json, Map, Value};
use tokio::time::Instant;
use uuid::Uuid;

use super::error::OpenAiError;
use crate::auth::PresentedKey;
use crate::domain::{OpKind, Output, TaskStatus};
use crate::images::convert::{self, Format};
use crate::refusal::ApiError;
use crate::store::Task;
use crate::tasks::body::JsonObject;
use crate::tasks::submit::submit_operation;
use crate::tasks::{upload, wait, Tasks};

/// Images per task of the grid operations (imagine, inpaint, variations).
pub const PER_TASK: u32 = 4;

/// `b64_json` or `url`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResponseFormat {
    Url,
    B64Json,
}

/// What the caller asked of the answer.
#[derive(Clone, Debug)]
pub struct Shape {
    pub n: u32,
    pub response_format: ResponseFormat,
    pub output_format: Format,
    /// JPEG quality, 0 to 100 (`output_compression`).
    pub compression: u8,
    /// Echoed in the answer (`quality`, `background`).
    pub quality: String,
    pub background: Option<String>,
}

impl Shape {
    pub fn format_name(&self) -> &'static str {
        match self.output_format {
            Format::Png => "png",
            Format::Jpeg => "jpeg",
            Format::Webp => "webp",
        }
    }
}

/// The caller: its key (every submit checks it in its own statement) and account.
pub struct Who<'a> {
    pub key: &'a PresentedKey,
    pub account_id: &'a str,
}

/// Now, in Unix seconds.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// When the call stops waiting.
pub fn deadline(tasks: &Tasks) -> Instant {
    Instant::now() + tasks.config.limits.openai_wait
}

/// Submit `bodies` of `kind`, in order, as the caller; on a refusal the tasks already stored
/// are canceled (their credits come back), so that a call stores all its tasks or none.
pub async fn submit_all(
    tasks: &Tasks,
    who: &Who<'_>,
    kind: OpKind,
    bodies: Vec<Map<String, Value>>,
) -> Result<Vec<Uuid>, OpenAiError> {
    let mut ids = Vec::with_capacity(bodies.len());
    for body in bodies {
        match submit_operation(tasks, kind, who.key, Ok(JsonObject(body))).await {
            Ok(id) => ids.push(id),
            Err(e) => {
                for id in &ids {
                    if let Err(undo) =
                        crate::tasks::cancel::cancel_task(tasks, who.account_id, id).await
                    {
                        tracing::warn!(error = %undo, "could not cancel a task of a refused OpenAI call");
                    }
                }
                return Err(e.into());
            }
        }
    }
    Ok(ids)
}

/// The task `id` once it has ended, or as it is at `until`.
pub async fn ended(
    tasks: &Tasks,
    key: &PresentedKey,
    id: &Uuid,
    until: Instant,
) -> Result<Task, OpenAiError> {
    let task = tasks.of_key(key, *id).await?;
    let left = until.saturating_duration_since(Instant::now());
    // Whole seconds, rounded up: a wait never ends before the deadline it was given.
    let secs = left.as_secs() + u64::from(left.subsec_nanos() > 0);
    Ok(wait::until_ended(tasks, key, id, task, secs).await)
}

/// The image keys of `task` and their size, or why the call cannot answer with them.
pub fn images_of(task: &Task, ids: &[Uuid]) -> Result<(Vec<String>, u32, u32), OpenAiError> {
    match task.status {
        TaskStatus::Finished => {}
        TaskStatus::Failed => {
            let message = task
                .error
                .clone()
                .unwrap_or_else(|| "the task failed".into());
            let policy = message.contains("content policy");
            return Err(OpenAiError::TaskFailed { message, policy });
        }
        TaskStatus::Canceled => {
            return Err(OpenAiError::TaskFailed {
                message: format!("task {} was canceled", task.id),
                policy: false,
            })
        }
        _ => {
            return Err(OpenAiError::TimedOut {
                task_ids: ids.iter().map(Uuid::to_string).collect(),
            })
        }
    }
    if task.data_removed() {
        return Err(OpenAiError::TaskFailed {
            message: format!("task {}: its images were removed (retention)", task.id),
            policy: false,
        });
    }
    match &task.output {
        Some(Output::Grid {
            image_keys,
            width,
            height,
            ..
        }) => Ok((image_keys.clone(), *width, *height)),
        Some(Output::Single {
            image_key,
            width,
            height,
        }) => Ok((vec![image_key.clone()], *width, *height)),
        _ => Err(OpenAiError::Api(ApiError::Internal(anyhow::anyhow!(
            "task {} finished without images",
            task.id
        )))),
    }
}

/// Wait for every task of `ids` (within `until`) and gather the first `n` images, with their
/// size.
pub async fn gather(
    tasks: &Tasks,
    key: &PresentedKey,
    ids: &[Uuid],
    n: u32,
    until: Instant,
) -> Result<(Vec<String>, (u32, u32)), OpenAiError> {
    let mut keys = Vec::new();
    let mut size = (0, 0);
    for id in ids {
        let task = ended(tasks, key, id, until).await?;
        let (images, w, h) = images_of(&task, ids)?;
        size = (w, h);
        keys.extend(images);
    }
    keys.truncate(n as usize);
    Ok((keys, size))
}

/// The bytes of the image at `key`, in the asked format (encoded once here unless they are in
/// it already).
pub async fn encoded(tasks: &Tasks, key: &str, shape: &Shape) -> Result<Vec<u8>, OpenAiError> {
    let bytes = tasks
        .blobs
        .get(key)
        .await
        .map_err(|e| ApiError::Internal(e.into()))?
        .ok_or_else(|| {
            ApiError::Internal(anyhow::anyhow!("an image of a finished task is missing"))
        })?;
    let (format, quality) = (shape.output_format, shape.compression.max(1));
    let max = tasks.config.limits.input_max_pixels.max(64 << 20);
    tokio::task::spawn_blocking(move || convert::convert(&bytes, format, quality, max))
        .await
        .map_err(|e| ApiError::Internal(e.into()))?
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("an image {e}")).into())
}

/// One image of the answer: its URL (the task's own file when it is in the asked format, else
/// the converted file kept as an upload of the account), or its bytes in base64.
async fn datum(
    tasks: &Tasks,
    who: &Who<'_>,
    key: &str,
    shape: &Shape,
) -> Result<Value, OpenAiError> {
    let in_format = Format::of_key(key) == Some(shape.output_format);
    match shape.response_format {
        ResponseFormat::Url if in_format => Ok(json!({ "url": tasks.blobs.url(key) })),
        ResponseFormat::Url => {
            let bytes = encoded(tasks, key, shape).await?;
            let kept =
                upload::store_upload(tasks, who.account_id, "output_format", bytes.into()).await?;
            Ok(json!({ "url": tasks.blobs.url(&kept.key) }))
        }
        ResponseFormat::B64Json => {
            let bytes = encoded(tasks, key, shape).await?;
            Ok(json!({ "b64_json": base64::engine::general_purpose::STANDARD.encode(bytes) }))
        }
    }
}

/// The answer of a call: `{"created", "data", "output_format", "size", "quality", ...}`.
pub async fn answer(
    tasks: &Tasks,
    who: &Who<'_>,
    keys: &[String],
    (w, h): (u32, u32),
    shape: &Shape,
) -> Result<Value, OpenAiError> {
    let mut data = Vec::with_capacity(keys.len());
    for key in keys {
        data.push(datum(tasks, who, key, shape).await?);
    }
    let mut body = json!({
        "created": unix_now(),
        "data": data,
        "output_format": shape.format_name(),
        "size": format!("{w}x{h}"),
        "quality": shape.quality,
    });
    if let Some(background) = &shape.background {
        body["background"] = json!(background);
    }
    Ok(body)
}

/// Submit `bodies`, wait, and answer: the whole of a call without streaming.
pub async fn run(
    tasks: &Tasks,
    who: &Who<'_>,
    kind: OpKind,
    bodies: Vec<Map<String, Value>>,
    shape: &Shape,
    until: Instant,
) -> Result<Value, OpenAiError> {
    let ids = submit_all(tasks, who, kind, bodies).await?;
    let (keys, size) = gather(tasks, who.key, &ids, shape.n, until).await?;
    answer(tasks, who, &keys, size, shape).await
}

/// How many tasks of four images make `n` images.
pub fn task_count(n: u32) -> usize {
    n.div_ceil(PER_TASK) as usize
}
