//! The task record as the API shows it.

use std::time::Duration;

use crate::blobs::Blobs;
use crate::domain::rfc3339;
use crate::domain::wire::{Record, WaitingFor, WebhookState};
use crate::store::Task;

/// The record of `task`, with its images' URLs made by `blobs`: the fields every task has, its
/// parent and the parameters the caller gave, then its result in the fields of its shape.
/// `retention` (the node's setting) gives `expires_at`; once retention has removed the task's
/// images their URLs are left out, and text results stay.
pub fn task_record(task: &Task, blobs: &Blobs, retention: Option<Duration>) -> Record {
    let removed = task.data_removed();
    let mut result = task
        .output
        .as_ref()
        .filter(|o| !(removed && o.images() > 0))
        .map(|output| output.public_fields(&|key: &str| blobs.url(key)))
        .unwrap_or_default();
    // The record's own `seed` says a seed task's answer.
    let seed = result.seed.take().unwrap_or(task.seed);
    Record {
        task_id: task.id.clone(),
        task_type: task.task_type.as_str(),
        status: task.status.as_str(),
        percentage: task.percentage.to_string(),
        queue_position: None,
        // A running task whose backend failed waits for one again (`Tasks::record` says what a
        // waiting task waits for).
        waiting_for: task.retrying.as_ref().map(|_| WaitingFor::Backend),
        retrying: task.retrying.clone(),
        preview_image_url: task.preview_key.as_deref().map(|key| blobs.url(key)),
        prompt: task.prompt.clone(),
        parameters: task.extras.parameters.clone(),
        aspect_ratio: task.aspect_ratio.to_string(),
        process_mode: task.process_mode.as_str(),
        seed,
        created_at: rfc3339(task.created_at),
        expires_at: task.expires_at(retention).map(rfc3339),
        data_removed: removed,
        started_at: task.started_at.map(rfc3339),
        finished_at: task.finished_at.map(rfc3339),
        parent_task_id: task.parent_id.clone(),
        error: task.error.clone(),
        webhook: task.webhook.as_ref().map(|w| WebhookState {
            url: w.url.clone(),
            status: w.status.clone(),
            attempts: w.attempts,
            last_status_code: w.last_status_code,
            last_error: w.last_error.clone(),
            next_attempt_at: w
                .next_attempt_at
                .filter(|_| w.status == "pending")
                .map(rfc3339),
        }),
        webhook_events: task.extras.webhook_events,
        operation: {
            let mut fields = task
                .operation
                .as_ref()
                .map(|op| op.public_fields())
                .unwrap_or_default();
            let prompts = &task.extras.image_prompts;
            fields.image_prompts =
                (!prompts.is_empty()).then(|| prompts.iter().map(|p| p.url.clone()).collect());
            fields
        },
        result,
        actions: None,
        metadata: task.extras.metadata.clone(),
        // Written together when the task finished or failed.
        cost: task.usage.as_ref().map(|_| task.cost),
        usage: task.usage.clone(),
        settings: task.extras.settings.clone(),
    }
}
