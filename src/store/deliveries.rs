use std::collections::HashSet;

use futures::future::BoxFuture;
use sqlx::{FromRow, SqliteConnection};
use uuid::Uuid;

use super::ids::TaskKey;
use super::tasks::by_id;
use super::{now_ms, Store, StoreResult};

/// A delivery that is due, with what the dispatcher needs to send it.
#[derive(Clone, Debug, FromRow)]
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

/// One recorded attempt, as the API lists it.
#[derive(Clone, Debug, FromRow)]
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
}

impl Store {
    /// Claim up to `limit` due deliveries for `lease_ms`. A delivery whose dispatcher died is
    /// claimed again once its lease runs out, so nothing is lost (it may be sent twice).
    pub async fn claim_due_deliveries(
        &self,
        limit: i64,
        lease_ms: i64,
    ) -> StoreResult<Vec<DueDelivery>> {
        let now = now_ms();
        // One statement, so claiming costs one round trip however many rows it takes.
        Ok(sqlx::query_as(
            "UPDATE webhook_deliveries SET lease_until = ?2
             WHERE id IN (SELECT id FROM webhook_deliveries
                          WHERE status = 'pending' AND next_attempt_at <= ?1
                            AND (lease_until IS NULL OR lease_until <= ?1)
                          ORDER BY next_attempt_at LIMIT ?3)
             RETURNING id, task_id, url, payload, attempts, first_failed_at, webhook_secret,
                 (SELECT signing_secret FROM accounts a
                  WHERE a.id = webhook_deliveries.account_id) AS signing_secret, lease_until",
        )
        .bind(now)
        .bind(now + lease_ms)
        .bind(limit)
        .fetch_all(&self.writer)
        .await?)
    }

    /// Record an attempt and the delivery's next state, fenced by the attempt count seen at claim.
    pub async fn record_attempt(
        &self,
        delivery_id: &str,
        claimed_attempts: i64,
        record: &AttemptRecord,
    ) -> StoreResult<bool> {
        self.attempts
            .write(RecordAttempt {
                delivery_id: delivery_id.to_string(),
                claimed_attempts,
                record: record.clone(),
            })
            .await
    }

    /// Hand back claimed deliveries that were not attempted, so that they are due again at once
    /// instead of when their lease runs out. A delivery claimed again since (its lease ran out)
    /// is left alone. Returns how many were handed back.
    pub async fn release_deliveries(&self, claimed: &[DueDelivery]) -> StoreResult<u64> {
        let leases: Vec<(&str, i64)> = claimed
            .iter()
            .map(|d| (d.id.as_str(), d.lease_until))
            .collect();
        let done = sqlx::query(
            "UPDATE webhook_deliveries SET lease_until = NULL
             FROM (SELECT value->>0 AS id, value->>1 AS lease_until FROM json_each(?)) AS v
             WHERE webhook_deliveries.id = v.id AND webhook_deliveries.lease_until = v.lease_until
               AND webhook_deliveries.status = 'pending'",
        )
        .bind(super::batch::to_json(&leases))
        .execute(&self.writer)
        .await?;
        Ok(done.rows_affected())
    }

    /// When the next delivery that is not in flight becomes due. Walks the due index from its
    /// start, skipping only deliveries whose lease is still running (at most the dispatchers'
    /// concurrency), so it stays cheap however large the outbox grows.
    pub async fn next_delivery_due(&self) -> StoreResult<Option<i64>> {
        Ok(sqlx::query_scalar(
            "SELECT next_attempt_at FROM webhook_deliveries
             WHERE status = 'pending' AND (lease_until IS NULL OR lease_until <= ?)
             ORDER BY next_attempt_at LIMIT 1",
        )
        .bind(now_ms())
        .fetch_optional(&self.reader)
        .await?)
    }

    /// Every recorded attempt to deliver the task's result, oldest first; None when the task is
    /// not the account's.
    pub async fn delivery_attempts(
        &self,
        account_id: &str,
        task_id: &Uuid,
    ) -> StoreResult<Option<Vec<AttemptRow>>> {
        let TaskKey { seq, legacy } = self.ids.key(task_id);
        let owned: Option<i64> = sqlx::query_scalar(&format!(
            "SELECT t.seq FROM tasks t WHERE {} AND t.account_id = ?3",
            by_id(1, 2)
        ))
        .bind(seq)
        .bind(legacy)
        .bind(account_id)
        .fetch_optional(&self.reader)
        .await?;
        let Some(seq) = owned else {
            return Ok(None);
        };
        Ok(Some(
            sqlx::query_as(
                "SELECT a.attempted_at, a.duration_ms, a.status_code, a.error, a.next_attempt_at
                 FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id
                 WHERE d.task_seq = ? ORDER BY a.id",
            )
            .bind(seq)
            .fetch_all(&self.reader)
            .await?,
        ))
    }

    /// Start a fresh delivery schedule for a task's result.
    pub async fn redeliver(&self, account_id: &str, task_id: &Uuid) -> StoreResult<Redelivery> {
        let TaskKey { seq, legacy } = self.ids.key(task_id);
        let mut tx = self.writer.begin().await?;
        let task: Option<(i64, String, Option<String>)> = sqlx::query_as(&format!(
            "SELECT t.seq, t.status, t.webhook_url FROM tasks t WHERE {} AND t.account_id = ?3",
            by_id(1, 2)
        ))
        .bind(seq)
        .bind(legacy)
        .bind(account_id)
        .fetch_optional(&mut *tx)
        .await?;
        let result = match task {
            None => Redelivery::TaskNotFound,
            Some((_, _, None)) => Redelivery::NoWebhook,
            Some((_, status, Some(_))) if status != "finished" && status != "failed" => {
                Redelivery::NotFinal
            }
            Some((seq, _, Some(_))) => {
                let now = now_ms();
                sqlx::query(
                    "UPDATE webhook_deliveries SET status = 'pending', attempts = 0,
                         next_attempt_at = ?, first_failed_at = NULL, lease_until = NULL,
                         updated_at = ?
                     WHERE task_seq = ?",
                )
                .bind(now)
                .bind(now)
                .bind(seq)
                .execute(&mut *tx)
                .await?;
                Redelivery::Queued
            }
        };
        tx.commit().await?;
        Ok(result)
    }
}

