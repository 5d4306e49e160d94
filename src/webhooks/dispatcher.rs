//! The outbox dispatcher: claims due deliveries with a lease, sends them with bounded
//! concurrency, and records every attempt with the next state. Only claimed deliveries (at most
//! four times `webhook_concurrency`) are held in memory; the rest wait in the database, however
//! many there are.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, Mutex, Notify, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::client::{DeliveryRequest, WebhookClient};
use super::{next_attempt_at, signing};
use crate::config::Config;
use crate::store::{now_ms, AttemptRecord, DeliveryKind, DueDelivery, SharedStore, StoreResult};

/// When a delivery was queued: its id (`msg_` and a UUIDv7, made by the transaction that queued
/// it) carries the time.
fn queued_at(delivery_id: &str) -> Option<i64> {
    let uuid = uuid::Uuid::try_parse(delivery_id.strip_prefix("msg_")?).ok()?;
    let (secs, nanos) = uuid.get_timestamp()?.to_unix();
    Some(secs as i64 * 1000 + i64::from(nanos / 1_000_000))
}

fn poll_ms(config: &Config) -> i64 {
    config.worker.poll_interval.as_millis() as i64
}

/// The longest a due delivery waits for more slots to free before a smaller claim is made.
const CLAIM_GATHER: Duration = Duration::from_millis(10);

/// Claimed deliveries queued ahead of the senders, in rounds of `webhook_concurrency`. A claim
/// waits for a commit of the writer (1 to 5 ms with fsyncs, more under load), and the queue must
/// not run dry meanwhile: with one round, claimed when half of it was free, the senders found it
/// empty at about half the claims and easel sent 16,000 deliveries a second against the bare
/// client's 53,000 (`easel_bench --only webhooks`, 40,000 deliveries, `sync=full`).
const QUEUE_ROUNDS: usize = 2;

#[derive(Clone)]
pub struct Dispatcher {
    pub store: SharedStore,
    pub client: WebhookClient,
    pub config: Arc<Config>,
}

impl Dispatcher {
    /// A claimed delivery is ours for this long; after that another dispatcher may take it.
    /// Long enough to wait in the queue for `QUEUE_ROUNDS` rounds of attempts that all take the
    /// whole timeout, then be sent and recorded.
    fn lease_ms(&self) -> i64 {
        let rounds = QUEUE_ROUNDS as u32 + 1;
        (rounds * self.config.webhooks.timeout + Duration::from_secs(5)).as_millis() as i64
    }

    /// Send every delivery that is due now (up to `limit`) and wait for them. Returns how many
    /// were attempted. The single step tests and tools use to drive the outbox.
    pub async fn dispatch_due(&self, limit: usize) -> StoreResult<usize> {
        let due = self.claim(limit).await?;
        let count = due.len();
        let mut set = JoinSet::new();
        for delivery in due {
            let this = self.clone();
            set.spawn(async move {
                this.attempt(delivery).await;
            });
        }
        while set.join_next().await.is_some() {}
        Ok(count)
    }

    /// Claim up to `limit` due deliveries: the tasks' first, then, with room left (their outbox
    /// drained), the account events'.
    async fn claim(&self, limit: usize) -> StoreResult<Vec<DueDelivery>> {
        let lease_ms = self.lease_ms();
        let mut due = self
            .store
            .claim_due_deliveries(limit as i64, lease_ms)
            .await?;
        let room = limit.saturating_sub(due.len());
        if room > 0 {
            due.extend(
                self.store
                    .claim_account_deliveries(room as i64, lease_ms)
                    .await?,
            );
        }
        Ok(due)
    }

    /// When the next delivery of either outbox falls due.
    async fn next_due(&self) -> StoreResult<Option<i64>> {
        let task = self.store.next_delivery_due().await?;
        let account = self.store.next_account_delivery_due().await?;
        Ok(task.into_iter().chain(account).min())
    }

    /// Make one attempt and record it. Returns when the retry it scheduled is due, if it did.
    pub async fn attempt(&self, d: DueDelivery) -> Option<i64> {
        let record = self.send(&d).await;
        self.record(&d, record).await
    }

