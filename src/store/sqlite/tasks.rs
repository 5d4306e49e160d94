use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension};
use uuid::Uuid;

use super::super::ids::TaskKey;
use super::writer::Durability;
use super::{to_json, SqliteStore};
use crate::store::idempotency::{KeyedGroup, StoredAnswer, STORED_STATUS};
use crate::store::rows::{key_and_tasks, ClaimedRow, TaskRow};
use crate::store::{
    accepted_body, chunks, now_ms, worker_lost, ClaimedTask, Ending, Fence, Idempotency, LiveKey,
    NewTask, Quota, Refused, StoreResult, Submitted, Task, TaskIds, TaskQueue, KEY_TOUCH_EVERY_MS,
    RUNNING,
};

pub(super) const TASK_COLUMNS: &str =
    "t.seq, t.id AS legacy_id, t.task_type, t.params, t.parent_seq, p.id AS parent_legacy_id,
    t.status, t.percentage, t.prompt, t.aspect_ratio,
    t.process_mode, t.seed, t.attempts, t.created_at, t.started_at, t.finished_at,
    t.grid_key, t.image_keys, t.result, t.error, t.webhook_url,
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
                             (SELECT p.id FROM tasks p WHERE p.seq = tasks.parent_seq)",
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
                let exhausted: Vec<(i64, Option<String>, String, i64)> = conn
                    .prepare_cached(&format!(
                        "SELECT seq, id, task_type, attempts FROM tasks
                         WHERE status IN {ACTIVE} AND lease_expires_at < ? AND attempts >= ?
                         LIMIT 500"
                    ))?
                    .query_map(params![now, max_attempts], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                    })?
                    .collect::<Result<_, _>>()?;
                let mut failed = Vec::new();
                let mut queued = false;
                for (seq, legacy_id, task_type, attempts) in exhausted {
                    let id = ids.of_row(seq, legacy_id.as_deref());
                    let ending = worker_lost(&id, &task_type, attempts);
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
            super::accounts::ledger(conn, &account_id, Some(seq), cost, "refund", now)?;
        }
    }
    let images = ending.images();
    if images > 0 {
        conn.prepare_cached("UPDATE accounts SET total_images = total_images + ? WHERE id = ?")?
            .execute(params![images, account_id])?;
    }
    let Some(url) = webhook_url else {
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

/// A submit, for the writer's group of submits: insert unless the account already has
/// `max_active` tasks queued or running.
pub(super) struct InsertTask {
    /// Boxed: the writer's queue of jobs is as large as its largest job.
    task: Box<NewTask>,
    key_hash: [u8; 32],
    max_active: u32,
}

/// What the writer keeps for submits from one drain to the next: the ids' key, and when it last
/// wrote each key's `last_used_at` (key hash to Unix ms), so that it skips the statement for keys
/// it wrote within `KEY_TOUCH_EVERY_MS` (it would change nothing). Entries older than that are
/// dropped; the statement's own condition still decides.
pub(super) struct SubmitState {
    ids: Arc<TaskIds>,
    touched: HashMap<[u8; 32], i64>,
}

impl SubmitState {
    pub(super) fn new(ids: Arc<TaskIds>) -> Self {
        SubmitState {
            ids,
            touched: HashMap::new(),
        }
    }
}

/// Store a group of submits, inside the writer's transaction. It reads the last `seq` given
/// and, for the group's keys that are live, their accounts and how many tasks each has queued
/// or running. The quota is then decided here, in arrival order (the group's own earlier tasks
/// count), and each task let in gets the next `seq`, so its public id is known before it is
/// inserted. The accounts' counters of active tasks move by the group's counts, and the keys'
/// `last_used_at` at most once a minute.
pub(super) fn apply_submits(
    conn: &Connection,
    batch: &[InsertTask],
    state: &mut SubmitState,
) -> rusqlite::Result<Vec<Submitted>> {
    let now = now_ms();
    let last: i64 = conn
        .prepare_cached(
            "SELECT max(COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'tasks'), 0),
                        COALESCE((SELECT max(seq) FROM tasks), 0))",
        )?
        .query_row([], |r| r.get(0))?;
    let mut live: HashMap<[u8; 32], String> = HashMap::new();
    let mut quota = Quota::default();
    {
        let mut key = conn.prepare_cached(
            "SELECT k.account_id, a.active_tasks, a.credits
             FROM api_keys k JOIN accounts a ON a.id = k.account_id
             WHERE k.key_hash = ? AND k.revoked_at IS NULL AND a.disabled = 0",
        )?;
        let hashes: BTreeSet<&[u8; 32]> = batch.iter().map(|w| &w.key_hash).collect();
        for hash in hashes {
            let found = key
                .query_row([hash.as_slice()], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, i64>(1)?,
                        r.get::<_, Option<i64>>(2)?,
                    ))
                })
                .optional()?;
            if let Some((account, n, credits)) = found {
                quota.set(&account, n, credits);
                live.insert(*hash, account);
            }
        }
    }
    let answers = stored_answers(conn, batch, &live)?;
    let mut keyed = KeyedGroup::default();
    // The quota, in arrival order; the group's own earlier tasks count. A keyed submit answered
    // from its key (a replay, a reused key, a duplicate) is not counted.
    let mut next_seq = last;
    let outcomes: Vec<Result<(i64, &str, i64), Submitted>> = batch
        .iter()
        .map(|w| {
            let Some(account) = live.get(&w.key_hash) else {
                return Err(Submitted::KeyNotLive);
            };
            if let Some(idem) = &w.task.idempotency {
                let stored = answers.get(&(account.clone(), idem.key.clone()));
                if let Some(answer) = keyed.decide(account, idem, stored, now) {
                    return Err(answer);
                }
            }
            let charged = quota
                .admit(account, w.max_active, w.task.cost)
                .map_err(|refused| match refused {
                    Refused::Quota => Submitted::QuotaFull,
                    Refused::Credits => Submitted::InsufficientCredits,
                })?;
            next_seq += 1;
            Ok((next_seq, account.as_str(), charged))
        })
        .collect();
    // Several rows per statement: an `INSERT` sets up its cursors and, for the AUTOINCREMENT
    // key, writes `sqlite_sequence` once per statement, not once per row.
    let rows: Vec<(&NewTask, i64, &str, i64)> = batch
        .iter()
        .zip(&outcomes)
        .filter_map(|(w, o)| {
            o.as_ref()
                .ok()
                .map(|&(seq, account, charged)| (&*w.task, seq, account, charged))
        })
        .collect();
    for (k, chunk) in chunks(&rows, INSERT_CHUNK_MAX) {
        let mut insert = conn.prepare_cached(&INSERT_TASKS[k])?;
        let mut values: Vec<&dyn rusqlite::ToSql> = Vec::with_capacity(chunk.len() * 14);
        // The stored forms of the typed fields, kept alive beside the borrowed values.
        let stored: Vec<(&str, Option<String>, String, &str)> = chunk
            .iter()
            .map(|(t, _, _, _)| {
                (
                    t.task_type().as_str(),
                    t.operation.to_params(),
                    t.aspect_ratio.to_string(),
                    t.process_mode.as_str(),
                )
            })
            .collect();
        for ((t, seq, account, charged), (task_type, params, aspect_ratio, process_mode)) in
            chunk.iter().zip(&stored)
        {
            values.extend_from_slice(&[
                seq as &dyn rusqlite::ToSql,
                account,
                task_type,
                params,
                &t.parent_seq,
                &t.priority,
                &t.prompt,
                aspect_ratio,
                process_mode,
                &t.seed,
                &now,
                &t.webhook_url,
                &t.webhook_secret,
                charged,
            ]);
        }
        insert.execute(rusqlite::params_from_iter(values))?;
    }
    remember_answers(conn, batch, &outcomes, &state.ids, now)?;
    // Each charge is one ledger row, and the balances move once per account.
    {
        let mut charge =
            conn.prepare_cached("UPDATE accounts SET credits = credits - ? WHERE id = ?")?;
        for (account, spent) in quota.charged() {
            charge.execute(params![spent, account])?;
        }
        for &(_, seq, account, charged) in rows.iter().filter(|r| r.3 > 0) {
            super::accounts::ledger(conn, account, Some(seq), -charged, "submit", now)?;
        }
    }
    {
        let mut count = conn
            .prepare_cached("UPDATE accounts SET active_tasks = active_tasks + ? WHERE id = ?")?;
        for (account, added) in quota.added() {
            count.execute(params![added, account])?;
        }
    }
    let touched = &mut state.touched;
    touched.retain(|_, at| *at > now - KEY_TOUCH_EVERY_MS);
    let used: BTreeSet<&[u8; 32]> = batch
        .iter()
        .zip(&outcomes)
        .filter(|(_, outcome)| outcome.is_ok())
        .map(|(w, _)| &w.key_hash)
        .filter(|hash| !touched.contains_key(*hash))
        .collect();
    if !used.is_empty() {
        let mut touch = conn.prepare_cached(
            "UPDATE api_keys SET last_used_at = ?1
             WHERE key_hash = ?2 AND (last_used_at IS NULL OR last_used_at <= ?1 - ?3)",
        )?;
        for hash in used {
            touch.execute(params![now, hash.as_slice(), KEY_TOUCH_EVERY_MS])?;
            touched.insert(*hash, now);
        }
    }
    Ok(outcomes
        .into_iter()
        .map(|outcome| match outcome {
            Ok((seq, account, _)) => Submitted::Queued {
                account_id: account.to_string(),
                task_id: state.ids.id(seq),
            },
            Err(refused) => refused,
        })
        .collect())
}

