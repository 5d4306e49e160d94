//! Progress deliveries: node-local, best effort, and kept apart from the final deliveries.
//!
//! A running task whose caller asked for `progress` in `webhook_events` gets a
//! [`ProgressSender`]. Each task has one small sender task that sends the latest state at most
//! once per [`PROGRESS_INTERVAL`] (a newer state replaces one not yet sent), one attempt each,
//! nothing stored. The requests go through a [`WebhookClient`] of their own (its own short
//! timeout and connection pool, the same destination checks, headers and signatures as final
//! deliveries), and at most `webhook_progress_concurrency` are in flight on the node: a state
//! that finds them all busy is dropped and counted, so a slow or hanging receiver of progress
//! events holds at most those slots and never the dispatcher's, nor another task's sender.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::client::{DeliveryRequest, WebhookClient};
use super::signing;
use crate::domain::{Metadata, OpKind};

/// Least time between two progress deliveries of one task (the contract's "once per second").
pub const PROGRESS_INTERVAL: Duration = Duration::from_secs(1);

/// The node's progress sender. Cheap to clone: clones share the client and the in-flight bound.
#[derive(Clone)]
pub struct ProgressHooks {
    client: WebhookClient,
    /// One permit per progress request in flight on this node.
    slots: Arc<Semaphore>,
}

impl std::fmt::Debug for ProgressHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProgressHooks")
            .field("client", &self.client)
            .field("free_slots", &self.slots.available_permits())
            .finish()
    }
}

/// Where one task's progress goes, and what its deliveries say of it.
#[derive(Clone)]
pub struct ProgressTarget {
    pub task_id: String,
    pub task_type: String,
    pub url: String,
    /// The caller's `webhook_secret`, sent as `x-webhook-secret` as on final deliveries.
    pub webhook_secret: Option<String>,
    /// The account's signing secret (`whsec_...`).
    pub signing_secret: String,
    pub metadata: Option<Metadata>,
}

impl std::fmt::Debug for ProgressTarget {
    // Never print the secrets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProgressTarget")
            .field("task_id", &self.task_id)
            .field("task_type", &self.task_type)
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

/// The body of a progress delivery (`webhook_events` with `progress`): signed, with
/// `x-webhook-secret`, like final deliveries, each with a fresh `webhook-id`. At most one a
/// second per task (a newer state replaces one not yet sent), one attempt within
/// `webhook_progress_timeout` (3 s), never retried, none after the final delivery is queued; at
/// most `webhook_progress_concurrency` (32) in flight per node, more are dropped.
#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = ProgressDelivery)]
pub struct ProgressPayload<'a> {
    #[schema(value_type = uuid::Uuid)]
    task_id: &'a str,
    #[schema(value_type = OpKind)]
    task_type: &'a str,
    /// Always `processing`.
    #[schema(pattern = "^processing$")]
    status: &'static str,
    /// 0 to 100, a string as in the task's record.
    #[schema(pattern = "^[0-9]{1,3}$")]
    percentage: String,
    /// When the backend gives a preview.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, format = "uri")]
    preview_image_url: Option<&'a str>,
    /// The caller's `metadata`, when given.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Object)]
    metadata: Option<&'a Metadata>,
}

/// A state offered by the worker.
#[derive(Clone, Debug, PartialEq)]
struct State {
    percentage: i64,
    preview_image_url: Option<String>,
}

impl ProgressHooks {
    /// `client` should be the progress deliveries' own (a short timeout); `max_in_flight` is
    /// the node's bound on progress requests in flight (at least 1).
    pub fn new(client: WebhookClient, max_in_flight: usize) -> ProgressHooks {
        ProgressHooks {
            client,
            slots: Arc::new(Semaphore::new(max_in_flight.max(1))),
        }
    }

