//! The task record as the API shows it.

use std::time::Duration;

use serde_json::{json, Value};

use crate::blobs::Blobs;
use crate::store::Task;

/// Unix milliseconds as RFC 3339 UTC with millisecond precision.
pub fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The record of `task`, with its images' URLs made by `blobs`: the fields every task has, its
/// parent and the parameters the caller gave, then its result in the fields of its shape.
/// `retention` (the node's setting) gives `expires_at`; once retention has removed the task's
/// images their URLs are left out, and text results stay.
pub fn task_record(task: &Task, blobs: &Blobs, retention: Option<Duration>) -> Value {
    let mut v = json!({
        "task_id": task.id,
        "task_type": task.task_type.as_str(),
        "status": task.status.as_str(),
        "percentage": task.percentage.to_string(),
        "prompt": task.prompt,
        "aspect_ratio": task.aspect_ratio.to_string(),
        "process_mode": task.process_mode.as_str(),
        "seed": task.seed,
        "created_at": rfc3339(task.created_at),
        "expires_at": task.expires_at(retention).map(rfc3339),
        "data_removed": task.data_removed(),
    });
    let map = v.as_object_mut().expect("an object");
    let mut put = |k: &str, value: Option<Value>| {
        if let Some(value) = value {
            map.insert(k.to_string(), value);
        }
    };
    put("started_at", task.started_at.map(|t| json!(rfc3339(t))));
    put("finished_at", task.finished_at.map(|t| json!(rfc3339(t))));
    put("parent_task_id", task.parent_id.as_ref().map(|p| json!(p)));
    put("error", task.error.as_ref().map(|e| json!(e)));
    put(
        "webhook",
        task.webhook.as_ref().map(|w| {
            let mut hook = json!({ "url": w.url, "status": w.status, "attempts": w.attempts });
            if let Some(code) = w.last_status_code {
                hook["last_status_code"] = json!(code);
            }
            if let Some(error) = &w.last_error {
                hook["last_error"] = json!(error);
            }
            if let Some(next) = w.next_attempt_at.filter(|_| w.status == "pending") {
                hook["next_attempt_at"] = json!(rfc3339(next));
            }
            hook
        }),
    );
    if let Some(op) = &task.operation {
        map.extend(op.public_fields());
    }
    if let Some(output) = task
        .output
        .as_ref()
        .filter(|o| !(task.data_removed() && o.images() > 0))
    {
        let url = |key: &str| blobs.url(key);
        map.extend(output.public_fields(&url));
    }
    v
}