/// An attempt's record and the delivery's next state, for the group-commit batcher.
pub(super) struct RecordAttempt {
    delivery_id: String,
    claimed_attempts: i64,
    record: AttemptRecord,
}

/// Parameters bound per attempt record, in this order: delivery_id, claimed_attempts, status,
/// attempted_at, duration_ms, status_code, error, next_attempt_at, first_failed_at.
const RECORD_PARAMS: usize = 9;

/// Record statements for chunks of 1, 2, 4, ... 256 attempts (see `batch::chunks`): the
/// attempt rows, then the fenced update of the deliveries, both reading the same numbered
/// parameters as the table `v`; the last parameter is the time of the update.
static RECORD_CHUNKS: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| {
    super::batch::statements_per_chunk(|n| {
        let rows: Vec<String> = (0..n)
            .map(|i| {
                let params: Vec<String> = (1..=RECORD_PARAMS)
                    .map(|p| format!("?{}", i * RECORD_PARAMS + p))
                    .collect();
                format!("({i}, {})", params.join(", "))
            })
            .collect();
        let v = format!(
            "WITH v(pos, delivery_id, claimed_attempts, status, attempted_at, duration_ms,
                 status_code, error, next_attempt_at, first_failed_at)
             AS (VALUES {})",
            rows.join(", ")
        );
        format!(
            "{v}
             INSERT INTO webhook_attempts (delivery_id, attempted_at, duration_ms, status_code,
                 error, next_attempt_at)
             SELECT d.id, v.attempted_at, v.duration_ms, v.status_code, v.error,
                 v.next_attempt_at
             FROM v JOIN webhook_deliveries AS d ON d.id = v.delivery_id
                 AND d.attempts = v.claimed_attempts AND d.status = 'pending'
             ORDER BY v.pos;
             {v}
             UPDATE webhook_deliveries SET status = v.status, attempts = attempts + 1,
                 next_attempt_at = v.next_attempt_at, first_failed_at = v.first_failed_at,
                 lease_until = NULL, last_status_code = v.status_code, last_error = v.error,
                 updated_at = ?{now}
             FROM v
             WHERE webhook_deliveries.id = v.delivery_id
               AND webhook_deliveries.attempts = v.claimed_attempts
               AND webhook_deliveries.status = 'pending'
             RETURNING id;",
            now = n * RECORD_PARAMS + 1
        )
    })
});

impl super::batch::Write for RecordAttempt {
    type Output = bool;
    type State = ();

    /// One transaction for the whole batch: `BEGIN IMMEDIATE`, the records in chunks of bound
    /// rows (see `RECORD_CHUNKS`; a batch of 40 is 32 + 8), `COMMIT`. Each chunk writes the
    /// attempt rows for the deliveries that pass the fence (the attempt count seen at claim: a
    /// stale dispatcher changes nothing), then updates those same deliveries. Until the records
    /// were bound rows, the batch travelled as one JSON array that SQLite took apart row by row.
    fn apply_all<'c>(
        batch: &'c [Self],
        conn: &'c mut SqliteConnection,
        _: &'c mut (),
    ) -> BoxFuture<'c, StoreResult<Vec<bool>>> {
        Box::pin(async move {
            // A delivery is claimed by one attempt at a time; should a batch still hold two
            // records for one, only the first is a candidate, as if applied one after another.
            let mut seen = HashSet::new();
            let candidate: Vec<bool> = batch
                .iter()
                .map(|w| seen.insert(w.delivery_id.as_str()))
                .collect();
            let rows: Vec<&RecordAttempt> = batch
                .iter()
                .zip(&candidate)
                .filter(|(_, c)| **c)
                .map(|(w, _)| w)
                .collect();
            if let Err(e) = sqlx::query("BEGIN IMMEDIATE").execute(&mut *conn).await {
                return Err(super::tasks::rolled_back(conn, e).await);
            }
            let now = now_ms();
            let mut changed: HashSet<String> = HashSet::new();
            for (k, chunk) in super::batch::chunks(&rows) {
                let mut query = sqlx::query_scalar::<_, String>(&RECORD_CHUNKS[k]);
                for w in chunk {
                    let r = &w.record;
                    let status = if r.delivered {
                        "delivered"
                    } else if r.next_attempt_at.is_some() {
                        "pending"
                    } else {
                        "undeliverable"
                    };
                    query = query
                        .bind(w.delivery_id.as_str())
                        .bind(w.claimed_attempts)
                        .bind(status)
                        .bind(r.attempted_at)
                        .bind(r.duration_ms)
                        .bind(r.status_code)
                        .bind(r.error.as_deref())
                        .bind(r.next_attempt_at)
                        .bind(r.first_failed_at);
                }
                match query.bind(now).fetch_all(&mut *conn).await {
                    Ok(ids) => changed.extend(ids),
                    Err(e) => return Err(super::tasks::rolled_back(conn, e).await),
                }
            }
            if let Err(e) = sqlx::query("COMMIT").execute(&mut *conn).await {
                return Err(super::tasks::rolled_back(conn, e).await);
            }
            Ok(batch
                .iter()
                .zip(&candidate)
                .map(|(w, c)| *c && changed.contains(&w.delivery_id))
                .collect())
        })
    }
}