    /// A sender for one running task; its sender task runs until [`ProgressSender::finish`] (or
    /// until the sender is dropped).
    pub fn task(&self, target: ProgressTarget) -> ProgressSender {
        let (latest, states) = watch::channel(None);
        let stop = CancellationToken::new();
        let run = Run {
            client: self.client.clone(),
            slots: self.slots.clone(),
            key: signing::decode_secret(&target.signing_secret),
            target,
        };
        let handle = tokio::spawn(run.run(states, stop.clone()));
        ProgressSender {
            latest,
            stop,
            handle: Some(handle),
        }
    }
}

/// One running task's progress deliveries.
pub struct ProgressSender {
    latest: watch::Sender<Option<State>>,
    stop: CancellationToken,
    handle: Option<JoinHandle<()>>,
}

impl ProgressSender {
    /// A newer state; sent at most once a second per task, a newer state replacing one not
    /// sent. Never waits.
    pub fn offer(&self, percentage: i64, preview_image_url: Option<String>) {
        let state = State {
            percentage: percentage.clamp(0, 100),
            preview_image_url,
        };
        self.latest.send_if_modified(|held| {
            let changed = held.as_ref() != Some(&state);
            *held = Some(state);
            changed
        });
    }

    /// Stop: after this returns nothing more is sent for the task (a request in flight is
    /// aborted). Call it before the final delivery is queued.
    pub async fn finish(mut self) {
        self.stop.cancel();
        if let Some(handle) = self.handle.take() {
            // The sender task only ends by returning; a panic in it is not ours to raise here.
            let _ = handle.await;
        }
    }
}

impl Drop for ProgressSender {
    /// A sender dropped without `finish` (a worker unwinding) stops its task too.
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The sender task of one running task.
struct Run {
    client: WebhookClient,
    slots: Arc<Semaphore>,
    /// The decoded signing key; an account secret that does not decode sends nothing.
    key: Result<Vec<u8>, String>,
    target: ProgressTarget,
}

impl Run {
    async fn run(self, mut states: watch::Receiver<Option<State>>, stop: CancellationToken) {
        // When the next delivery may start.
        let mut next = Instant::now();
        loop {
            tokio::select! {
                biased;
                _ = stop.cancelled() => return,
                changed = states.changed() => if changed.is_err() { return },
            }
            tokio::select! {
                biased;
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep_until(next) => {}
            }
            // The latest state, which may have replaced the one that woke us while we waited.
            let Some(state) = states.borrow_and_update().clone() else {
                continue;
            };
            next = Instant::now() + PROGRESS_INTERVAL;
            tokio::select! {
                biased;
                // Dropping the attempt's future closes its connection: nothing is sent after.
                _ = stop.cancelled() => return,
                () = self.deliver(&state) => {}
            }
        }
    }

    /// One attempt, or none when the node's progress slots are all busy.
    async fn deliver(&self, state: &State) {
        let Ok(key) = &self.key else {
            crate::metrics::webhook_progress("dropped");
            return;
        };
        let Ok(_slot) = self.slots.clone().try_acquire_owned() else {
            crate::metrics::webhook_progress("dropped");
            tracing::debug!(task_id = %self.target.task_id, "progress delivery dropped: in-flight bound reached");
            return;
        };
        let t = &self.target;
        let body = serde_json::to_vec(&ProgressPayload {
            task_id: &t.task_id,
            task_type: &t.task_type,
            status: "processing",
            percentage: state.percentage.to_string(),
            preview_image_url: state.preview_image_url.as_deref(),
            metadata: t.metadata.as_ref(),
        })
        .expect("progress payload serializes");
        // A fresh message id per delivery: each is its own event, never retried.
        let msg_id = format!("msg_{}", Uuid::now_v7().simple());
        let outcome = self
            .client
            .send(&DeliveryRequest {
                url: &t.url,
                body: &body,
                msg_id: &msg_id,
                timestamp: chrono::Utc::now().timestamp(),
                signing_key: key,
                secret_header: t.webhook_secret.as_deref(),
            })
            .await;
        crate::metrics::webhook_progress(if outcome.delivered {
            "delivered"
        } else {
            "failed"
        });
    }
}
