use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use futures::future::BoxFuture;
use sqlx::sqlite::SqliteRow;
use sqlx::{FromRow, Row, SqliteConnection};
use uuid::Uuid;

use super::batch::to_json;
use super::ids::{TaskIds, TaskKey};
use super::{now_ms, LiveKey, Store, StoreError, StoreResult};
pub use crate::domain::Outcome;
use crate::domain::TaskStatus;

/// A task as submitted and validated. Its account is the submitting key's; its id is given
/// when it is stored.
#[derive(Clone, Debug)]
pub struct NewTask {
    pub task_type: &'static str,
    pub prompt: String,
    pub aspect_ratio: String,
    pub process_mode: &'static str,
    pub priority: i64,
    pub seed: i64,
    pub webhook_url: Option<String>,
    pub webhook_secret: Option<String>,
}

/// A task as stored, with the state of its webhook delivery if there is one.
#[derive(Clone, Debug, FromRow)]
pub struct TaskRow {
    /// The public id (filled in from `seq` and `legacy_id` after reading).
    #[sqlx(skip)]
    pub id: String,
    pub seq: i64,
    pub legacy_id: Option<String>,
    pub task_type: String,
    pub status: String,
    pub percentage: i64,
    pub prompt: String,
    pub aspect_ratio: String,
    pub process_mode: String,
    pub seed: i64,
    pub attempts: i64,
    pub created_at: i64,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    pub original_image_url: Option<String>,
    pub image_urls: Option<String>,
    pub error: Option<String>,
    pub webhook_url: Option<String>,
    pub wh_status: Option<String>,
    pub wh_attempts: Option<i64>,
    pub wh_last_status_code: Option<i64>,
    pub wh_last_error: Option<String>,
    pub wh_next_attempt_at: Option<i64>,
}

/// What a worker gets when it claims a task.
#[derive(Clone, Debug, FromRow)]
pub struct ClaimedTask {
    /// Where the task is stored: what every fenced change names.
    pub seq: i64,
    /// The public id (filled in after reading).
    #[sqlx(skip)]
    pub id: String,
    pub legacy_id: Option<String>,
    pub account_id: String,
    pub task_type: String,
    pub prompt: String,
    pub aspect_ratio: String,
    pub seed: i64,
    /// The attempt number this claim holds; every later change is fenced by it.
    pub attempts: i64,
}

const TASK_COLUMNS: &str =
    "t.seq, t.id AS legacy_id, t.task_type, t.status, t.percentage, t.prompt, t.aspect_ratio,
    t.process_mode, t.seed, t.attempts, t.created_at, t.started_at, t.finished_at,
    t.original_image_url, t.image_urls, t.error, t.webhook_url,
    d.status AS wh_status, d.attempts AS wh_attempts, d.last_status_code AS wh_last_status_code,
    d.last_error AS wh_last_error, d.next_attempt_at AS wh_next_attempt_at";

/// The presented key's row (when live), then the tasks asked for, each with its delivery.
const KEY_THEN_TASKS: &str = "SELECT k.id AS key_id, k.account_id AS key_account_id,
        k.last_used_at AS key_last_used_at,";
const KEY_JOINS: &str = "LEFT JOIN webhook_deliveries d ON d.task_seq = t.seq
     WHERE k.key_hash = ?1 AND k.revoked_at IS NULL";

/// The task whose public id is given as parameters `?{seq}` (what it decrypts to, see
/// `TaskKey`) and `?{legacy}` (the id as text, for tasks stored before ids came from `seq`).
pub(super) fn by_id(seq: u8, legacy: u8) -> String {
    format!("((t.seq = ?{seq} AND t.id IS NULL) OR t.id = ?{legacy})")
}

const ACTIVE: &str = "('starting', 'processing')";

