use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension};
use uuid::Uuid;

use super::super::ids::TaskKey;
use super::ledger::ledger;
use super::submit::InsertTask;
use super::writer::Durability;
use super::{to_json, SqliteStore};
use crate::store::rows::{key_and_tasks, ClaimedRow, TaskRow};
use crate::store::{
    now_ms, worker_lost, ClaimedTask, Ending, Fence, LiveKey, NewTask, StoreResult, Submitted,
    Task, TaskIds, TaskQueue, RUNNING,
};

pub(super) const TASK_COLUMNS: &str =
    "t.seq, t.id AS legacy_id, t.task_type, t.params, t.parent_seq, p.id AS parent_legacy_id,
    t.status, t.percentage, t.prompt, t.aspect_ratio,
    t.process_mode, t.seed, t.attempts, t.created_at, t.started_at, t.finished_at,
    t.grid_key, t.image_keys, t.result, t.error, t.webhook_url, t.extras,
    d.status AS wh_status, d.attempts AS wh_attempts, d.last_status_code AS wh_last_status_code,
    d.last_error AS wh_last_error, d.next_attempt_at AS wh_next_attempt_at,
    t.data_removed_at";

/// The presented key's row (when live), then the tasks asked for, each with its delivery.
const KEY_THEN_TASKS: &str = "SELECT k.id AS key_id, k.account_id AS key_account_id,
        k.last_used_at AS key_last_used_at,";
const KEY_JOINS: &str = "LEFT JOIN webhook_deliveries d ON d.task_seq = t.seq
     LEFT JOIN tasks p ON p.seq = t.parent_seq
     WHERE k.key_hash = ?1 AND k.revoked_at IS NULL
       AND (SELECT disabled FROM accounts WHERE id = k.account_id) = 0";

/// The task whose public id is given as parameters `?{seq}` (what it decrypts to, see
/// `TaskKey`) and `?{legacy}` (the id as text, for tasks stored before ids came from `seq`).
pub(super) fn by_id(seq: u8, legacy: u8) -> String {
    format!("((t.seq = ?{seq} AND t.id IS NULL) OR t.id = ?{legacy})")
}

const ACTIVE: &str = RUNNING;

#[async_trait]
impl TaskQueue for SqliteStore {
    /// Concurrent calls share a transaction (see `writer.rs`).
    async fn submit(
        &self,
        task: &NewTask,
        key_hash: &[u8; 32],
        max_active: u32,
    ) -> StoreResult<Submitted> {
        let submitted = self
            .writer
            .submit(InsertTask {
                task: Box::new(task.clone()),
                key_hash: *key_hash,
                max_active,
            })
            .await?;
        if matches!(submitted, Submitted::Queued { .. }) {
            self.wakeups.queue.notify_one();
        }
        Ok(submitted)
    }

    async fn task_for_key(
        &self,
        key_hash: &[u8; 32],
        task_id: &Uuid,
    ) -> StoreResult<Option<(LiveKey, Option<Task>)>> {
        let TaskKey { seq, legacy } = self.ids.key(task_id);
        let rows = sqlx::query(&format!(
            "{KEY_THEN_TASKS} {TASK_COLUMNS} FROM api_keys k
             LEFT JOIN tasks t ON {} AND t.account_id = k.account_id {KEY_JOINS}",
            by_id(2, 3)
        ))
        .bind(key_hash.as_slice())
        .bind(seq)
        .bind(legacy)
        .fetch_all(&self.reader)
        .await?;
        Ok(key_and_tasks(&rows, &self.ids)?.map(|(key, mut tasks)| (key, tasks.pop())))
    }

    async fn tasks_for_key(
        &self,
        key_hash: &[u8; 32],
        ids: &[Uuid],
    ) -> StoreResult<Option<(LiveKey, Vec<Task>)>> {
        let keys: Vec<TaskKey> = ids.iter().map(|id| self.ids.key(id)).collect();
        let seqs: Vec<i64> = keys.iter().filter_map(|k| k.seq).collect();
        let legacy: Vec<&str> = keys.iter().map(|k| k.legacy.as_str()).collect();
        let rows = sqlx::query(&format!(
            "{KEY_THEN_TASKS} {TASK_COLUMNS} FROM api_keys k
             LEFT JOIN tasks t ON ((t.seq IN (SELECT value FROM json_each(?2)) AND t.id IS NULL)
                                   OR t.id IN (SELECT value FROM json_each(?3)))
                              AND t.account_id = k.account_id {KEY_JOINS}"
        ))
        .bind(key_hash.as_slice())
        .bind(to_json(&seqs))
        .bind(to_json(&legacy))
        .fetch_all(&self.reader)
        .await?;
        key_and_tasks(&rows, &self.ids)
    }

