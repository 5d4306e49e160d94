//! Canceling a task that has not ended: its end written at once (status, refund, webhook), the
//! worker that holds it told to stop, on any node.

use uuid::Uuid;

use super::Tasks;
use crate::domain::{Outcome, PayloadHead, TaskStatus};
use crate::store::{Ending, StoreResult, Task};

/// Cancel the account's task `id`, for the API and the dashboard alike: None when it is not the
/// account's, else whether this call canceled it, and the task as it is now.
pub async fn cancel_task(
    tasks: &Tasks,
    account_id: &str,
    id: &Uuid,
) -> StoreResult<Option<(bool, Task)>> {
    let Some(task) = tasks.store.task_for_account(account_id, id).await? else {
        return Ok(None);
    };
    let ending = canceled(tasks, &task);
    let canceled = tasks.store.cancel_task(task.seq, &ending).await?;
    if canceled {
        let operation = task.task_type.as_str();
        crate::metrics::task_ended(operation, TaskStatus::Canceled.as_str());
        tracing::info!("task canceled by its caller");
    }
    let now = tasks.store.task_for_account(account_id, id).await?;
    Ok(now.map(|task| (canceled, task)))
}

/// The end of a canceled task, with the webhook body a canceled task sends.
fn canceled(tasks: &Tasks, task: &Task) -> Ending {
    let fields = task
        .operation
        .as_ref()
        .map(|op| op.public_fields())
        .unwrap_or_default();
    let head = PayloadHead {
        task_id: &task.id,
        task_type: task.task_type.as_str(),
        parent_task_id: task.parent_id.as_deref(),
        fields,
        metadata: task.extras.metadata.as_ref(),
        actions: Vec::new(),
        webhook_events: task.extras.webhook_events,
        cost: None,
        usage: None,
    };
    Ending::new(Outcome::Canceled, &head, &|key| tasks.blobs.url(key))
}
