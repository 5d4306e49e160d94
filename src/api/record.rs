//! The task record as the API shows it.

use serde::Serialize;

use crate::store::TaskRow;

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
    original_image_url: Option<&'a str>,
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
    pub fn from_row(row: &'a TaskRow) -> TaskRecord<'a> {
        let webhook = row.webhook_url.as_deref().map(|url| {
            let status = row.wh_status.as_deref().unwrap_or("pending");
            WebhookState {
                url,
                status,
                attempts: row.wh_attempts.unwrap_or(0),
                last_status_code: row.wh_last_status_code,
                last_error: row.wh_last_error.as_deref(),
                next_attempt_at: row
                    .wh_next_attempt_at
                    .filter(|_| status == "pending")
                    .map(rfc3339),
            }
        });
        TaskRecord {
            task_id: &row.id,
            task_type: &row.task_type,
            status: &row.status,
            percentage: row.percentage.to_string(),
            prompt: &row.prompt,
            aspect_ratio: &row.aspect_ratio,
            process_mode: &row.process_mode,
            seed: row.seed,
            created_at: rfc3339(row.created_at),
            started_at: row.started_at.map(rfc3339),
            finished_at: row.finished_at.map(rfc3339),
            original_image_url: row.original_image_url.as_deref(),
            image_urls: row
                .image_urls
                .as_deref()
                .and_then(|u| serde_json::from_str(u).ok()),
            error: row.error.as_deref(),
            webhook,
        }
    }
}
