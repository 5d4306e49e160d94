//! The webhook outbox's values: a due delivery, an attempt's record and what follows from it, the
//! attempts as listed, when a result may be sent again, and the destinations whose attempts
//! fail.

use crate::domain::TaskStatus;

/// A delivery that is due, with what the dispatcher needs to send it.
#[derive(Clone, Debug)]
pub struct DueDelivery {
    pub id: String,
    pub task_id: String,
    pub url: String,
    pub payload: String,
    /// Attempts made so far in the current schedule; the record of this attempt is fenced by it.
    pub attempts: i64,
    pub first_failed_at: Option<i64>,
    pub webhook_secret: Option<String>,
    pub signing_secret: String,
    /// When the claim's lease runs out; the claim is handed back only while it still holds it.
    pub lease_until: i64,
    /// Which outbox it was claimed from, so that its record goes back there.
    pub kind: DeliveryKind,
}

/// A claimed delivery as a claim's query reads it: id, task id, url, attempts,
/// first_failed_at, webhook_secret, lease_until, payload, signing_secret.
pub(crate) type ClaimedRow = (
    String,
    String,
    String,
    i64,
    Option<i64>,
    Option<String>,
    i64,
    String,
    String,
);

impl DueDelivery {
    /// A row of a claim's query, claimed from `kind`'s outbox.
    pub(crate) fn claimed(row: ClaimedRow, kind: DeliveryKind) -> DueDelivery {
        let (
            id,
            task_id,
            url,
            attempts,
            first_failed_at,
            webhook_secret,
            lease_until,
            payload,
            signing_secret,
        ) = row;
        DueDelivery {
            id,
            task_id,
            url,
            payload,
            attempts,
            first_failed_at,
            webhook_secret,
            signing_secret,
            lease_until,
            kind,
        }
    }
}

/// The two outboxes: task deliveries (a task's own webhook, or its account webhook's
/// `task.finished`/`task.failed`), and account events that belong to no task (`credits.low`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeliveryKind {
    Task,
    Account,
}

/// The result of one attempt and what follows from it.
#[derive(Clone, Debug)]
pub struct AttemptRecord {
    pub attempted_at: i64,
    pub duration_ms: i64,
    pub status_code: Option<u16>,
    pub error: Option<String>,
    pub delivered: bool,
    /// When the next attempt is due; None with `delivered == false` means undeliverable.
    pub next_attempt_at: Option<i64>,
    /// When the initial attempt of this schedule failed.
    pub first_failed_at: Option<i64>,
}

impl AttemptRecord {
    /// The delivery's status once this attempt is recorded.
    pub fn delivery_status(&self) -> &'static str {
        if self.delivered {
            "delivered"
        } else if self.next_attempt_at.is_some() {
            "pending"
        } else {
            "undeliverable"
        }
    }
}

/// One recorded attempt, as the API lists it.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct AttemptRow {
    pub attempted_at: i64,
    pub duration_ms: i64,
    pub status_code: Option<i64>,
    pub error: Option<String>,
    pub next_attempt_at: Option<i64>,
}

/// What `redeliver` found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Redelivery {
    Queued,
    TaskNotFound,
    NotFinal,
    NoWebhook,
    /// Ended with an event left out of its `webhook_events`: it queued no delivery to send again.
    NotRequested,
}

impl Redelivery {
    /// Whether a task in `status`, with a webhook or not, may have its result sent again; `Queued`
    /// when it may.
    pub fn decide(status: TaskStatus, has_webhook: bool) -> Redelivery {
        if !has_webhook {
            Redelivery::NoWebhook
        } else if status.is_final() {
            Redelivery::Queued
        } else {
            Redelivery::NotFinal
        }
    }
}

/// A webhook destination whose recent attempts fail.
#[derive(Clone, Debug)]
pub struct FailingDestination {
    pub host: String,
    pub failures: i64,
    /// Distinct deliveries among them.
    pub deliveries: i64,
    pub last_failed_at: i64,
    pub last_status_code: Option<i64>,
    pub last_error: Option<String>,
}

/// How many of the latest webhook attempts `failing_destinations` looks at, at most: it reads
/// them newest first by id and groups in memory, so its cost stays bounded.
pub const FAILING_SCAN_MAX: i64 = 20_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_final_task_with_a_webhook_is_redelivered() {
        use TaskStatus::*;
        assert_eq!(Redelivery::decide(Finished, true), Redelivery::Queued);
        assert_eq!(Redelivery::decide(Failed, true), Redelivery::Queued);
        assert_eq!(Redelivery::decide(Canceled, true), Redelivery::Queued);
        assert_eq!(Redelivery::decide(Processing, true), Redelivery::NotFinal);
        assert_eq!(Redelivery::decide(Finished, false), Redelivery::NoWebhook);
    }
}
