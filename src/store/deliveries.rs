use futures::future::BoxFuture;
use sqlx::{FromRow, QueryBuilder, Sqlite, SqliteConnection};
use uuid::Uuid;

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
        let mut tx = self.writer.begin().await?;
        let due: Vec<DueDelivery> = sqlx::query_as(
            "SELECT d.id, d.task_id, d.url, d.payload, d.attempts, d.first_failed_at,
                    t.webhook_secret, a.signing_secret
             FROM webhook_deliveries d
             JOIN tasks t ON t.id = d.task_id
             JOIN accounts a ON a.id = d.account_id
             WHERE d.status = 'pending' AND d.next_attempt_at <= ?1
               AND (d.lease_until IS NULL OR d.lease_until <= ?1)
             ORDER BY d.next_attempt_at LIMIT ?2",
        )
        .bind(now)
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
        if !due.is_empty() {
            let mut q: QueryBuilder<Sqlite> =
                QueryBuilder::new("UPDATE webhook_deliveries SET lease_until = ");
            q.push_bind(now + lease_ms).push(" WHERE id IN (");
            let mut list = q.separated(", ");
            for d in &due {
                list.push_bind(d.id.clone());
            }
            q.push(")");
            q.build().execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(due)
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
        let task_id = task_id.to_string();
        let owned: Option<i64> =
            sqlx::query_scalar("SELECT 1 FROM tasks WHERE id = ? AND account_id = ?")
                .bind(&task_id)
                .bind(account_id)
                .fetch_optional(&self.reader)
                .await?;
        if owned.is_none() {
            return Ok(None);
        }
        Ok(Some(
            sqlx::query_as(
                "SELECT a.attempted_at, a.duration_ms, a.status_code, a.error, a.next_attempt_at
                 FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id
                 WHERE d.task_id = ? ORDER BY a.id",
            )
            .bind(&task_id)
            .fetch_all(&self.reader)
            .await?,
        ))
    }

    /// Start a fresh delivery schedule for a task's result.
    pub async fn redeliver(&self, account_id: &str, task_id: &Uuid) -> StoreResult<Redelivery> {
        let task_id = task_id.to_string();
        let mut tx = self.writer.begin().await?;
        let task: Option<(String, Option<String>)> =
            sqlx::query_as("SELECT status, webhook_url FROM tasks WHERE id = ? AND account_id = ?")
                .bind(&task_id)
                .bind(account_id)
                .fetch_optional(&mut *tx)
                .await?;
        let result = match task {
            None => Redelivery::TaskNotFound,
            Some((_, None)) => Redelivery::NoWebhook,
            Some((status, Some(_))) if status != "finished" && status != "failed" => {
                Redelivery::NotFinal
            }
            Some(_) => {
                let now = now_ms();
                sqlx::query(
                    "UPDATE webhook_deliveries SET status = 'pending', attempts = 0,
                         next_attempt_at = ?, first_failed_at = NULL, lease_until = NULL,
                         updated_at = ?
                     WHERE task_id = ?",
                )
                .bind(now)
                .bind(now)
                .bind(&task_id)
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

impl super::batch::Write for RecordAttempt {
    type Output = bool;

    fn apply<'c>(&'c self, conn: &'c mut SqliteConnection) -> BoxFuture<'c, StoreResult<bool>> {
        let record = &self.record;
        Box::pin(async move {
            let status = if record.delivered {
                "delivered"
            } else if record.next_attempt_at.is_some() {
                "pending"
            } else {
                "undeliverable"
            };
            let done = sqlx::query(
                "UPDATE webhook_deliveries SET status = ?, attempts = attempts + 1,
                     next_attempt_at = ?, first_failed_at = ?, lease_until = NULL,
                     last_status_code = ?, last_error = ?, updated_at = ?
                 WHERE id = ? AND attempts = ? AND status = 'pending'",
            )
            .bind(status)
            .bind(record.next_attempt_at)
            .bind(record.first_failed_at)
            .bind(record.status_code.map(i64::from))
            .bind(&record.error)
            .bind(now_ms())
            .bind(&self.delivery_id)
            .bind(self.claimed_attempts)
            .execute(&mut *conn)
            .await?;
            if done.rows_affected() == 1 {
                sqlx::query(
                    "INSERT INTO webhook_attempts (delivery_id, attempted_at, duration_ms,
                         status_code, error, next_attempt_at)
                     VALUES (?, ?, ?, ?, ?, ?)",
                )
                .bind(&self.delivery_id)
                .bind(record.attempted_at)
                .bind(record.duration_ms)
                .bind(record.status_code.map(i64::from))
                .bind(&record.error)
                .bind(record.next_attempt_at)
                .execute(&mut *conn)
                .await?;
            }
            Ok(done.rows_affected() == 1)
        })
    }
}