    /// Send one attempt; what to record of it.
    async fn send(&self, d: &DueDelivery) -> AttemptRecord {
        let attempted_at = now_ms();
        let outcome = match signing::decode_secret(&d.signing_secret) {
            Ok(key) => {
                self.client
                    .send(&DeliveryRequest {
                        url: &d.url,
                        body: d.payload.as_bytes(),
                        msg_id: &d.id,
                        timestamp: attempted_at / 1000,
                        signing_key: &key,
                        secret_header: d.webhook_secret.as_deref(),
                    })
                    .await
            }
            Err(e) => {
                tracing::error!(task_id = d.task_id, delivery = d.id, error = %e,
                    "account signing secret is unusable");
                super::client::AttemptOutcome {
                    delivered: false,
                    status_code: None,
                    error: Some("the account's signing secret is unusable".into()),
                    duration: Duration::ZERO,
                }
            }
        };
        let attempt_no = d.attempts + 1;
        // The attempt's end as recorded (start + duration), so the schedule in the attempt
        // records adds up exactly.
        let ended = attempted_at + outcome.duration.as_millis() as i64;
        let first_failed_at = match (outcome.delivered, d.first_failed_at) {
            (_, Some(t)) => Some(t),
            (false, None) => Some(ended),
            (true, None) => None,
        };
        let next = if outcome.delivered {
            None
        } else {
            next_attempt_at(
                attempt_no,
                first_failed_at.unwrap_or(ended),
                &self.config.webhooks.retry_schedule,
            )
        };
        AttemptRecord {
            attempted_at,
            duration_ms: outcome.duration.as_millis() as i64,
            status_code: outcome.status_code,
            error: outcome.error,
            delivered: outcome.delivered,
            next_attempt_at: next,
            first_failed_at,
        }
    }

    /// Record an attempt (group-committed with others) and log its outcome. Returns when the
    /// retry it scheduled is due, if it did.
    ///
    /// Every attempt is a row of `webhook_attempts` (served by the API), so a delivery logs only
    /// at `debug`; failures log at `warn`. The lines name the task, the delivery and the attempt
    /// themselves: a span per attempt cost its three fields' formatting on every delivery.
    async fn record(&self, d: &DueDelivery, record: AttemptRecord) -> Option<i64> {
        let attempt = d.attempts + 1;
        let recorded = match self.write_record(d, &record).await {
            Ok(recorded) => recorded,
            Err(e) => {
                crate::metrics::store_error("dispatcher", e.kind());
                // The lease runs out and the delivery is attempted again: at least once.
                tracing::error!(task_id = d.task_id, delivery = d.id, attempt, error = %e,
                    "could not record the webhook attempt; it is sent again once its lease runs out");
                return None;
            }
        };
        if !recorded {
            tracing::warn!(
                task_id = d.task_id,
                delivery = d.id,
                attempt,
                "webhook delivery changed while in flight; attempt not recorded"
            );
            return None;
        }
        let lag = record
            .delivered
            .then(|| queued_at(&d.id))
            .flatten()
            .map(|queued| {
                Duration::from_millis(
                    (record.attempted_at + record.duration_ms - queued).max(0) as u64
                )
            });
        crate::metrics::webhook_attempt(record.delivery_status(), lag);
        let error = record.error.as_deref().unwrap_or("");
        let status = record.status_code;
        let ended = record.attempted_at + record.duration_ms;
        if record.delivered {
            tracing::debug!(
                task_id = d.task_id,
                delivery = d.id,
                attempt,
                status,
                duration_ms = record.duration_ms,
                "webhook delivered"
            );
        } else {
            // One event for both failures; `retry_in_ms` is left out when none follows.
            let (retry_in_ms, message) = match record.next_attempt_at {
                Some(next) => (Some(next - ended), "webhook attempt failed"),
                None => (
                    None,
                    "webhook undeliverable; the result stays available through fetch",
                ),
            };
            tracing::warn!(
                task_id = d.task_id,
                delivery = d.id,
                attempt,
                status,
                error,
                retry_in_ms,
                "{message}"
            );
        }
        record.next_attempt_at
    }