impl Store {
    /// Store a new task submitted with the key hashed `key_hash`, unless that key is no longer
    /// live or the account already has `max_active` tasks queued or running; both are checked
    /// in the transaction that inserts. Durable when it returns `Queued`. Concurrent calls share
    /// a transaction (see `batch.rs`).
    pub async fn insert_task(
        &self,
        task: &NewTask,
        key_hash: &[u8; 32],
        max_active: u32,
    ) -> StoreResult<Submitted> {
        self.submits
            .write(InsertTask {
                task: task.clone(),
                key_hash: *key_hash,
                max_active,
            })
            .await
    }

    /// The task `task_id` if it is the key's account's, checked in one statement with the key
    /// itself: None when the key is not live, else the key and the task if found.
    pub async fn task_for_key(
        &self,
        key_hash: &[u8; 32],
        task_id: &Uuid,
    ) -> StoreResult<Option<(LiveKey, Option<TaskRow>)>> {
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

    /// The key's account's tasks among `ids` (in no particular order), checked in one statement
    /// with the key itself: None when the key is not live.
    pub async fn tasks_for_key(
        &self,
        key_hash: &[u8; 32],
        ids: &[Uuid],
    ) -> StoreResult<Option<(LiveKey, Vec<TaskRow>)>> {
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

    /// One of the account's tasks, or None when it does not exist or belongs to someone else.
    pub async fn task_for_account(
        &self,
        account_id: &str,
        task_id: &Uuid,
    ) -> StoreResult<Option<TaskRow>> {
        let TaskKey { seq, legacy } = self.ids.key(task_id);
        let row: Option<TaskRow> = sqlx::query_as(&format!(
            "SELECT {TASK_COLUMNS} FROM tasks t LEFT JOIN webhook_deliveries d ON d.task_seq = t.seq
             WHERE {} AND t.account_id = ?3",
            by_id(1, 2)
        ))
        .bind(seq)
        .bind(legacy)
        .bind(account_id)
        .fetch_optional(&self.reader)
        .await?;
        Ok(row.map(|row| row.with_id(&self.ids)))
    }

    /// Claim the next pending task (turbo before fast before relax, oldest first) with a lease.
    pub async fn claim_task(&self, owner: &str, lease_ms: i64) -> StoreResult<Option<ClaimedTask>> {
        let now = now_ms();
        let claimed: Option<ClaimedTask> = sqlx::query_as(
            "UPDATE tasks SET status = 'starting', attempts = attempts + 1, lease_owner = ?,
                 lease_expires_at = ?, started_at = COALESCE(started_at, ?), percentage = 0
             WHERE seq = (SELECT seq FROM tasks WHERE status = 'pending'
                          ORDER BY priority, seq LIMIT 1)
             RETURNING seq, id AS legacy_id, account_id, task_type, prompt, aspect_ratio, seed,
                 attempts",
        )
        .bind(owner)
        .bind(now + lease_ms)
        .bind(now)
        .fetch_optional(&self.writer)
        .await?;
        Ok(claimed.map(|mut task| {
            task.id = self.ids.of_row(task.seq, task.legacy_id.as_deref());
            task
        }))
    }

    /// Move a claimed task to `processing`. False when the claim is no longer ours.
    pub async fn mark_processing(
        &self,
        seq: i64,
        attempt: i64,
        lease_ms: i64,
    ) -> StoreResult<bool> {
        let done = sqlx::query(
            "UPDATE tasks SET status = 'processing', lease_expires_at = ?
             WHERE seq = ? AND attempts = ? AND status = 'starting'",
        )
        .bind(now_ms() + lease_ms)
        .bind(seq)
        .bind(attempt)
        .execute(&self.writer)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Renew the lease and record progress. False when the claim is no longer ours.
    pub async fn heartbeat(
        &self,
        seq: i64,
        attempt: i64,
        percentage: i64,
        lease_ms: i64,
    ) -> StoreResult<bool> {
        let done = sqlx::query(&format!(
            "UPDATE tasks SET lease_expires_at = ?, percentage = MAX(percentage, ?)
             WHERE seq = ? AND attempts = ? AND status IN {ACTIVE}"
        ))
        .bind(now_ms() + lease_ms)
        .bind(percentage.clamp(0, 99))
        .bind(seq)
        .bind(attempt)
        .execute(&self.writer)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Record the final state and, in the same transaction, queue the webhook delivery.
    /// False (and nothing written) when the claim is no longer ours.
    pub async fn complete_task(
        &self,
        seq: i64,
        attempt: i64,
        outcome: &Outcome,
    ) -> StoreResult<bool> {
        let mut tx = self.writer.begin().await?;
        let done = complete_in_tx(&mut tx, &self.ids, seq, attempt, outcome).await?;
        tx.commit().await?;
        Ok(done)
    }

    /// Give a claimed task back to the queue without counting the attempt (graceful shutdown).
    pub async fn release_task(&self, seq: i64, attempt: i64) -> StoreResult<bool> {
        let done = sqlx::query(&format!(
            "UPDATE tasks SET status = 'pending', attempts = attempts - 1, lease_owner = NULL,
                 lease_expires_at = NULL, percentage = 0
             WHERE seq = ? AND attempts = ? AND status IN {ACTIVE}"
        ))
        .bind(seq)
        .bind(attempt)
        .execute(&self.writer)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Tasks whose lease ran out go back to the queue, or fail once they used `max_attempts`.
    /// Returns how many were requeued and the ids of those that failed.
    pub async fn recover_expired(&self, max_attempts: u32) -> StoreResult<(u64, Vec<String>)> {
        let now = now_ms();
        let mut tx = self.writer.begin().await?;
        let requeued = sqlx::query(&format!(
            "UPDATE tasks SET status = 'pending', lease_owner = NULL, lease_expires_at = NULL,
                 percentage = 0
             WHERE status IN {ACTIVE} AND lease_expires_at < ? AND attempts < ?"
        ))
        .bind(now)
        .bind(i64::from(max_attempts))
        .execute(&mut *tx)
        .await?
        .rows_affected();
        let exhausted: Vec<(i64, Option<String>, i64)> = sqlx::query_as(&format!(
            "SELECT seq, id, attempts FROM tasks
             WHERE status IN {ACTIVE} AND lease_expires_at < ? AND attempts >= ? LIMIT 500"
        ))
        .bind(now)
        .bind(i64::from(max_attempts))
        .fetch_all(&mut *tx)
        .await?;
        let mut failed = Vec::new();
        for (seq, legacy_id, attempts) in exhausted {
            let outcome = Outcome::Failed {
                error: format!(
                    "worker lost: the task was interrupted {attempts} times and will not be retried"
                ),
            };
            if complete_in_tx(&mut tx, &self.ids, seq, attempts, &outcome).await? {
                failed.push(self.ids.of_row(seq, legacy_id.as_deref()));
            }
        }
        tx.commit().await?;
        Ok((requeued, failed))
    }

    /// Counts of tasks by status, for health and metrics.
    pub async fn task_counts(&self) -> StoreResult<Vec<(String, i64)>> {
        Ok(
            sqlx::query_as("SELECT status, COUNT(*) FROM tasks GROUP BY status ORDER BY status")
                .fetch_all(&self.reader)
                .await?,
        )
    }
}

/// Split the rows of a `KEY_THEN_TASKS` query: no row means the key is not live; a row without a
/// task id is the key alone (nothing found).
fn key_and_tasks(
    rows: &[SqliteRow],
    ids: &TaskIds,
) -> StoreResult<Option<(LiveKey, Vec<TaskRow>)>> {
    let Some(first) = rows.first() else {
        return Ok(None);
    };
    let key = LiveKey {
        key_id: first.try_get("key_id")?,
        account_id: first.try_get("key_account_id")?,
        last_used_at: first.try_get("key_last_used_at")?,
    };
    let mut tasks = Vec::with_capacity(rows.len());
    for row in rows {
        if row.try_get::<Option<i64>, _>("seq")?.is_some() {
            tasks.push(TaskRow::from_row(row)?.with_id(ids));
        }
    }
    Ok(Some((key, tasks)))
}

impl TaskRow {
    fn with_id(mut self, ids: &TaskIds) -> Self {
        self.id = ids.of_row(self.seq, self.legacy_id.as_deref());
        self
    }
}

/// What ending a task reads back from its row.
#[derive(FromRow)]
struct Ended {
    legacy_id: Option<String>,
    account_id: String,
    task_type: String,
    webhook_url: Option<String>,
    webhook_secret: Option<String>,
}

/// Write the final state of task `seq` if attempt `attempt` still holds it, and queue its webhook
/// in the same transaction. False (and nothing written) when the claim is no longer ours.
async fn complete_in_tx(
    conn: &mut SqliteConnection,
    ids: &TaskIds,
    seq: i64,
    attempt: i64,
    outcome: &Outcome,
) -> StoreResult<bool> {
    let now = now_ms();
    let (status, original, urls, error, images) = match outcome {
        Outcome::Finished {
            original_image_url,
            image_urls,
        } => (
            TaskStatus::Finished,
            Some(original_image_url.clone()),
            Some(serde_json::to_string(image_urls).expect("urls serialize")),
            None,
            image_urls.len() as i64,
        ),
        Outcome::Failed { error } => (TaskStatus::Failed, None, None, Some(error.clone()), 0),
    };
    let row: Option<Ended> = sqlx::query_as(&format!(
        "UPDATE tasks SET status = ?, percentage = ?, finished_at = ?, original_image_url = ?,
             image_urls = ?, error = ?, lease_owner = NULL, lease_expires_at = NULL
         WHERE seq = ? AND attempts = ? AND status IN {ACTIVE}
         RETURNING id AS legacy_id, account_id, task_type, webhook_url, webhook_secret"
    ))
    .bind(status.as_str())
    .bind(if status == TaskStatus::Finished {
        100
    } else {
        0
    })
    .bind(now)
    .bind(original)
    .bind(urls)
    .bind(error)
    .bind(seq)
    .bind(attempt)
    .fetch_optional(&mut *conn)
    .await?;
    let Some(Ended {
        legacy_id,
        account_id,
        task_type,
        webhook_url,
        webhook_secret,
    }) = row
    else {
        return Ok(false);
    };
    let id = ids.of_row(seq, legacy_id.as_deref());
    if images > 0 {
        sqlx::query("UPDATE accounts SET total_images = total_images + ? WHERE id = ?")
            .bind(images)
            .bind(&account_id)
            .execute(&mut *conn)
            .await?;
    }
    if let Some(url) = webhook_url {
        sqlx::query(
            "INSERT INTO webhook_deliveries (id, task_seq, task_id, account_id, url, payload,
                 status, next_attempt_at, created_at, updated_at, webhook_secret)
             VALUES (?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?)",
        )
        // Time-ordered, like `seq`, to keep the outbox's index appending.
        .bind(format!("msg_{}", Uuid::now_v7().simple()))
        .bind(seq)
        .bind(&id)
        .bind(&account_id)
        .bind(url)
        .bind(outcome.webhook_payload(&id, &task_type))
        .bind(now)
        .bind(now)
        .bind(now)
        .bind(&webhook_secret)
        .execute(&mut *conn)
        .await?;
    }
    if webhook_secret.is_some() {
        // It moved to the delivery (claims read it from there); no second copy stays.
        sqlx::query("UPDATE tasks SET webhook_secret = NULL WHERE seq = ?")
            .bind(seq)
            .execute(&mut *conn)
            .await?;
    }
    Ok(true)
}

/// A submit, for the group-commit batcher: insert unless the account already has `max_active`
/// tasks queued or running.
pub(super) struct InsertTask {
    task: NewTask,
    key_hash: [u8; 32],
    max_active: u32,
}

/// What became of a submit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Submitted {
    /// Stored durably, in the queue of the key's account, with this public id.
    Queued { account_id: String, task_id: Uuid },
    /// Nothing stored: the account has its most tasks queued or running.
    QuotaFull,
    /// Nothing stored: the key is unknown or revoked.
    KeyNotLive,
}

/// What the submit batcher keeps: the ids' key, and when it last wrote each key's
/// `last_used_at` (key hash to Unix ms), so that it skips the statement for keys it wrote
/// within `KEY_TOUCH_EVERY_MS`: a round trip to the writer's thread per batch that would change
/// nothing (skipping it raised the submit rate at 64 clients by about 12%). Entries older than
/// that are dropped; the statement's own condition still decides.
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

/// `INSERT` statements for chunks of 1, 2, 4, ... 256 tasks (see `batch::chunks`), bound
/// parameters only.
static INSERT_TASKS: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| {
    // Bound in this order by `apply_all`; a new task is always `pending`.
    let row = "(?, ?, ?, 'pending', ?, ?, ?, ?, ?, ?, ?, ?)";
    super::batch::statements_per_chunk(|n| {
        format!(
            "INSERT INTO tasks (seq, account_id, task_type, status, priority, prompt,
                 aspect_ratio, process_mode, seed, created_at, webhook_url, webhook_secret)
             VALUES {}",
            vec![row; n].join(", ")
        )
    })
});

/// A row of a submit batch's first query: a live key (its hash and account) with the account's
/// count of active tasks, or (no key) the last `seq` given.
type KeyOrLastSeq = (Option<Vec<u8>>, Option<String>, i64);

impl super::batch::Write for InsertTask {
    type Output = Submitted;
    type State = SubmitState;

