//! The queue on PostgreSQL ([`TaskQueue`]): submits go to the node's group commit, reads find
//! tasks by the `seq` their public id decrypts to, and every change after a claim is one statement
//! fenced by the claim's attempt that also sends the note other nodes' listeners hear.

use async_trait::async_trait;
use uuid::Uuid;

use super::channels::{changed_note_sql, event_note, notify, QUEUE_CHANNEL, TASK_EVENT_CHANNEL};
use super::endings::complete_in_tx;
use super::PgStore;
use crate::domain::TaskStatus;
use crate::store::rows::{into_tasks, key_and_tasks, TaskRow, KEY_THEN_TASKS};
use crate::store::rows::{TASK_COLUMNS, TASK_JOINS};
use crate::store::{
    now_ms, worker_lost, BatchSubmitted, ClaimRules, ClaimedTask, Ending, Fence, LiveKey, NewBatch,
    NewTask, PendingLimits, StoreResult, StoredProgress, Submitted, Task, TaskEvent, TaskQueue,
    RUNNING,
};

impl PgStore {
    /// The `seq` an id leads to; 0 (no task) for an id that no `seq` could have made.
    pub(super) fn seq_of(&self, id: &Uuid) -> i64 {
        self.ids.seq(id).unwrap_or(0)
    }
}

#[async_trait]
impl TaskQueue for PgStore {
    async fn submit(
        &self,
        task: &NewTask,
        key_hash: &[u8; 32],
        limits: &PendingLimits,
    ) -> StoreResult<Submitted> {
        let submitted = self.submits.submit(task, key_hash, limits).await?;
        if matches!(submitted, Submitted::Queued { .. }) {
            // This node's workers need not wait for the notification's round trip.
            self.wakeups.queue.notify_one();
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
        let found = self.tasks_for_key(key_hash, &[*task_id]).await?;
        Ok(found.map(|(key, mut tasks)| (key, tasks.pop())))
    }

    async fn tasks_for_key(
        &self,
        key_hash: &[u8; 32],
        ids: &[Uuid],
    ) -> StoreResult<Option<(LiveKey, Vec<Task>)>> {
        let seqs: Vec<i64> = ids.iter().map(|id| self.seq_of(id)).collect();
        let rows = sqlx::query(&format!(
            "{KEY_THEN_TASKS} {} FROM api_keys k
             LEFT JOIN tasks t ON t.seq = ANY($2) AND t.account_id = k.account_id {}
             WHERE k.key_hash = $1 AND k.revoked_at IS NULL
               AND NOT (SELECT disabled FROM accounts WHERE id = k.account_id)",
            TASK_COLUMNS.postgres, TASK_JOINS.postgres
        ))
        .bind(key_hash.as_slice())
        .bind(&seqs)
        .fetch_all(&self.pool)
        .await?;
        key_and_tasks(&rows, &self.ids)
    }

    async fn task_for_account(
        &self,
        account_id: &str,
        task_id: &Uuid,
    ) -> StoreResult<Option<Task>> {
        let row: Option<TaskRow> = sqlx::query_as(&format!(
            "SELECT {} FROM tasks t {} WHERE t.seq = $1 AND t.account_id = $2",
            TASK_COLUMNS.postgres, TASK_JOINS.postgres
        ))
        .bind(self.seq_of(task_id))
        .bind(account_id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|row| row.into_task(&self.ids)).transpose()
    }

    async fn tasks_by_id(&self, ids: &[Uuid]) -> StoreResult<Vec<Task>> {
        let seqs: Vec<i64> = ids.iter().map(|id| self.seq_of(id)).collect();
        let rows: Vec<TaskRow> = sqlx::query_as(&format!(
            "SELECT {} FROM tasks t {} WHERE t.seq = ANY($1)",
            TASK_COLUMNS.postgres, TASK_JOINS.postgres
        ))
        .bind(&seqs)
        .fetch_all(&self.pool)
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
        Ok(sqlx::query_scalar(&format!(
            "WITH changed AS (
                 UPDATE tasks SET status = 'processing', lease_expires_at = $1,
                     event_seq = nextval('task_seq'), percentage = GREATEST(percentage, $4)
                 WHERE seq = $2 AND attempts = $3 AND status = 'starting'
                 RETURNING seq, event_seq, account_id)
             SELECT event_seq, {} FROM changed",
            changed_note_sql(TaskStatus::Processing)
        ))
        .bind(now_ms() + lease_ms)
        .bind(seq)
        .bind(attempt)
        .bind(percentage.clamp(0, 99))
        .fetch_optional(&self.pool)
        .await?)
    }