    /// Write the attempt's record, again while the store refuses it (a database restarting or
    /// out of space), until shortly before the delivery's lease runs out: the attempt was made,
    /// and a record written late spares the receiver a second copy. Should the lease run out
    /// first, the delivery is claimed and sent again: retried, never lost.
    async fn write_record(&self, d: &DueDelivery, record: &AttemptRecord) -> StoreResult<bool> {
        const MARGIN_MS: i64 = 1000;
        let mut wait = Duration::from_millis(50);
        let mut logged = false;
        loop {
            let written = match d.kind {
                DeliveryKind::Task => self.store.record_attempt(d, record).await,
                DeliveryKind::Account => self.store.record_account_attempt(d, record).await,
            };
            match written {
                Err(e) if now_ms() + (wait.as_millis() as i64) + MARGIN_MS < d.lease_until => {
                    if !logged {
                        tracing::warn!(task_id = d.task_id, delivery = d.id, error = %e,
                            "could not record the webhook attempt; writing it again shortly");
                        logged = true;
                    }
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_secs(2));
                }
                written => return written,
            }
        }
    }

    /// Deliver until `shutdown`, then give attempts in flight up to `shutdown_timeout` to end.
    /// Attempts cut off then are retried when their lease runs out (never lost); claimed
    /// deliveries not yet sent are handed back at once.
    ///
    /// Three stages, so that no delivery waits for a round trip to the store that is not its own:
    /// this loop claims due deliveries into a queue of `QUEUE_ROUNDS` rounds ahead of the senders;
    /// senders (twice as many as may send at once) each take one from the queue when a sending
    /// slot is free, send it, free the slot, then wait for its record's group commit.
    pub async fn run(self, shutdown: CancellationToken) {
        let store = self.store.clone();
        // Woken by the store when a delivery is queued or made due again, on any node.
        let wakeup = &store.wakeups().outbox;
        let concurrency = self.config.webhooks.concurrency;
        let capacity = concurrency * QUEUE_ROUNDS;
        let (queue, claimed) = mpsc::channel::<DueDelivery>(capacity);
        let claimed = Arc::new(Mutex::new(claimed));
        let slots = Arc::new(Semaphore::new(concurrency));
        // Wakes this loop when there is room for a claim.
        let room = Arc::new(Notify::new());
        // Claim once half a round is free, or once CLAIM_GATHER has passed since the last claim
        // with less free: each claim is a statement of the writer, so claiming one delivery at a
        // time as the senders take them would cost one per delivery.
        let claim_at = (concurrency / 2).max(1);
        let mut senders = JoinSet::new();
        for _ in 0..concurrency * 2 {
            let sender = Sender {
                dispatcher: self.clone(),
                claimed: claimed.clone(),
                slots: slots.clone(),
                room: room.clone(),
                notify_at: capacity - claim_at,
                shutdown: shutdown.clone(),
            };
            senders.spawn(sender.run());
        }
        let mut last_claim = Instant::now() - CLAIM_GATHER;
        // When the next delivery falls due, as last learned, and when that was learned. Trusted
        // for at most `poll_interval`: deliveries may be rescheduled from outside (another node,
        // an operator's SQL). None: maybe now.
        let mut next_due: Option<(i64, Instant)> = None;
        while !shutdown.is_cancelled() {
            let free = queue.capacity();
            let gathering = free < claim_at && last_claim.elapsed() < CLAIM_GATHER;
            let nothing_due = next_due.is_some_and(|(t, learned)| {
                t > now_ms() && learned.elapsed() < self.config.worker.poll_interval
            });
            if free > 0 && !gathering && !nothing_due {
                last_claim = Instant::now();
                match self.claim(free).await {
                    Ok(due) => {
                        let drained = due.len() < free;
                        for delivery in due {
                            // Room for `free` was there, and only this loop adds to the queue.
                            queue.try_send(delivery).expect("room in the queue");
                        }
                        next_due = if drained {
                            // Nothing else is due now: find out when something will be.
                            let due = match self.next_due().await {
                                Ok(Some(due)) => due.max(now_ms() + 5),
                                Ok(None) | Err(_) => now_ms() + poll_ms(&self.config),
                            };
                            Some((due, Instant::now()))
                        } else {
                            None
                        };
                    }
                    Err(e) => {
                        crate::metrics::store_error("dispatcher", e.kind());
                        tracing::error!(error = %e, "dispatcher could not reach the store");
                        next_due = Some((now_ms() + poll_ms(&self.config), Instant::now()));
                    }
                }
            }
            // Sleep until the next delivery is due and, with little room in the queue, until the
            // gathering time is over; the queue running down, new work or the polling interval
            // wakes the loop earlier.
            let free = queue.capacity();
            let wait = if free == 0 {
                self.config.worker.poll_interval
            } else {
                let until_due = next_due.map_or(Duration::ZERO, |(t, _)| {
                    Duration::from_millis((t - now_ms()).max(0) as u64)
                });
                let until_gathered = if free < claim_at {
                    CLAIM_GATHER.saturating_sub(last_claim.elapsed())
                } else {
                    Duration::ZERO
                };
                until_due
                    .max(until_gathered)
                    .max(Duration::from_millis(1))
                    .min(self.config.worker.poll_interval)
            };
            tokio::select! {
                _ = wakeup.notified() => next_due = None,
                _ = room.notified(), if free < claim_at => {}
                _ = tokio::time::sleep(wait) => {}
                _ = shutdown.cancelled() => {}
            }
        }

        // No more claims. The senders saw the same cancellation and take nothing more from the
        // queue; those sending get the shutdown timeout.
        drop(queue);
        let drained = tokio::time::timeout(self.config.server.shutdown_timeout, async {
            while senders.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                left = senders.len(),
                "shutdown timeout reached; unfinished deliveries will be retried after restart"
            );
            senders.shutdown().await;
        }
        // What was claimed but never sent goes back now rather than when its lease runs out.
        let mut unsent = Vec::new();
        let mut claimed = claimed.lock().await;
        while let Ok(delivery) = claimed.try_recv() {
            unsent.push(delivery);
        }
        if !unsent.is_empty() {
            let (tasks, accounts): (Vec<DueDelivery>, Vec<DueDelivery>) = unsent
                .into_iter()
                .partition(|d| d.kind == DeliveryKind::Task);
            let released = async {
                let tasks = self.store.release_deliveries(&tasks).await?;
                let accounts = self.store.release_account_deliveries(&accounts).await?;
                StoreResult::Ok(tasks + accounts)
            };
            let unsent = tasks.len() + accounts.len();
            match released.await {
                Ok(released) => {
                    tracing::info!(released, "handed back claimed deliveries not yet sent")
                }
                Err(e) => tracing::warn!(
                    error = %e,
                    unsent,
                    "could not hand back claimed deliveries; they are sent once their lease runs out"
                ),
            }
        }
    }
}