    async fn task_for_account(
        &self,
        account_id: &str,
        task_id: &Uuid,
    ) -> StoreResult<Option<Task>> {
        let TaskKey { seq, legacy } = self.ids.key(task_id);
        let row: Option<TaskRow> = sqlx::query_as(&format!(
            "SELECT {TASK_COLUMNS} FROM tasks t LEFT JOIN webhook_deliveries d ON d.task_seq = t.seq
             LEFT JOIN tasks p ON p.seq = t.parent_seq
             WHERE {} AND t.account_id = ?3",
            by_id(1, 2)
        ))
        .bind(seq)
        .bind(legacy)
        .bind(account_id)
        .fetch_optional(&self.reader)
        .await?;
        row.map(|row| row.into_task(&self.ids)).transpose()
    }

    async fn tasks_by_id(&self, ids: &[Uuid]) -> StoreResult<Vec<Task>> {
        let keys: Vec<TaskKey> = ids.iter().map(|id| self.ids.key(id)).collect();
        let seqs: Vec<i64> = keys.iter().filter_map(|k| k.seq).collect();
        let legacy: Vec<&str> = keys.iter().map(|k| k.legacy.as_str()).collect();
        let rows: Vec<TaskRow> = sqlx::query_as(&format!(
            "SELECT {TASK_COLUMNS} FROM tasks t LEFT JOIN webhook_deliveries d ON d.task_seq = t.seq
             LEFT JOIN tasks p ON p.seq = t.parent_seq
             WHERE (t.seq IN (SELECT value FROM json_each(?1)) AND t.id IS NULL)
                OR t.id IN (SELECT value FROM json_each(?2))"
        ))
        .bind(to_json(&seqs))
        .bind(to_json(&legacy))
        .fetch_all(&self.reader)
        .await?;
        rows.into_iter()
            .map(|row| row.into_task(&self.ids))
            .collect()
    }

    async fn claim_task(&self, owner: &str, lease_ms: i64) -> StoreResult<Option<ClaimedTask>> {
        let owner = owner.to_string();
        let ids = self.ids.clone();
        let claimed = self
            .writer
            .call(Durability::Committed, move |conn| {
                let now = now_ms();
                let claimed = conn
                    .prepare_cached(
                        "UPDATE tasks SET status = 'starting', attempts = attempts + 1,
                             lease_owner = ?1, lease_expires_at = ?2,
                             started_at = COALESCE(started_at, ?3), percentage = 0
                         WHERE seq = (SELECT seq FROM tasks WHERE status = 'pending'
                                      ORDER BY priority, seq LIMIT 1)
                         RETURNING seq, id, account_id, task_type, params, prompt, aspect_ratio,
                             seed, attempts, parent_seq,
                             (SELECT p.id FROM tasks p WHERE p.seq = tasks.parent_seq), extras",
                    )?
                    .query_row(params![owner, now + lease_ms, now], |r| {
                        let seq = r.get(0)?;
                        let legacy_id: Option<String> = r.get(1)?;
                        let task_type: String = r.get(3)?;
                        let params: Option<String> = r.get(4)?;
                        let parent_seq: Option<i64> = r.get(9)?;
                        let parent_legacy: Option<String> = r.get(10)?;
                        Ok(ClaimedRow {
                            seq,
                            id: ids.of_row(seq, legacy_id.as_deref()),
                            account_id: r.get(2)?,
                            task_type,
                            params,
                            parent_id: parent_seq.map(|p| ids.of_row(p, parent_legacy.as_deref())),
                            prompt: r.get(5)?,
                            aspect_ratio: r.get(6)?,
                            seed: r.get(7)?,
                            attempts: r.get(8)?,
                            extras: r.get(11)?,
                        })
                    })
                    .optional()?;
                Ok(claimed)
            })
            .await?;
        claimed.map(ClaimedRow::into_claimed).transpose()
    }

    async fn mark_processing(&self, seq: i64, attempt: i64, lease_ms: i64) -> StoreResult<bool> {
        self.writer
            .call(Durability::Committed, move |conn| {
                let changed = conn
                    .prepare_cached(
                        "UPDATE tasks SET status = 'processing', lease_expires_at = ?
                         WHERE seq = ? AND attempts = ? AND status = 'starting'",
                    )?
                    .execute(params![now_ms() + lease_ms, seq, attempt])?;
                Ok(changed == 1)
            })
            .await
    }