    async fn heartbeat(
        &self,
        seq: i64,
        attempt: i64,
        lease_ms: i64,
        progress: Option<&StoredProgress>,
    ) -> StoreResult<Option<i64>> {
        let lease = now_ms() + lease_ms;
        let Some(progress) = progress else {
            return Ok(sqlx::query_scalar(&format!(
                "UPDATE tasks SET lease_expires_at = $1
                 WHERE seq = $2 AND attempts = $3 AND status IN {RUNNING}
                 RETURNING COALESCE(event_seq, seq)"
            ))
            .bind(lease)
            .bind(seq)
            .bind(attempt)
            .fetch_optional(&self.pool)
            .await?);
        };
        let percentage = progress.percentage.clamp(0, 99);
        let retrying = progress.retrying.as_ref();
        // The note is made in the statement, which knows the new version and the account; the
        // form `channels::event_note` writes (a retry's attempt and error last, when there is one).
        Ok(sqlx::query_scalar(&format!(
            "WITH changed AS (
                 UPDATE tasks SET lease_expires_at = $1, percentage = GREATEST(percentage, $2),
                     preview_key = $3, retry_attempt = $6, retry_error = $7,
                     event_seq = nextval('task_seq')
                 WHERE seq = $4 AND attempts = $5 AND status IN {RUNNING}
                 RETURNING seq, event_seq, account_id)
             SELECT event_seq, pg_notify('{TASK_EVENT_CHANNEL}', rtrim(concat_ws(' ', 'p', seq,
                 event_seq, $2::bigint, 0, account_id, COALESCE($3::text, ''), $6::bigint,
                 $7::text)))
             FROM changed"
        ))
        .bind(lease)
        .bind(percentage)
        .bind(&progress.preview_key)
        .bind(seq)
        .bind(attempt)
        .bind(retrying.map(|r| i64::from(r.attempt)))
        .bind(retrying.map(|r| r.error.as_str()))
        .fetch_optional(&self.pool)
        .await?)
    }

    async fn latest_version(&self) -> StoreResult<i64> {
        Ok(sqlx::query_scalar("SELECT last_value FROM task_seq")
            .fetch_one(&self.pool)
            .await?)
    }

    fn version_overlap(&self) -> i64 {
        // Nodes take versions from one sequence and commit in their own time: a version given
        // out before a commit that a stream has seen may commit after it. 10,000 versions is far
        // more than the store's connections can hold uncommitted at once.
        10_000
    }

    async fn publish_progress(&self, event: TaskEvent) -> StoreResult<()> {
        // Every node's listener (this one's too) hears it and tells its own listeners.
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(TASK_EVENT_CHANNEL)
            .bind(event_note(&event))
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn complete_task(&self, seq: i64, attempt: i64, ending: &Ending) -> StoreResult<bool> {
        self.end_task(seq, Fence::Attempt(attempt), ending).await
    }

    async fn cancel_task(&self, seq: i64, ending: &Ending) -> StoreResult<bool> {
        self.end_task(seq, Fence::Cancel, ending).await
    }

    async fn release_task(&self, seq: i64, attempt: i64) -> StoreResult<bool> {
        let mut tx = self.pool.begin().await?;
        let changed = sqlx::query(&format!(
            "WITH changed AS (
                 UPDATE tasks SET status = 'pending', attempts = attempts - 1,
                     lease_owner = NULL, lease_expires_at = NULL, percentage = 0,
                     event_seq = nextval('task_seq'), preview_key = NULL
                 WHERE seq = $1 AND attempts = $2 AND status IN {RUNNING}
                 RETURNING seq, event_seq, account_id)
             SELECT {} FROM changed",
            changed_note_sql(TaskStatus::Pending)
        ))
        .bind(seq)
        .bind(attempt)
        .execute(&mut *tx)
        .await?;
        let released = changed.rows_affected() == 1;
        if released {
            notify(&mut tx, QUEUE_CHANNEL).await?;
        }
        tx.commit().await?;
        Ok(released)
    }

    async fn recover_expired(&self, max_attempts: u32) -> StoreResult<(u64, Vec<String>)> {
        let now = now_ms();
        let max_attempts = i64::from(max_attempts);
        let mut tx = self.pool.begin().await?;
        let requeued = sqlx::query(&format!(
            "WITH changed AS (
                 UPDATE tasks SET status = 'pending', lease_owner = NULL,
                     lease_expires_at = NULL, percentage = 0,
                     event_seq = nextval('task_seq'), preview_key = NULL
                 WHERE status IN {RUNNING} AND lease_expires_at < $1 AND attempts < $2
                 RETURNING seq, event_seq, account_id)
             SELECT {} FROM changed",
            changed_note_sql(TaskStatus::Pending)
        ))
        .bind(now)
        .bind(max_attempts)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if requeued > 0 {
            notify(&mut tx, QUEUE_CHANNEL).await?;
        }
        // Another node's reaper may be at the same rows: each takes those the other has not.
        let exhausted: Vec<(i64, String, i64, Option<String>)> = sqlx::query_as(&format!(
            "SELECT seq, task_type, attempts, extras FROM tasks
             WHERE status IN {RUNNING} AND lease_expires_at < $1 AND attempts >= $2
             LIMIT 500 FOR UPDATE SKIP LOCKED"
        ))
        .bind(now)
        .bind(max_attempts)
        .fetch_all(&mut *tx)
        .await?;
        let mut failed = Vec::new();
        let mut queued = false;
        for (seq, task_type, attempts, extras) in exhausted {
            let id = self.ids.id(seq).to_string();
            let ending = worker_lost(&id, &task_type, attempts, extras.as_deref());
            let fence = Fence::Attempt(attempts);
            if let Some(delivery) = complete_in_tx(&mut tx, &id, seq, fence, &ending).await? {
                queued |= delivery;
                failed.push(id);
            }
        }
        tx.commit().await?;
        self.wakeups.after_recovery(requeued, queued);
        Ok((requeued, failed))
    }
}