    /// One transaction. The first round trip to the writer's thread takes the write lock and
    /// reads the last `seq` given and, for the batch's keys that are live, their accounts and
    /// how many tasks each has queued or running. The quota is then decided here, in arrival
    /// order, and each task let in gets the next `seq` (so its public id is known before it is
    /// inserted). The tasks go in with plain bound `INSERT`s (in chunks, see `INSERT_TASKS`);
    /// the accounts' counters of active tasks move by the batch's counts in the same
    /// transaction. Then, after the commit, the keys' `last_used_at`.
    ///
    /// Bound `INSERT`s cost a quarter of what one statement reading the whole batch from JSON
    /// did (callgrind, batches of 34: about 33,000 instructions per task against 136,000,
    /// a per-row trigger for the counter included in the latter).
    fn apply_all<'c>(
        batch: &'c [Self],
        conn: &'c mut SqliteConnection,
        state: &'c mut SubmitState,
    ) -> BoxFuture<'c, StoreResult<Vec<Submitted>>> {
        Box::pin(async move {
            let now = now_ms();
            let keys: BTreeSet<&[u8; 32]> = batch.iter().map(|w| &w.key_hash).collect();
            let keys: Vec<String> = keys.into_iter().map(hex::encode).collect();
            // The first row is the last `seq` (no key); then one row per live key.
            let found: Result<Vec<KeyOrLastSeq>, _> = sqlx::query_as(
                "BEGIN IMMEDIATE;
                 SELECT NULL, NULL,
                     max(COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'tasks'), 0),
                         COALESCE((SELECT max(seq) FROM tasks), 0));
                 SELECT k.key_hash, k.account_id, a.active_tasks
                 FROM api_keys k JOIN accounts a ON a.id = k.account_id
                 WHERE k.key_hash IN (SELECT unhex(value) FROM json_each(?))
                   AND k.revoked_at IS NULL;",
            )
            .bind(to_json(&keys))
            .fetch_all(&mut *conn)
            .await;
            let found = match found {
                Ok(found) => found,
                Err(e) => return Err(rolled_back(conn, e).await),
            };
            let mut last = 0;
            let mut live: HashMap<[u8; 32], String> = HashMap::new();
            let mut active: HashMap<String, (i64, i64)> = HashMap::new();
            for (key, account, n) in found {
                match (key.and_then(|k| <[u8; 32]>::try_from(k).ok()), account) {
                    (Some(key), Some(account)) => {
                        active.insert(account.clone(), (n, 0));
                        live.insert(key, account);
                    }
                    _ => last = n,
                }
            }
            // The quota, in arrival order; the batch's own earlier tasks count.
            let mut next_seq = last;
            let outcomes: Vec<Result<(i64, &str), Submitted>> = batch
                .iter()
                .map(|w| {
                    let Some(account) = live.get(&w.key_hash) else {
                        return Err(Submitted::KeyNotLive);
                    };
                    let (before, added) = active.get_mut(account).expect("a live key's account");
                    if *before + *added >= i64::from(w.max_active) {
                        return Err(Submitted::QuotaFull);
                    }
                    *added += 1;
                    next_seq += 1;
                    Ok((next_seq, account.as_str()))
                })
                .collect();
            let accepted: Vec<(&InsertTask, i64, &str)> = batch
                .iter()
                .zip(&outcomes)
                .filter_map(|(w, o)| o.as_ref().ok().map(|&(seq, account)| (w, seq, account)))
                .collect();
            for (k, chunk) in super::batch::chunks(&accepted) {
                let mut insert = sqlx::query(&INSERT_TASKS[k]);
                for (w, seq, account) in chunk {
                    let t = &w.task;
                    insert = insert
                        .bind(seq)
                        .bind(*account)
                        .bind(t.task_type)
                        .bind(t.priority)
                        .bind(t.prompt.as_str())
                        .bind(t.aspect_ratio.as_str())
                        .bind(t.process_mode)
                        .bind(t.seed)
                        .bind(now)
                        .bind(t.webhook_url.as_deref())
                        .bind(t.webhook_secret.as_deref());
                }
                if let Err(e) = insert.execute(&mut *conn).await {
                    return Err(rolled_back(conn, e).await);
                }
            }
            let counts: Vec<(&str, i64)> = active
                .iter()
                .filter(|(_, (_, added))| *added > 0)
                .map(|(account, (_, added))| (account.as_str(), *added))
                .collect();
            let committed = sqlx::query(
                "UPDATE accounts SET active_tasks = active_tasks + (c.value->>1)
                 FROM json_each(?) AS c WHERE accounts.id = c.value->>0;
                 COMMIT;",
            )
            .bind(to_json(&counts))
            .execute(&mut *conn)
            .await;
            if let Err(e) = committed {
                return Err(rolled_back(conn, e).await);
            }
            // The inserts are committed: from here on no error may fail the batch, or the
            // batcher would apply these writes again.
            let touched = &mut state.touched;
            touched.retain(|_, at| *at > now - KEY_TOUCH_EVERY_MS);
            let used: BTreeSet<&[u8; 32]> = accepted
                .iter()
                .map(|(w, _, _)| &w.key_hash)
                .filter(|hash| !touched.contains_key(*hash))
                .collect();
            if !used.is_empty() {
                let hex: Vec<String> = used.iter().map(hex::encode).collect();
                let written = sqlx::query(
                    "UPDATE api_keys SET last_used_at = ?1
                     WHERE key_hash IN (SELECT unhex(value) FROM json_each(?2))
                       AND (last_used_at IS NULL OR last_used_at <= ?1 - ?3)",
                )
                .bind(now)
                .bind(to_json(&hex))
                .bind(KEY_TOUCH_EVERY_MS)
                .execute(&mut *conn)
                .await;
                match written {
                    Ok(_) => touched.extend(used.into_iter().map(|hash| (*hash, now))),
                    Err(e) => tracing::warn!(error = %e, "could not record key use"),
                }
            }
            Ok(outcomes
                .into_iter()
                .map(|o| match o {
                    Ok((seq, account)) => Submitted::Queued {
                        account_id: account.to_string(),
                        task_id: state.ids.id(seq),
                    },
                    Err(refused) => refused,
                })
                .collect())
        })
    }
}

/// A statement of a transaction failed: undo whatever it holds (none may be open if `BEGIN`
/// itself failed; that error is the one to report).
pub(super) async fn rolled_back(conn: &mut SqliteConnection, e: sqlx::Error) -> StoreError {
    let _ = sqlx::query("ROLLBACK").execute(&mut *conn).await;
    e.into()
}

/// `last_used_at` is written at most this often per key.
pub const KEY_TOUCH_EVERY_MS: i64 = 60_000;
