//! Waiting for a task to end (`Prefer: wait`, RFC 7240, read by `http::prefer`): a submit or `GET /api/v1/tasks/{task_id}` held until the task has
//! ended or the asked-for time has passed, then answered with the task's record. A waiting request
//! listens to its task in the store's [`TaskEvents`](crate::store::TaskEvents): it reads the task when it
//! starts and once more each time the task ends (on any node), and never polls.

use std::time::Duration;

use uuid::Uuid;

use super::Tasks;
use crate::auth::PresentedKey;
use crate::store::Task;

/// The wait served for one of `asked` seconds: at most the node's `max_wait`.
pub fn served(tasks: &Tasks, asked: u64) -> u64 {
    asked.min(tasks.config.limits.max_wait.as_secs())
}

/// `task` as it is once it has ended, or after `secs` seconds, or when the server starts shutting
/// down, whichever comes first. The task is read again with `key` after each of its ends is
/// announced. A read that fails ends the wait with the record last read: the task is there
/// whatever the store's trouble, and a submit's caller must learn its id.
pub async fn until_ended(
    tasks: &Tasks,
    key: &PresentedKey,
    id: &Uuid,
    mut task: Task,
    secs: u64,
) -> Task {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    // Listening before the read: an end announced from here on is kept for the wait below.
    let mut listener = tasks.store.wakeups().events.listen_task(task.seq, None);
    loop {
        if task.has_ended() {
            return task;
        }
        match tasks.store.task_for_key(&key.0, id).await {
            Ok(Some((_, Some(read)))) => task = read,
            Ok(_) => return task,
            Err(e) => {
                tracing::warn!(error = %e, "a waiting request could not read its task again");
                return task;
            }
        }
        if task.has_ended() {
            return task;
        }
        tokio::select! {
            _ = listener.ended() => {}
            _ = tokio::time::sleep_until(deadline) => return task,
            _ = tasks.shutdown.cancelled() => return task,
        }
    }
}
