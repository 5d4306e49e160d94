//! The queue on SQLite ([`TaskQueue`]): submits go to the writer's group commit, reads find tasks
//! by public id (or by the random id of a task stored before ids came from `seq`), and every
//! change after a claim is a write on the writer's thread, fenced by the claim's attempt.

use async_trait::async_trait;
use rusqlite::{params, OptionalExtension};
use uuid::Uuid;

use super::endings::complete_in_tx;
use super::submit::InsertTask;
use super::versions::{next_version, peek_version, take_version};
use super::SqliteStore;
use crate::domain::TaskStatus;
use crate::store::ids::TaskKey;
use crate::store::rows::{into_tasks, key_and_tasks, TaskRow, KEY_THEN_TASKS};
use crate::store::rows::{TASK_COLUMNS, TASK_JOINS};
use crate::store::sql::{json, Durability};
use crate::store::{
    now_ms, worker_lost, BatchSubmitted, ClaimRules, ClaimedTask, Ending, Fence, Happened, LiveKey,
    NewBatch, NewTask, PendingLimits, StoreResult, StoredProgress, Submitted, Task, TaskEvent,
    TaskQueue, RUNNING,
};

/// Only a live key: not revoked, and its account not disabled.
const KEY_LIVE: &str = "WHERE k.key_hash = ?1 AND k.revoked_at IS NULL
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
        limits: &PendingLimits,
    ) -> StoreResult<Submitted> {
        let submitted = self
            .writer
            .submit(InsertTask {
                task: Box::new(task.clone()),
                key_hash: *key_hash,
                limits: limits.clone(),
            })
            .await?;
        if let Submitted::Queued {
            account_id, seq, ..
        } = &submitted
        {
            self.wakeups.queue.notify_one();
            self.wakeups.events.new_tasks(account_id, *seq);
        }
        Ok(submitted)
    }

    async fn submit_batch(
        &self,
        batch: &NewBatch,
        key_hash: &[u8; 32],
        limits: &PendingLimits,
    ) -> StoreResult<BatchSubmitted> {
        self.store_batch(batch, key_hash, limits).await
    }

    async fn task_for_key(
        &self,
        key_hash: &[u8; 32],
        task_id: &Uuid,
    ) -> StoreResult<Option<(LiveKey, Option<Task>)>> {
        let TaskKey { seq, legacy } = self.ids.key(task_id);
        let rows = sqlx::query(&format!(
            "{KEY_THEN_TASKS} {} FROM api_keys k
             LEFT JOIN tasks t ON {} AND t.account_id = k.account_id {} {KEY_LIVE}",
            TASK_COLUMNS.sqlite,
            by_id(2, 3),
            TASK_JOINS.sqlite
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
            "{KEY_THEN_TASKS} {} FROM api_keys k
             LEFT JOIN tasks t ON ((t.seq IN (SELECT value FROM json_each(?2)) AND t.id IS NULL)
                                   OR t.id IN (SELECT value FROM json_each(?3)))
                              AND t.account_id = k.account_id {} {KEY_LIVE}",
            TASK_COLUMNS.sqlite, TASK_JOINS.sqlite
        ))
        .bind(key_hash.as_slice())
        .bind(json(&seqs))
        .bind(json(&legacy))
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
            "SELECT {} FROM tasks t {} WHERE {} AND t.account_id = ?3",
            TASK_COLUMNS.sqlite,
            TASK_JOINS.sqlite,
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
            "SELECT {} FROM tasks t {}
             WHERE (t.seq IN (SELECT value FROM json_each(?1)) AND t.id IS NULL)
                OR t.id IN (SELECT value FROM json_each(?2))",
            TASK_COLUMNS.sqlite, TASK_JOINS.sqlite
        ))
        .bind(json(&seqs))
        .bind(json(&legacy))
        .fetch_all(&self.reader)
        .await?;
        into_tasks(rows, &self.ids)
    }

    async fn claim_next(
        &self,
        owner: &str,
        lease_ms: i64,
        rules: &ClaimRules,
    ) -> StoreResult<Option<ClaimedTask>> {
        self.claim(owner, lease_ms, rules).await
    }

    async fn mark_processing(
        &self,
        seq: i64,
        attempt: i64,
        lease_ms: i64,
        percentage: i64,
    ) -> StoreResult<Option<i64>> {
        let percentage = percentage.clamp(0, 99);
        let changed = self
            .writer
            .call(Durability::Committed, move |conn| {
                let version = next_version(conn)?;
                let account: Option<String> = conn
                    .prepare_cached(
                        "UPDATE tasks SET status = 'processing', lease_expires_at = ?,
                             event_seq = ?, percentage = MAX(percentage, ?)
                         WHERE seq = ? AND attempts = ? AND status = 'starting'
                         RETURNING account_id",
                    )?
                    .query_row(
                        params![now_ms() + lease_ms, version, percentage, seq, attempt],
                        |r| r.get(0),
                    )
                    .optional()?;
                Ok(account.map(|account| (account, version)))
            })
            .await?;
        let Some((account, version)) = changed else {
            return Ok(None);
        };
        self.changed(seq, &account, version, TaskStatus::Processing);
        Ok(Some(version))
    }

    async fn heartbeat(
        &self,
        seq: i64,
        attempt: i64,
        lease_ms: i64,
        progress: Option<&StoredProgress>,
    ) -> StoreResult<Option<i64>> {
        let progress = progress.cloned();
        let stored = progress.clone();
        let beat = self
            .writer
            .call(Durability::Committed, move |conn| {
                let lease = now_ms() + lease_ms;
                let Some(progress) = stored else {
                    return Ok(conn
                        .prepare_cached(&format!(
                            "UPDATE tasks SET lease_expires_at = ?
                             WHERE seq = ? AND attempts = ? AND status IN {ACTIVE}
                             RETURNING account_id, COALESCE(event_seq, seq)"
                        ))?
                        .query_row(params![lease, seq, attempt], |r| Ok((r.get(0)?, r.get(1)?)))
                        .optional()?);
                };
                let version = next_version(conn)?;
                let retrying = progress.retrying.as_ref();
                Ok(conn
                    .prepare_cached(&format!(
                        "UPDATE tasks SET lease_expires_at = ?, percentage = MAX(percentage, ?),
                         preview_key = ?, retry_attempt = ?, retry_error = ?, event_seq = ?
                     WHERE seq = ? AND attempts = ? AND status IN {ACTIVE}
                     RETURNING account_id, event_seq"
                    ))?
                    .query_row(
                        params![
                            lease,
                            progress.percentage.clamp(0, 99),
                            progress.preview_key,
                            retrying.map(|r| r.attempt),
                            retrying.map(|r| r.error.as_str()),
                            version,
                            seq,
                            attempt
                        ],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )
                    .optional()?)
            })
            .await?;
        let Some((account, version)) = beat else {
            return Ok(None);
        };
        let account: String = account;
        if let Some(progress) = progress {
            self.wakeups.events.publish(TaskEvent {
                seq,
                account_id: account.into(),
                version,
                what: Happened::Progress {
                    percentage: progress.percentage.clamp(0, 99),
                    preview_key: progress.preview_key,
                    retrying: progress.retrying,
                    live: false,
                },
            });
        }
        Ok(Some(version))
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
        Ok(self.after_end(seq, queued))
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
        Ok(self.after_end(seq, queued))
    }

    async fn release_task(&self, seq: i64, attempt: i64) -> StoreResult<bool> {
        let released = self
            .writer
            .call(Durability::Committed, move |conn| {
                let version = next_version(conn)?;
                let account: Option<String> = conn
                    .prepare_cached(&format!(
                        "UPDATE tasks SET status = 'pending', attempts = attempts - 1,
                             lease_owner = NULL, lease_expires_at = NULL, percentage = 0,
                             event_seq = ?, preview_key = NULL
                         WHERE seq = ? AND attempts = ? AND status IN {ACTIVE}
                         RETURNING account_id"
                    ))?
                    .query_row(params![version, seq, attempt], |r| r.get(0))
                    .optional()?;
                Ok(account.map(|account| (account, version)))
            })
            .await?;
        let Some((account, version)) = released else {
            return Ok(false);
        };
        self.wakeups.queue.notify_one();
        self.changed(seq, &account, version, TaskStatus::Pending);
        Ok(true)
    }

    async fn recover_expired(&self, max_attempts: u32) -> StoreResult<(u64, Vec<String>)> {
        let ids = self.ids.clone();
        let (requeued, failed, queued) = self
            .writer
            .call(Durability::Synced, move |conn| {
                let now = now_ms();
                let max_attempts = i64::from(max_attempts);
                let version = peek_version(conn)?;
                let requeued: Vec<(i64, String)> = conn
                    .prepare_cached(&format!(
                        "UPDATE tasks SET status = 'pending', lease_owner = NULL,
                             lease_expires_at = NULL, percentage = 0, event_seq = ?,
                             preview_key = NULL
                         WHERE status IN {ACTIVE} AND lease_expires_at < ? AND attempts < ?
                         RETURNING seq, account_id"
                    ))?
                    .query_map(params![version, now, max_attempts], |r| {
                        Ok((r.get(0)?, r.get(1)?))
                    })?
                    .collect::<Result<_, _>>()?;
                if !requeued.is_empty() {
                    take_version(conn, version)?;
                }
                type Exhausted = (i64, Option<String>, String, i64, Option<String>);
                let exhausted: Vec<Exhausted> = conn
                    .prepare_cached(&format!(
                        "SELECT seq, id, task_type, attempts,
                             (SELECT x.extras FROM task_extras x WHERE x.seq = tasks.seq)
                         FROM tasks
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
                    if let Some(ended) = complete_in_tx(conn, &ids, seq, fence, &ending)? {
                        queued |= ended.queued;
                        failed.push((seq, id, ended));
                    }
                }
                Ok(((requeued, version), failed, queued))
            })
            .await?;
        let (requeued, version) = requeued;
        self.wakeups.after_recovery(requeued.len() as u64, queued);
        for (seq, account) in &requeued {
            self.changed(*seq, account, version, TaskStatus::Pending);
        }
        let mut ids = Vec::with_capacity(failed.len());
        for (seq, id, ended) in failed {
            self.after_end(seq, Some(ended));
            ids.push(id);
        }
        Ok((requeued.len() as u64, ids))
    }

    async fn latest_version(&self) -> StoreResult<i64> {
        Ok(sqlx::query_scalar(
            "SELECT max(COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'tasks'), 0),
                        COALESCE((SELECT max(seq) FROM tasks), 0))",
        )
        .fetch_one(&self.reader)
        .await?)
    }

    async fn publish_progress(&self, event: TaskEvent) -> StoreResult<()> {
        // One node: its listeners are all here.
        self.wakeups.events.publish(event);
        Ok(())
    }
}