/// One of the dispatcher's senders: takes a claimed delivery from the queue when a sending slot
/// is free, sends it, and waits for its record while another sender uses the slot.
struct Sender {
    dispatcher: Dispatcher,
    claimed: Arc<Mutex<mpsc::Receiver<DueDelivery>>>,
    slots: Arc<Semaphore>,
    room: Arc<Notify>,
    /// At or below this many queued, the claim loop is told there is room to claim.
    notify_at: usize,
    shutdown: CancellationToken,
}

impl Sender {
    async fn run(self) {
        loop {
            // A slot first, then a delivery: what leaves the queue is sent at once, so a queued
            // delivery waits for at most one round of attempts (its lease allows for that).
            let slot = tokio::select! {
                biased;
                _ = self.shutdown.cancelled() => return,
                slot = self.slots.acquire() => slot.expect("slots never close"),
            };
            let delivery = tokio::select! {
                biased;
                _ = self.shutdown.cancelled() => return,
                delivery = self.next() => delivery,
            };
            let Some(delivery) = delivery else { return };
            let d = &self.dispatcher;
            let record = d.send(&delivery).await;
            drop(slot);
            // A retry it scheduled may be due before the claim loop would look.
            if d.record(&delivery, record).await.is_some() {
                d.store.wakeups().outbox.notify_one();
            }
        }
    }

    /// The next claimed delivery; None once the claim loop has stopped and the queue is empty.
    async fn next(&self) -> Option<DueDelivery> {
        let mut claimed = self.claimed.lock().await;
        let delivery = claimed.recv().await;
        if claimed.len() <= self.notify_at {
            self.room.notify_one();
        }
        delivery
    }
}
