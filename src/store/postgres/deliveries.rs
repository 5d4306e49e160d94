//! The webhook outbox on PostgreSQL.

use async_trait::async_trait;
use uuid::Uuid;

use super::channels::{notify, OUTBOX_CHANNEL};
use super::PgStore;
use crate::store::outbox::ClaimedRow;
use crate::store::rows::decode;
use crate::store::sql::queue_outbox;
use crate::store::{
    now_ms, AttemptRecord, DeliveryKind, DueDelivery, Outbox, Redelivery, StoreResult,
};

#[async_trait]
impl Outbox for PgStore {
    async fn claim_due_deliveries(
        &self,
        limit: i64,
        lease_ms: i64,
    ) -> StoreResult<Vec<DueDelivery>> {
        let now = now_ms();
        // Picked and leased in one statement; rows another node is claiming are skipped, not
        // waited for. The payload and the account's signing secret come with each row.
        let rows: Vec<ClaimedRow> = sqlx::query_as(
            "WITH claimed AS (
                 UPDATE webhook_deliveries SET lease_until = $2
                 WHERE id IN (SELECT id FROM webhook_deliveries
                              WHERE status = 'pending' AND next_attempt_at <= $1
                                AND (lease_until IS NULL OR lease_until <= $1)
                              ORDER BY next_attempt_at LIMIT $3
                              FOR UPDATE SKIP LOCKED)
                 RETURNING id, task_id, url, attempts, first_failed_at, webhook_secret,
                     lease_until, account_id, task_seq, next_attempt_at)
             SELECT c.id, c.task_id, c.url, c.attempts, c.first_failed_at, c.webhook_secret,
                 c.lease_until, p.payload, a.signing_secret
             FROM claimed c
             JOIN webhook_payloads p ON p.task_seq = c.task_seq
             JOIN accounts a ON a.id = c.account_id
             ORDER BY c.next_attempt_at",
        )
        .bind(now)
        .bind(now + lease_ms)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|row| DueDelivery::claimed(row, DeliveryKind::Task))
            .collect())
    }

    async fn record_attempt(
        &self,
        claim: &DueDelivery,
        record: &AttemptRecord,
    ) -> StoreResult<bool> {
        // The fenced move of the delivery and the attempt's row, in one statement: the row goes
        // in only if the move did.
        let written: Option<i64> = sqlx::query_scalar(
            "WITH moved AS (
                 UPDATE webhook_deliveries SET status = $1, attempts = attempts + 1,
                     next_attempt_at = $2, first_failed_at = $3, lease_until = NULL,
                     last_status_code = $4, last_error = $5, updated_at = $6
                 WHERE id = $7 AND attempts = $8 AND lease_until = $11 AND status = 'pending'
                 RETURNING id)
             INSERT INTO webhook_attempts (delivery_id, attempted_at, duration_ms, status_code,
                 error, next_attempt_at)
             SELECT id, $9, $10, $4, $5, $2 FROM moved
             RETURNING 1::bigint",
        )
        .bind(record.delivery_status())
        .bind(record.next_attempt_at)
        .bind(record.first_failed_at)
        .bind(record.status_code.map(i64::from))
        .bind(&record.error)
        .bind(now_ms())
        .bind(&claim.id)
        .bind(claim.attempts)
        .bind(record.attempted_at)
        .bind(record.duration_ms)
        .bind(claim.lease_until)
        .fetch_optional(&self.pool)
        .await?;
        Ok(written.is_some())
    }

    async fn release_deliveries(&self, claimed: &[DueDelivery]) -> StoreResult<u64> {
        let ids: Vec<&str> = claimed.iter().map(|d| d.id.as_str()).collect();
        let leases: Vec<i64> = claimed.iter().map(|d| d.lease_until).collect();
        let released = sqlx::query(
            "UPDATE webhook_deliveries d SET lease_until = NULL
             FROM UNNEST($1::text[], $2::bigint[]) AS r(id, lease_until)
             WHERE d.id = r.id AND d.lease_until = r.lease_until AND d.status = 'pending'",
        )
        .bind(&ids)
        .bind(&leases)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(released)
    }

    async fn next_delivery_due(&self) -> StoreResult<Option<i64>> {
        queue_outbox::next_delivery_due(self).await
    }

    async fn redeliver(&self, account_id: &str, task_id: &Uuid) -> StoreResult<Redelivery> {
        let seq = self.ids.seq(task_id).unwrap_or(0);
        let mut tx = self.pool.begin().await?;
        let task: Option<(String, Option<String>)> = sqlx::query_as(
            "SELECT status, webhook_url FROM tasks WHERE seq = $1 AND account_id = $2 FOR UPDATE",
        )
        .bind(seq)
        .bind(account_id)
        .fetch_optional(&mut *tx)
        .await?;
        let Some((status, webhook_url)) = task else {
            return Ok(Redelivery::TaskNotFound);
        };
        let decided = Redelivery::decide(decode(seq, "status", &status)?, webhook_url.is_some());
        if decided == Redelivery::Queued {
            let queued = sqlx::query(queue_outbox::REDELIVER.postgres)
                .bind(now_ms())
                .bind(seq)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            if queued == 0 {
                return Ok(Redelivery::NotRequested);
            }
            notify(&mut tx, OUTBOX_CHANNEL).await?;
        }
        tx.commit().await?;
        if decided == Redelivery::Queued {
            self.wakeups.outbox.notify_one();
        }
        Ok(decided)
    }
}