    async fn heartbeat(
        &self,
        seq: i64,
        attempt: i64,
        percentage: i64,
        lease_ms: i64,
    ) -> StoreResult<bool> {
        self.writer
            .call(Durability::Committed, move |conn| {
                let changed = conn
                    .prepare_cached(&format!(
                        "UPDATE tasks SET lease_expires_at = ?, percentage = MAX(percentage, ?)
                         WHERE seq = ? AND attempts = ? AND status IN {ACTIVE}"
                    ))?
                    .execute(params![
                        now_ms() + lease_ms,
                        percentage.clamp(0, 99),
                        seq,
                        attempt
                    ])?;
                Ok(changed == 1)
            })
            .await
    }

    async fn complete_task(&self, seq: i64, attempt: i64, ending: &Ending) -> StoreResult<bool> {
        let ending = ending.clone();
        let ids = self.ids.clone();
        let queued = self
            .writer
            .call(Durability::Synced, move |conn| {
                complete_in_tx(conn, &ids, seq, Fence::Attempt(attempt), &ending)
            })
            .await?;
        self.after_end(seq, queued);
        Ok(queued.is_some())
    }

    async fn cancel_task(&self, seq: i64, ending: &Ending) -> StoreResult<bool> {
        let ending = ending.clone();
        let ids = self.ids.clone();
        let queued = self
            .writer
            .call(Durability::Synced, move |conn| {
                complete_in_tx(conn, &ids, seq, Fence::Cancel, &ending)
            })
            .await?;
        self.after_end(seq, queued);
        Ok(queued.is_some())
    }

    async fn release_task(&self, seq: i64, attempt: i64) -> StoreResult<bool> {
        let released = self
            .writer
            .call(Durability::Committed, move |conn| {
                let changed = conn
                    .prepare_cached(&format!(
                        "UPDATE tasks SET status = 'pending', attempts = attempts - 1,
                             lease_owner = NULL, lease_expires_at = NULL, percentage = 0
                         WHERE seq = ? AND attempts = ? AND status IN {ACTIVE}"
                    ))?
                    .execute(params![seq, attempt])?;
                Ok(changed == 1)
            })
            .await?;
        if released {
            self.wakeups.queue.notify_one();
        }
        Ok(released)
    }

    async fn recover_expired(&self, max_attempts: u32) -> StoreResult<(u64, Vec<String>)> {
        let ids = self.ids.clone();
        let (requeued, failed, queued) = self
            .writer
            .call(Durability::Synced, move |conn| {
                let now = now_ms();
                let max_attempts = i64::from(max_attempts);
                let requeued = conn
                    .prepare_cached(&format!(
                        "UPDATE tasks SET status = 'pending', lease_owner = NULL,
                             lease_expires_at = NULL, percentage = 0
                         WHERE status IN {ACTIVE} AND lease_expires_at < ? AND attempts < ?"
                    ))?
                    .execute(params![now, max_attempts])?;
                type Exhausted = (i64, Option<String>, String, i64, Option<String>);
                let exhausted: Vec<Exhausted> = conn
                    .prepare_cached(&format!(
                        "SELECT seq, id, task_type, attempts, extras FROM tasks
                         WHERE status IN {ACTIVE} AND lease_expires_at < ? AND attempts >= ?
                         LIMIT 500"
                    ))?
                    .query_map(params![now, max_attempts], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
                    })?
                    .collect::<Result<_, _>>()?;
                let mut failed = Vec::new();
                let mut queued = false;
                for (seq, legacy_id, task_type, attempts, extras) in exhausted {
                    let id = ids.of_row(seq, legacy_id.as_deref());
                    let ending = worker_lost(&id, &task_type, attempts, extras.as_deref());
                    let fence = Fence::Attempt(attempts);
                    if let Some(delivery) = complete_in_tx(conn, &ids, seq, fence, &ending)? {
                        queued |= delivery;
                        failed.push((seq, id));
                    }
                }
                Ok((requeued as u64, failed, queued))
            })
            .await?;
        self.wakeups.after_recovery(requeued, queued);
        for (seq, _) in &failed {
            self.wakeups.task_ends.ended(*seq);
        }
        Ok((requeued, failed.into_iter().map(|(_, id)| id).collect()))
    }

    async fn task_counts(&self) -> StoreResult<Vec<(String, i64)>> {
        Ok(
            sqlx::query_as("SELECT status, COUNT(*) FROM tasks GROUP BY status ORDER BY status")
                .fetch_all(&self.reader)
                .await?,
        )
    }

    async fn delete_expired_idempotency_keys(&self, now: i64, limit: i64) -> StoreResult<u64> {
        self.writer
            .call(Durability::Committed, move |conn| {
                let n = conn
                    .prepare_cached(
                        "DELETE FROM idempotency_keys WHERE (account_id, idempotency_key) IN (
                             SELECT account_id, idempotency_key FROM idempotency_keys
                             WHERE expires_at <= ?1 ORDER BY expires_at LIMIT ?2)",
                    )?
                    .execute(params![now, limit])?;
                Ok(n as u64)
            })
            .await
    }
}

