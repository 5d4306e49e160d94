//! A batch of submits on SQLite: the grouped submit's own statements (`submit.rs`) run for the
//! batch alone, in a savepoint of the writer's next transaction that is undone unless every task
//! was let in.

use rusqlite::{params, Connection};

use super::submit::{apply_submits, InsertTask, SubmitState};
use super::SqliteStore;
use crate::store::sql::queue_outbox::REMEMBER_BATCH;
use crate::store::sql::Durability;
use crate::store::{BatchSubmitted, NewBatch, PendingLimits, StoreError, StoreResult};

impl SqliteStore {
    pub(super) async fn store_batch(
        &self,
        batch: &NewBatch,
        key_hash: &[u8; 32],
        limits: &PendingLimits,
    ) -> StoreResult<BatchSubmitted> {
        let writes: Vec<InsertTask> = batch
            .keyed_tasks()
            .into_iter()
            .map(|task| InsertTask {
                task: Box::new(task),
                key_hash: *key_hash,
                limits: limits.clone(),
            })
            .collect();
        let (ids, heads) = (self.ids.clone(), self.heads.clone());
        let outbox = self.wakeups.outbox.clone();
        let (idempotency, answer) = (batch.idempotency.clone(), batch.answer);
        let stored = self
            .writer
            .call_or_undo(Durability::Synced, move |conn| {
                let done = apply(conn, &writes, SubmitState::new(ids, heads, outbox))?;
                if let (BatchSubmitted::Queued { account_id, tasks }, Some(idem)) =
                    (&done, &idempotency)
                {
                    let ids: Vec<uuid::Uuid> = tasks.iter().map(|(id, _)| *id).collect();
                    conn.prepare_cached(REMEMBER_BATCH.sqlite)
                        .and_then(|mut s| {
                            s.execute(params![answer.body(&ids), account_id, idem.key])
                        })
                        .map_err(StoreError::from)?;
                }
                Ok((matches!(done, BatchSubmitted::Queued { .. }), done))
            })
            .await?;
        if let BatchSubmitted::Queued { account_id, tasks } = &stored {
            for _ in tasks {
                self.wakeups.queue.notify_one();
            }
            if let Some((_, first)) = tasks.first() {
                self.wakeups.events.new_tasks(account_id, *first);
            }
        }
        Ok(stored)
    }
}

/// The batch through the grouped submit's statements, with a submit state of its own (the
/// writer's keeps only when keys were last marked used, which this may mark again).
fn apply(
    conn: &Connection,
    writes: &[InsertTask],
    mut state: SubmitState,
) -> StoreResult<BatchSubmitted> {
    let outcomes = apply_submits(conn, writes, &mut state).map_err(StoreError::from)?;
    Ok(BatchSubmitted::of(outcomes))
}
