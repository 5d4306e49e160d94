//! The task record as the API shows it.

use serde::Serialize;

use crate::blobs::Blobs;
use crate::store::Task;

#[derive(Serialize)]
pub struct TaskRecord<'a> {
    task_id: &'a str,
    task_type: &'a str,
    status: &'a str,
    percentage: String,
    prompt: &'a str,
    aspect_ratio: &'a str,
    process_mode: &'a str,
    seed: i64,
    created_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    started_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    finished_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    original_image_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    image_urls: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    webhook: Option<WebhookState<'a>>,
}

#[derive(Serialize)]
struct WebhookState<'a> {
    url: &'a str,
    status: &'a str,
    attempts: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_status_code: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_error: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    next_attempt_at: Option<String>,
}

/// Unix milliseconds as RFC 3339 UTC with millisecond precision.
pub fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

impl<'a> TaskRecord<'a> {
    /// The record of `task`, with its images' URLs made by `blobs`.
    pub fn new(task: &'a Task, blobs: &Blobs) -> TaskRecord<'a> {
        let webhook = task.webhook.as_ref().map(|w| WebhookState {
            url: &w.url,
            status: &w.status,
            attempts: w.attempts,
            last_status_code: w.last_status_code,
            last_error: w.last_error.as_deref(),
            next_attempt_at: w
                .next_attempt_at
                .filter(|_| w.status == "pending")
                .map(rfc3339),
        });
        TaskRecord {
            task_id: &task.id,
            task_type: &task.task_type,
            status: &task.status,
            percentage: task.percentage.to_string(),
            prompt: &task.prompt,
            aspect_ratio: &task.aspect_ratio,
            process_mode: &task.process_mode,
            seed: task.seed,
            created_at: rfc3339(task.created_at),
            started_at: task.started_at.map(rfc3339),
            finished_at: task.finished_at.map(rfc3339),
            original_image_url: task.grid_key.as_deref().map(|k| blobs.url(k)),
            image_urls: (!task.image_keys.is_empty())
                .then(|| task.image_keys.iter().map(|k| blobs.url(k)).collect()),
            error: task.error.as_deref(),
            webhook,
        }
    }
}
