//! The outbox dispatcher: claims due deliveries with a lease, sends them with bounded
//! concurrency, and records every attempt with the next state. Only claimed deliveries cost a
//! task; the rest wait in the database, however many there are.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::client::{DeliveryRequest, WebhookClient};
use super::{next_attempt_at, signing};
use crate::config::Config;
use crate::store::{now_ms, AttemptRecord, DueDelivery, Store, StoreResult};

fn poll_ms(config: &Config) -> i64 {
    config.poll_interval.as_millis() as i64
}

/// The longest a due delivery waits for more slots to free before a smaller claim is made.
const CLAIM_GATHER: Duration = Duration::from_millis(10);

#[derive(Clone)]
pub struct Dispatcher {
    pub store: Store,
    pub client: WebhookClient,
    pub config: Arc<Config>,
}

impl Dispatcher {
    /// A claimed delivery is ours for this long; after that another dispatcher may take it.
    fn lease_ms(&self) -> i64 {
        (self.config.webhook_timeout + Duration::from_secs(5)).as_millis() as i64
    }

    /// Send every delivery that is due now (up to `limit`) and wait for them. Returns how many
    /// were attempted. The single step tests and tools use to drive the outbox.
    pub async fn dispatch_due(&self, limit: usize) -> StoreResult<usize> {
        let due = self
            .store
            .claim_due_deliveries(limit as i64, self.lease_ms())
            .await?;
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

    /// Make one attempt and record it. Returns when the retry it scheduled is due, if it did.
    pub async fn attempt(&self, d: DueDelivery) -> Option<i64> {
        let span = tracing::info_span!("webhook", task_id = %d.task_id, delivery = %d.id,
            attempt = d.attempts + 1);
        async {
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
                    tracing::error!(error = %e, "account signing secret is unusable");
                    super::client::AttemptOutcome {
                        delivered: false,
                        status_code: None,
                        error: Some("the account's signing secret is unusable".into()),
                        duration: Duration::ZERO,
                    }
                }
            };
            let attempt_no = d.attempts + 1;
            // The attempt's end as recorded (start + duration), so the schedule in the
            // attempt records adds up exactly.
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
                    &self.config.webhook_retry_schedule,
                )
            };
            let record = AttemptRecord {
                attempted_at,
                duration_ms: outcome.duration.as_millis() as i64,
                status_code: outcome.status_code,
                error: outcome.error.clone(),
                delivered: outcome.delivered,
                next_attempt_at: next,
                first_failed_at,
            };
            let recorded = match self.store.record_attempt(&d.id, d.attempts, &record).await {
                Ok(recorded) => recorded,
                Err(e) => {
                    // The lease runs out and the delivery is attempted again: at least once.
                    tracing::error!(error = %e, "could not record the attempt");
                    return None;
                }
            };
            if !recorded {
                tracing::warn!("delivery changed while in flight; attempt not recorded");
                return None;
            }
            let error = outcome.error.as_deref().unwrap_or("");
            let status = outcome.status_code;
            if outcome.delivered {
                tracing::info!(
                    status,
                    duration_ms = record.duration_ms,
                    "webhook delivered"
                );
            } else if let Some(next) = next {
                tracing::warn!(
                    status,
                    error,
                    retry_in_ms = next - ended,
                    "webhook attempt failed"
                );
            } else {
                tracing::warn!(
                    status,
                    error,
                    "webhook undeliverable; the result stays available through fetch"
                );
            }
            next
        }
        .instrument(span)
        .await
    }

    /// Deliver until `shutdown`, then give in-flight attempts up to `shutdown_timeout` to end.
    /// Attempts cut off then are retried when their lease runs out (never lost).
    pub async fn run(self, wakeup: Arc<Notify>, shutdown: CancellationToken) {
        let concurrency = self.config.webhook_concurrency;
        let slots = Arc::new(Semaphore::new(concurrency));
        // Under load, slots free one at a time; claiming each alone would cost a writer
        // transaction per delivery. So claim once a quarter of the slots is free, or once
        // CLAIM_GATHER has passed since the last claim with fewer free.
        let batch_free = (concurrency / 4).max(1);
        let mut last_claim = Instant::now() - CLAIM_GATHER;
        // When the next delivery falls due, as last learned, and when that was learned. Trusted
        // for at most `poll_interval`: deliveries may be rescheduled from outside (another node,
        // an operator's SQL). None: maybe now.
        let mut next_due: Option<(i64, Instant)> = None;
        let mut in_flight = JoinSet::new();
        loop {
            while in_flight.try_join_next().is_some() {}
            let free = slots.available_permits();
            let gathering = free < batch_free && last_claim.elapsed() < CLAIM_GATHER;
            let nothing_due = next_due.is_some_and(|(t, learned)| {
                t > now_ms() && learned.elapsed() < self.config.poll_interval
            });
            if free > 0 && !gathering && !nothing_due {
                last_claim = Instant::now();
                match self
                    .store
                    .claim_due_deliveries(free as i64, self.lease_ms())
                    .await
                {
                    Ok(due) => {
                        let drained = due.len() < free;
                        for delivery in due {
                            let permit = slots.clone().try_acquire_owned().expect("free slot");
                            let this = self.clone();
                            let wakeup = wakeup.clone();
                            in_flight.spawn(async move {
                                // A retry it scheduled may be due before the loop would look.
                                if this.attempt(delivery).await.is_some() {
                                    wakeup.notify_one();
                                }
                                drop(permit);
                            });
                        }
                        next_due = if drained {
                            // Nothing else is due now: find out when something will be.
                            let due = match self.store.next_delivery_due().await {
                                Ok(Some(due)) => due.max(now_ms() + 5),
                                Ok(None) | Err(_) => now_ms() + poll_ms(&self.config),
                            };
                            Some((due, Instant::now()))
                        } else {
                            None
                        };
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "dispatcher could not reach the store");
                        next_due = Some((now_ms() + poll_ms(&self.config), Instant::now()));
                    }
                }
            }
            // Sleep until the next delivery is due and, with few slots free, until the gathering
            // time is over; a finishing attempt (with few slots free), new work or the polling
            // interval wakes the loop earlier.
            let free = slots.available_permits();
            let wait = if free == 0 {
                self.config.poll_interval
            } else {
                let until_due = next_due.map_or(Duration::ZERO, |(t, _)| {
                    Duration::from_millis((t - now_ms()).max(0) as u64)
                });
                let until_gathered = if free < batch_free {
                    CLAIM_GATHER.saturating_sub(last_claim.elapsed())
                } else {
                    Duration::ZERO
                };
                until_due
                    .max(until_gathered)
                    .max(Duration::from_millis(1))
                    .min(self.config.poll_interval)
            };
            tokio::select! {
                _ = wakeup.notified() => next_due = None,
                _ = tokio::time::sleep(wait) => {}
                Some(_) = in_flight.join_next(), if free < batch_free => {}
                _ = shutdown.cancelled() => break,
            }
        }
        let drained = tokio::time::timeout(self.config.shutdown_timeout, async {
            while in_flight.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                left = in_flight.len(),
                "shutdown timeout reached; unfinished deliveries will be retried after restart"
            );
            in_flight.shutdown().await;
        }
    }
}
