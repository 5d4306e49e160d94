//! A batch of submits on PostgreSQL: the grouped submit's statements (`submit.rs`) run for the
//! batch alone, in a transaction of its own on the pool, committed only when every task was let
//! in. Its account's row is locked as a group's is, so batches and groups take turns on it.

use super::submit::{apply, Submit};
use super::PgStore;
use crate::store::sql::queue_outbox::REMEMBER_BATCH;
use crate::store::{BatchSubmitted, NewBatch, PendingLimits, StoreResult};

impl PgStore {
    pub(super) async fn store_batch(
        &self,
        batch: &NewBatch,
        key_hash: &[u8; 32],
        limits: &PendingLimits,
    ) -> StoreResult<BatchSubmitted> {
        let submits: Vec<Submit> = batch
            .keyed_tasks()
            .into_iter()
            .map(|task| Submit {
                task,
                key_hash: *key_hash,
                limits: limits.clone(),
            })
            .collect();
        let mut tx = self.pool.begin().await?;
        let done = BatchSubmitted::of(apply(&mut tx, &self.ids, &submits).await?);
        let BatchSubmitted::Queued { account_id, tasks } = &done else {
            // Nothing of the batch is kept; the accounts' rows are let go.
            tx.rollback().await?;
            return Ok(done);
        };
        if let Some(idem) = &batch.idempotency {
            let ids: Vec<uuid::Uuid> = tasks.iter().map(|(id, _)| *id).collect();
            sqlx::query(REMEMBER_BATCH.postgres)
                .bind(batch.answer.body(&ids))
                .bind(account_id)
                .bind(&idem.key)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        // This node's workers need not wait for the notification's round trip.
        self.wakeups.queue.notify_one();
        Ok(done)
    }
}