/// The stored answers of the group's keyed submits from live keys, by (account, key). No
/// statement runs for a group without keys.
fn stored_answers(
    conn: &Connection,
    batch: &[InsertTask],
    live: &HashMap<[u8; 32], String>,
) -> rusqlite::Result<HashMap<(String, String), StoredAnswer>> {
    let mut answers = HashMap::new();
    for w in batch {
        let (Some(idem), Some(account)) = (&w.task.idempotency, live.get(&w.key_hash)) else {
            continue;
        };
        let pair = (account.clone(), idem.key.clone());
        if answers.contains_key(&pair) {
            continue;
        }
        let found = conn
            .prepare_cached(
                "SELECT fingerprint, task_id, status, body, expires_at FROM idempotency_keys
                 WHERE account_id = ? AND idempotency_key = ?",
            )?
            .query_row(params![account, idem.key], |r| {
                Ok(StoredAnswer {
                    fingerprint: r.get(0)?,
                    task_id: r.get(1)?,
                    status: r.get(2)?,
                    body: r.get(3)?,
                    expires_at: r.get(4)?,
                })
            })
            .optional()?;
        if let Some(found) = found {
            answers.insert(pair, found);
        }
    }
    Ok(answers)
}

/// Store the answer of each keyed submit let in, over an expired one, in the transaction that
/// inserts its task; several rows per statement, as the tasks.
fn remember_answers(
    conn: &Connection,
    batch: &[InsertTask],
    outcomes: &[Result<(i64, &str, i64), Submitted>],
    ids: &TaskIds,
    now: i64,
) -> rusqlite::Result<()> {
    type Answer<'a> = (&'a str, &'a Idempotency, String, String, i64);
    let rows: Vec<Answer> = batch
        .iter()
        .zip(outcomes)
        .filter_map(|(w, outcome)| {
            let (Some(idem), Ok((seq, account, _))) = (&w.task.idempotency, outcome) else {
                return None;
            };
            let task_id = ids.id(*seq);
            let expires_at = now.saturating_add(idem.ttl_ms);
            Some((
                *account,
                idem,
                task_id.to_string(),
                accepted_body(&task_id),
                expires_at,
            ))
        })
        .collect();
    for (k, chunk) in chunks(&rows, INSERT_CHUNK_MAX) {
        let mut insert = conn.prepare_cached(&REMEMBER_ANSWERS[k])?;
        let mut values: Vec<&dyn rusqlite::ToSql> = Vec::with_capacity(chunk.len() * 8);
        let fingerprints: Vec<&[u8]> = chunk.iter().map(|r| r.1.fingerprint.as_slice()).collect();
        for ((account, idem, task_id, body, expires_at), fingerprint) in
            chunk.iter().zip(&fingerprints)
        {
            values.extend_from_slice(&[
                account as &dyn rusqlite::ToSql,
                &idem.key,
                fingerprint,
                task_id,
                &STORED_STATUS,
                body,
                &now,
                expires_at,
            ]);
        }
        insert.execute(rusqlite::params_from_iter(values))?;
    }
    Ok(())
}

