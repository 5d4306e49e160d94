//! The use cases on tasks: submit, read, list, wait, cancel. The API's handlers, the dashboard's
//! views and (through the API) the CLI call these same functions; they know the store, the blob
//! store, the backends' pool and the URL policies, and nothing of HTTP.

pub mod body;
pub mod cancel;
pub mod event_memo;
pub mod events;
pub mod idempotency;
pub mod in_progress;
pub mod list;
pub mod moderation;
pub mod queue_position;
pub mod record;
pub mod streams;
pub mod submit;
pub mod upload;
pub mod wait;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::auth::PresentedKey;
use crate::blobs::Blobs;
use crate::config::Config;
use crate::domain::actions::Offer;
use crate::domain::ContentPolicy;
use crate::generate::pool::Pool;
use crate::generate::Generator;
use crate::images::inputs::{DecodeBudget, ImageFetcher};
use crate::net::DestinationPolicy;
use crate::refusal::ApiError;
use crate::store::{LiveKey, SharedStore, Task};
use crate::telemetry::request;

/// What the use cases work with.
pub struct Tasks {
    pub config: Arc<Config>,
    pub store: SharedStore,
    /// Where images are kept: records make their URLs from their keys.
    pub blobs: Blobs,
    /// The image backends: submits of an operation none of them can run are refused.
    pub pool: Arc<Pool>,
    /// Checks callers' input image URLs at submit (workers fetch them).
    pub fetcher: ImageFetcher,
    /// The decode memory budget of callers' images checked at submit (uploads, `data:` URLs):
    /// a quarter of `decode_memory_budget`, beside the workers' own.
    pub upload_budget: DecodeBudget,
    /// The uploads being checked on this node, by account.
    pub uploads_in_progress: Arc<in_progress::InProgress>,
    /// Where webhooks may be sent.
    pub destinations: DestinationPolicy,
    pub content_policy: ContentPolicy,
    /// Cancelled when the process starts shutting down: submits are refused, waits end.
    pub shutdown: CancellationToken,
    /// The submits with an `Idempotency-Key` in flight on this node.
    pub idempotency: Arc<idempotency::InFlight>,
    /// Where waiting tasks stand in line.
    pub line: queue_position::QueueLine,
    /// The event streams open on this node, under their limits.
    pub streams: Arc<streams::Streams>,
    /// The moderation lists, as this node has them.
    pub moderation: Arc<moderation::Moderation>,
    /// Each plan's `max_pending`, made once per version of the settings: submits are a hot
    /// path.
    pub pending: crate::config::Live<crate::store::PendingLimits>,
    /// The plans now (a reload replaces them; `config.plans` is what the node started with).
    pub plans: Arc<crate::config::Live<crate::config::Plans>>,
}

impl Tasks {
    /// One of the key's account's tasks, the key checked in the same statement: 401 for a key
    /// that is not live, 404 for a task that is not the account's.
    /// The request's access log names the task.
    pub async fn one(&self, key: &PresentedKey, id: Uuid) -> Result<Task, ApiError> {
        request::note_task(id);
        self.of_key(key, id).await
    }

    /// [`Tasks::one`] without naming the task in the access log (a submit's parent: the log
    /// names the task submitted).
    pub(crate) async fn of_key(&self, key: &PresentedKey, id: Uuid) -> Result<Task, ApiError> {
        let found = self.store.task_for_key(&key.0, &id).await?;
        self.key_live(key, found)?.ok_or(ApiError::TaskNotFound)
    }

    /// The key's account's tasks among `ids` (in no particular order), the key checked in the
    /// same statement: 401 for a key that is not live.
    pub async fn many_of_key(
        &self,
        key: &PresentedKey,
        ids: &[Uuid],
    ) -> Result<Vec<Task>, ApiError> {
        let found = self.store.tasks_for_key(&key.0, ids).await?;
        self.key_live(key, found)
    }

    /// What a read checked with the key found: 401 when the key was not live; otherwise the
    /// key's use is noted.
    fn key_live<T>(&self, key: &PresentedKey, found: Option<(LiveKey, T)>) -> Result<T, ApiError> {
        let (live, found) = found.ok_or(ApiError::Unauthorized)?;
        key.used(&self.store, &live);
        Ok(found)
    }

    /// The record of `task` as callers see it, with its place in line while it waits.
    pub async fn record(&self, task: &Task) -> crate::domain::wire::Record {
        let mut record = self.record_now(task);
        let (position, waiting_for) = self.line.place(task, || self.backend_up(task)).await;
        record.queue_position = position;
        record.waiting_for = waiting_for.or(record.waiting_for);
        record
    }

    /// Whether a backend that runs `task` is up on this node now.
    fn backend_up(&self, task: &Task) -> bool {
        self.pool
            .runs_now(task.task_type, task.extras.settings.model.as_deref())
    }

    /// The records of `tasks`, in order, as [`Tasks::record`] makes them.
    pub async fn records<T: std::borrow::Borrow<Task>>(
        &self,
        tasks: &[T],
    ) -> Vec<crate::domain::wire::Record> {
        let positions = if tasks.iter().any(|t| queue_position::waits(t.borrow())) {
            Some(self.line.positions().await)
        } else {
            None
        };
        tasks
            .iter()
            .map(|task| {
                let task = task.borrow();
                let mut record = self.record_now(task);
                if let Some(line) = positions.as_ref().filter(|_| queue_position::waits(task)) {
                    record.queue_position = line.get(&task.seq).copied();
                    let up = self.backend_up(task);
                    record.waiting_for = Some(queue_position::waiting_for(task, line, up));
                }
                record
            })
            .collect()
    }

    /// The record of `task` with the follow-ups it offers now, without its place in line.
    pub fn record_now(&self, task: &Task) -> crate::domain::wire::Record {
        let mut record = record::task_record(task, &self.blobs, self.config.retention.keep);
        if let Some(output) = task.output.as_ref().filter(|_| !task.data_removed()) {
            let actions = self.offer(task, output, |o| o.actions());
            record.actions = Some(actions).filter(|a| !a.is_empty());
        }
        record
    }

    /// What `task`, which made `output`, offers now (`what` of its [`Offer`]), with the
    /// backends this node has.
    pub fn offer<T>(
        &self,
        task: &Task,
        output: &crate::domain::Output,
        what: impl FnOnce(&Offer) -> T,
    ) -> T {
        what(&Offer {
            task_id: &task.id,
            kind: task.task_type,
            output,
            can_run: &|kind| self.pool.supports(kind),
            max_side: crate::domain::operation::FOLLOW_UP_MAX_SIDE,
        })
    }
}

/// For the tests of the reads shared by event streams (`event_memo`, `queue_position`).
#[cfg(test)]
pub(crate) mod shared_read_tests;