impl SqliteStore {
    /// After the task at `seq` was ended (`Some`, with whether a delivery was queued) or not:
    /// wake the dispatcher and the task's watchers.
    fn after_end(&self, seq: i64, queued: Option<bool>) {
        if queued == Some(true) {
            self.wakeups.outbox.notify_one();
        }
        if queued.is_some() {
            self.wakeups.task_ends.ended(seq);
        }
    }
}

/// Write the final state of task `seq` if `fence` still holds, and queue its webhook in the same
/// transaction. None (and nothing written) when it does not (the claim is no longer ours, or the
/// task has ended), else whether a delivery was queued.
fn complete_in_tx(
    conn: &Connection,
    ids: &TaskIds,
    seq: i64,
    fence: Fence,
    ending: &Ending,
) -> StoreResult<Option<bool>> {
    let now = now_ms();
    let (status, output, error) = ending.columns();
    let keys = output
        .image_keys
        .map(|keys| serde_json::to_string(&keys).expect("keys serialize"));
    let percentage = ending.percentage();
    type Ended = (String, Option<String>, Option<String>, Option<String>, i64);
    let ended: Option<Ended> = conn
        .prepare_cached(&format!(
            "UPDATE tasks SET status = ?, percentage = COALESCE(?, percentage), finished_at = ?, grid_key = ?,
                 image_keys = ?, result = ?, error = ?, lease_owner = NULL, lease_expires_at = NULL
             WHERE seq = ? AND {}
             RETURNING account_id, webhook_url, webhook_secret, id, cost",
            fence.condition("attempts", "status", "?")
        ))?
        .query_row(
            params![
                status.as_str(),
                percentage,
                now,
                output.grid_key,
                keys,
                output.result,
                error,
                seq,
                fence.attempt()
            ],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
        .optional()?;
    let Some((account_id, webhook_url, webhook_secret, legacy_id, cost)) = ended else {
        return Ok(None);
    };
    if ending.refunds() && cost > 0 {
        // A failed or canceled task gives its credits back, in the transaction that records its
        // end (an account made unlimited since has no balance to give them to).
        let refunded = conn
            .prepare_cached(
                "UPDATE accounts SET credits = credits + ? WHERE id = ? AND credits IS NOT NULL",
            )?
            .execute(params![cost, account_id])?;
        if refunded == 1 {
            ledger(conn, &account_id, Some(seq), cost, "refund", now)?;
        }
    }
    let images = ending.images();
    if images > 0 {
        conn.prepare_cached("UPDATE accounts SET total_images = total_images + ? WHERE id = ?")?
            .execute(params![images, account_id])?;
    }
    // An ending the caller left out of `webhook_events` queues nothing.
    let Some(url) = webhook_url.filter(|_| ending.delivers) else {
        return Ok(Some(false));
    };
    let task_id = ids.of_row(seq, legacy_id.as_deref());
    conn.prepare_cached(
        "INSERT INTO webhook_deliveries (id, task_seq, task_id, account_id, url,
             status, next_attempt_at, created_at, updated_at, webhook_secret)
         VALUES (?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?)",
    )?
    .execute(params![
        // Time-ordered, like `seq`, to keep the outbox's index appending.
        format!("msg_{}", Uuid::now_v7().simple()),
        seq,
        task_id,
        account_id,
        url,
        now,
        now,
        now,
        webhook_secret,
    ])?;
    // Apart from the delivery's row, which every attempt writes again (migration 0006).
    conn.prepare_cached("INSERT INTO webhook_payloads (task_seq, payload) VALUES (?, ?)")?
        .execute(params![seq, ending.payload])?;
    if webhook_secret.is_some() {
        // It moved to the delivery (claims read it from there); no second copy stays.
        conn.prepare_cached("UPDATE tasks SET webhook_secret = NULL WHERE seq = ?")?
            .execute(params![seq])?;
    }
    Ok(Some(true))
}