/// The `INSERT` of 2^k idempotency keys' answers at index k, over expired ones.
static REMEMBER_ANSWERS: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| {
    let row = "(?, ?, ?, ?, ?, ?, ?, ?)";
    (0..=INSERT_CHUNK_MAX.ilog2())
        .map(|k| {
            format!(
                "INSERT INTO idempotency_keys (account_id, idempotency_key, fingerprint, task_id,
                     status, body, created_at, expires_at)
                 VALUES {}
                 ON CONFLICT (account_id, idempotency_key) DO UPDATE SET
                     fingerprint = excluded.fingerprint, task_id = excluded.task_id,
                     status = excluded.status, body = excluded.body,
                     created_at = excluded.created_at, expires_at = excluded.expires_at
                 WHERE idempotency_keys.expires_at <= excluded.created_at",
                vec![row; 1 << k].join(", ")
            )
        })
        .collect()
});

/// Most tasks one `INSERT` statement takes; a group is cut into chunks of 1, 2, 4, ... of them
/// (`store::chunks`), so the writer's statement cache holds one statement per chunk size.
const INSERT_CHUNK_MAX: usize = 64;

/// The `INSERT` for 2^k tasks at index k, bound parameters only, in `apply_submits`' order.
static INSERT_TASKS: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| {
    let row = "(?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?, ?, ?, ?, ?, ?)";
    (0..=INSERT_CHUNK_MAX.ilog2())
        .map(|k| {
            format!(
                "INSERT INTO tasks (seq, account_id, task_type, params, parent_seq, status,
                     priority, prompt,
                     aspect_ratio, process_mode, seed, created_at, webhook_url, webhook_secret,
                     cost)
                 VALUES {}",
                vec![row; 1 << k].join(", ")
            )
        })
        .collect()
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn there_is_an_insert_per_chunk_size() {
        assert_eq!(INSERT_TASKS.len(), 7);
        assert_eq!(INSERT_TASKS[2].matches("'pending'").count(), 4);
    }
}
