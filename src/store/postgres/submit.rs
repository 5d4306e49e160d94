//! Submits, grouped: concurrent submits on one node share a transaction and a multi-row insert,
//! as on SQLite. One drainer per node takes groups from the queue: while its group commits,
//! the submits that arrive wait in the queue and make the next group.
//!
//! The quota holds across nodes because each group locks the rows of the accounts it submits
//! for (`FOR UPDATE`, in id order, so that two groups never wait on each other in a cycle) before
//! it reads their counts of active tasks, and moves those counts before it commits.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, Executor, PgConnection, PgPool};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::channels::new_tasks_note;
use super::task_columns::Rows;
use crate::domain::account_webhook::credits_low_payload;
use crate::store::error::postgres_session_ended;
use crate::store::idempotency::{KeyedGroup, StoredAnswer};
use crate::store::queue::next_turn;
use crate::store::sql::account_webhooks::{delivery_id, QUEUE_CREDITS_LOW};
use crate::store::{
    accepted_body, now_ms, Idempotency, NewTask, PendingLimits, Quota, Refused, StoreError,
    StoreResult, Submitted, TaskIds, KEY_TOUCH_EVERY_MS,
};

/// Most submits one transaction takes.
const MAX_GROUP: usize = 256;
/// Submits that may wait for a drainer; past it, callers wait to queue.
const QUEUE: usize = 4096;

/// One submit, as a group (or a batch) holds it.
pub(super) struct Submit {
    pub(super) task: NewTask,
    pub(super) key_hash: [u8; 32],
    pub(super) limits: PendingLimits,
}

struct Job {
    submit: Submit,
    reply: oneshot::Sender<StoreResult<Submitted>>,
}

pub(super) struct Submitter {
    queue: mpsc::Sender<Job>,
    stop: CancellationToken,
}

impl Submitter {
    /// Start the drainer on a thread of its own, with its own connection to the server.
    pub(super) fn start(
        pool: &PgPool,
        ids: Arc<TaskIds>,
        connect_timeout: Duration,
    ) -> std::io::Result<Submitter> {
        let (queue, jobs) = mpsc::channel(QUEUE);
        let stop = CancellationToken::new();
        let held = Held {
            conn: None,
            options: pool.connect_options(),
            connect_timeout,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        // One group in flight per node: groups for one account commit one after another
        // whatever their number (they take its row's lock), so a second drainer only waited on
        // that lock and cut the waiting submits into more, smaller groups, each paying for a
        // commit (docs/benchmarks.md, "PostgreSQL submits: one drainer"). Its thread and
        // connection are its own because each of a group's round trips used to wait, after
        // the server had answered, behind the request tasks in the runtime's queue
        // ("PostgreSQL submits: the drainer's own thread").
        let drainer = drain(held, ids, jobs, stop.clone());
        std::thread::Builder::new()
            .name("easel-pg-submits".into())
            .spawn(move || runtime.block_on(drainer))?;
        Ok(Submitter { queue, stop })
    }

    pub(super) async fn submit(
        &self,
        task: &NewTask,
        key_hash: &[u8; 32],
        limits: &PendingLimits,
    ) -> StoreResult<Submitted> {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            submit: Submit {
                task: task.clone(),
                key_hash: *key_hash,
                limits: limits.clone(),
            },
            reply,
        };
        let closed = || StoreError::unavailable("the store is closed");
        self.queue.send(job).await.map_err(|_| closed())?;
        answer.await.map_err(|_| closed())?
    }

    /// Stop taking groups; a group already taken commits (or fails) and answers first.
    pub(super) async fn close(&self) {
        self.stop.cancel();
    }
}

async fn drain(
    mut held: Held,
    ids: Arc<TaskIds>,
    mut jobs: mpsc::Receiver<Job>,
    stop: CancellationToken,
) {
    loop {
        let group = {
            let first = tokio::select! {
                first = jobs.recv() => first,
                _ = stop.cancelled() => None,
            };
            let Some(first) = first else { break };
            let mut group = vec![first];
            while group.len() < MAX_GROUP {
                match jobs.try_recv() {
                    Ok(job) => group.push(job),
                    Err(_) => break,
                }
            }
            group
        };
        let (submits, replies): (Vec<Submit>, Vec<_>) =
            group.into_iter().map(|j| (j.submit, j.reply)).unzip();
        match held.apply(&ids, &submits).await {
            Ok(outcomes) => answer(replies, outcomes.into_iter().map(Ok)),
            // A fault in one row must not fail the others: try each alone.
            Err(StoreError::Other(_)) if submits.len() > 1 => {
                for (submit, reply) in submits.iter().zip(replies) {
                    let alone = held
                        .apply(&ids, std::slice::from_ref(submit))
                        .await
                        .map(|mut o| o.remove(0));
                    let _ = reply.send(alone);
                }
            }
            Err(e) => {
                let n = submits.len();
                answer(replies, std::iter::repeat_n(Err(e), n))
            }
        }
    }
    if let Some(conn) = held.conn.take() {
        let _ = conn.close().await;
    }
}

/// The drainer's connection, kept from one group to the next and opened on the drainer's own
/// runtime, outside the pool (a pooled connection taken for each group cost a ping when it was
/// taken and another when it was given back). Each group's `BEGIN` is its check: when that
/// fails because the connection was lost (the server restarted, or ended it), nothing of the
/// group was sent, so it begins again on a new connection. After any other failure the
/// transaction is rolled back, and the connection kept only if that works.
struct Held {
    conn: Option<PgConnection>,
    options: Arc<PgConnectOptions>,
    connect_timeout: Duration,
}

impl Held {
    async fn apply(&mut self, ids: &TaskIds, group: &[Submit]) -> StoreResult<Vec<Submitted>> {
        let conn = self.begin().await?;
        let applied = match apply(conn, ids, group).await {
            Ok(outcomes) => conn
                .execute("COMMIT")
                .await
                .map(|_| outcomes)
                .map_err(StoreError::from),
            Err(e) => Err(e),
        };
        if applied.is_err() && conn.execute("ROLLBACK").await.is_err() {
            self.conn = None;
        }
        applied
    }

    /// The kept connection (or a new one) inside a transaction just begun.
    async fn begin(&mut self) -> StoreResult<&mut PgConnection> {
        let kept = self.conn.is_some();
        match self.connection().await?.execute("BEGIN").await {
            Ok(_) => {}
            Err(e) if kept && connection_lost(&e) => {
                self.conn = None;
                if let Err(e) = self.connection().await?.execute("BEGIN").await {
                    self.conn = None;
                    return Err(e.into());
                }
            }
            Err(e) => {
                self.conn = None;
                return Err(e.into());
            }
        }
        Ok(self.conn.as_mut().expect("just used"))
    }

    async fn connection(&mut self) -> StoreResult<&mut PgConnection> {
        if self.conn.is_none() {
            let connect = PgConnection::connect_with(&*self.options);
            let conn = tokio::time::timeout(self.connect_timeout, connect)
                .await
                .map_err(|_| StoreError::unavailable("cannot connect to PostgreSQL in time"))??;
            self.conn = Some(conn);
        }
        Ok(self.conn.as_mut().expect("just opened"))
    }
}

fn answer(
    replies: Vec<oneshot::Sender<StoreResult<Submitted>>>,
    outcomes: impl Iterator<Item = StoreResult<Submitted>>,
) {
    for (reply, outcome) in replies.into_iter().zip(outcomes) {
        let _ = reply.send(outcome);
    }
}

/// Whether `e` says the connection is gone: a socket error, or the server ending the session
/// (`postgres_session_ended`).
pub(super) fn connection_lost(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Io(_)) || sql_state(e).is_some_and(|c| postgres_session_ended(&c))
}

/// The SQLSTATE the server answered with, if `e` is the server's error.
pub(super) fn sql_state(e: &sqlx::Error) -> Option<std::borrow::Cow<'_, str>> {
    match e {
        sqlx::Error::Database(db) => db.code(),
        _ => None,
    }
}

/// Store a group of submits in the transaction that [`Held::begin`] began on `conn`: the live
/// keys' accounts locked and their counts read, with a `seq` drawn for each submit by the same
/// statement (so each task's public id is known; a refused submit leaves a gap, which ids do not
/// mind), the quota decided in arrival order, and one statement that inserts every task let in,
/// moves the counts, records the keys' use at most once a minute and notifies idle workers on
/// every node. The accounts' rows stay locked from the `SELECT ... FOR UPDATE` to the commit: two
/// round trips and the commit's flush, no more. The caller commits, or on an error rolls back.
pub(super) async fn apply(
    conn: &mut PgConnection,
    ids: &TaskIds,
    group: &[Submit],
) -> StoreResult<Vec<Submitted>> {
    let now = now_ms();
    let hashes: Vec<Vec<u8>> = group
        .iter()
        .map(|j| j.key_hash)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .map(|h| h.to_vec())
        .collect();
    // With each account, where its next task of each mode stands in line (`store::queue`):
    // its highest waiting turn there (`tasks_account_turns`), and each mode's head, read once;
    // only for the group's modes (`$2`), the others' entries left NULL.
    let modes: Vec<i64> = group
        .iter()
        .map(|j| j.task.priority)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    type Live = (
        Vec<u8>,
        String,
        String,
        Option<i64>,
        i64,
        Option<i64>,
        Vec<Option<i64>>,
        Vec<Option<i64>>,
        Vec<i64>,
        String,
        Option<i64>,
    );
    // The group's seqs are drawn by the same statement (an InitPlan, evaluated once), which
    // saves the group a round trip of its own.
    let live: Vec<Live> = sqlx::query_as(
        "WITH seqs AS MATERIALIZED (
             SELECT array_agg(n ORDER BY n) AS drawn
             FROM (SELECT nextval('task_seq') AS n FROM generate_series(1, $3)) s),
         heads AS (
             SELECT ARRAY(
                 SELECT CASE WHEN m = ANY($2) THEN GREATEST(
                     COALESCE((SELECT turn FROM tasks
                               WHERE status IN ('starting', 'processing') AND priority = m
                               ORDER BY turn DESC LIMIT 1), 0),
                     COALESCE((SELECT turn FROM tasks WHERE status = 'pending' AND priority = m
                               ORDER BY turn LIMIT 1), 0)) END
                 FROM generate_series(0, 2) m ORDER BY m) AS at)
         SELECT k.key_hash, k.account_id, a.plan, a.expires_at, a.active_tasks, a.credits,
             ARRAY(SELECT CASE WHEN m = ANY($2) THEN
                              (SELECT t.turn FROM tasks t
                               WHERE t.account_id = a.id AND t.status = 'pending'
                                 AND t.priority = m
                               ORDER BY t.turn DESC LIMIT 1) END
                   FROM generate_series(0, 2) m ORDER BY m),
             (SELECT at FROM heads),
             (SELECT drawn FROM seqs),
             k.id,
             (SELECT w.credits_low_threshold FROM account_webhooks w WHERE w.account_id = a.id)
         FROM api_keys k JOIN accounts a ON a.id = k.account_id
         WHERE k.key_hash = ANY($1) AND k.revoked_at IS NULL AND NOT a.disabled
         ORDER BY a.id
         FOR UPDATE OF a",
    )
    .bind(&hashes)
    .bind(&modes)
    .bind(group.len() as i64)
    .fetch_all(&mut *conn)
    .await?;
    // No live key: nothing is stored, and no seq was drawn (every submit is refused below).
    let seqs: Vec<i64> = match live.first() {
        Some(row) => row.8.clone(),
        None => vec![0; group.len()],
    };
    let mut quota = Quota::default();
    let mut accounts: HashMap<Vec<u8>, String> = HashMap::new();
    // Each live key's id, which its tasks keep (usage by key).
    let mut key_ids: HashMap<Vec<u8>, String> = HashMap::new();
    let mut lines: HashMap<(String, i64), i64> = HashMap::new();
    let mut expired: std::collections::HashSet<String> = Default::default();
    for (hash, account, plan, expires_at, active, credits, newest, heads, _, key_id, low) in live {
        key_ids.insert(hash.clone(), key_id);
        if expires_at.is_some_and(|at| at <= now) {
            expired.insert(account.clone());
        }
        let limits = group
            .iter()
            .find(|j| j.key_hash.as_slice() == hash.as_slice());
        let max_active = limits.map_or(0, |j| j.limits.of(&plan));
        quota.set(&account, active, max_active, credits);
        quota.watch_low(&account, low);
        for (priority, (newest, head)) in (0..).zip(newest.into_iter().zip(heads)) {
            if let Some(head) = head {
                lines.insert((account.clone(), priority), next_turn(newest, head));
            }
        }
        accounts.insert(hash, account);
    }
    // Read after the accounts' rows are locked, so an earlier group's committed answer is seen.
    let answers = stored_answers(conn, group, &accounts).await?;
    let mut keyed = KeyedGroup::default();
    let mut remembered = Answers::default();
    let mut rows = Rows::default();
    let mut outcomes = Vec::with_capacity(group.len());
    let task_ids = ids.ids(&seqs);
    for ((job, seq), task_id) in group.iter().zip(seqs).zip(task_ids) {
        let Some(account) = accounts.get(job.key_hash.as_slice()) else {
            outcomes.push(Submitted::KeyNotLive);
            continue;
        };
        if expired.contains(account) {
            outcomes.push(Submitted::AccountExpired);
            continue;
        }
        if let Some(idem) = &job.task.idempotency {
            let stored = answers.get(&(account.clone(), idem.key.clone()));
            if let Some(answer) = keyed.decide(account, idem, stored, now) {
                outcomes.push(answer);
                continue;
            }
        }
        let charged = match quota.admit(account, job.task.cost) {
            Ok(charged) => charged,
            Err(Refused::Quota) => {
                outcomes.push(Submitted::QuotaFull);
                continue;
            }
            Err(Refused::Credits) => {
                outcomes.push(Submitted::InsufficientCredits);
                continue;
            }
        };
        let line = lines
            .entry((account.clone(), job.task.priority))
            .or_insert(0);
        let key_id = key_ids
            .get(job.key_hash.as_slice())
            .map_or("", String::as_str);
        rows.push(seq, account, key_id, &job.task, charged, *line);
        *line += 1;
        if let Some(idem) = &job.task.idempotency {
            remembered.push(account, idem, &task_id, now);
        }
        outcomes.push(Submitted::Queued {
            account_id: account.to_string(),
            task_id,
            seq,
        });
    }
    if rows.seq.is_empty() {
        // Nothing written: the caller's commit only lets the accounts' rows go.
        return Ok(outcomes);
    }
    let (moved, by): (Vec<String>, Vec<i64>) = quota
        .added()
        .map(|(account, n)| (account.to_string(), n))
        .unzip();
    // Each account's row is updated once per statement (PostgreSQL applies only one of two
    // updates of a row made by one statement), so the charge moves with the count.
    let charged: HashMap<&str, i64> = quota.charged().collect();
    let spent: Vec<i64> = moved
        .iter()
        .map(|a| charged.get(a.as_str()).copied().unwrap_or(0))
        .collect();
    // Data-modifying CTEs run whether or not the final SELECT reads them. Groups without keyed
    // submits run the statement without the idempotency keys' part.
    let statement = if remembered.key.is_empty() {
        SUBMIT
    } else {
        SUBMIT_REMEMBERING.as_str()
    };
    let done: (i64,) = sqlx::query_as(statement)
        .bind(&rows.seq)
        .bind(&rows.account_id)
        .bind(&rows.task_type)
        .bind(&rows.priority)
        .bind(&rows.prompt)
        .bind(&rows.aspect_ratio)
        .bind(&rows.process_mode)
        .bind(&rows.seed)
        .bind(now)
        .bind(&rows.webhook_url)
        .bind(&rows.webhook_secret)
        .bind(&moved)
        .bind(&by)
        .bind(&hashes)
        .bind(KEY_TOUCH_EVERY_MS)
        .bind(new_tasks_note(first_seqs(&rows).into_iter()))
        .bind(&rows.params)
        .bind(&rows.parent_seq)
        .bind(&rows.cost)
        .bind(&spent)
        .bind(&rows.extras)
        .bind(&rows.turn)
        .bind(&rows.key_id)
        .bind(&rows.lexemes)
        .bind_idempotency(&remembered)
        .fetch_one(&mut *conn)
        .await?;
    // A balance the group's charges took under its `credits.low` threshold: rare, so a
    // statement of its own, in the group's transaction.
    let mut queued = false;
    for (account, credits, threshold) in quota.went_under() {
        sqlx::query(QUEUE_CREDITS_LOW.postgres)
            .bind(delivery_id())
            .bind(credits_low_payload(now, credits, threshold))
            .bind(now)
            .bind(account)
            .execute(&mut *conn)
            .await?;
        queued = true;
    }
    if queued {
        sqlx::query("SELECT pg_notify($1, '')")
            .bind(super::channels::OUTBOX_CHANNEL)
            .execute(&mut *conn)
            .await?;
    }
    // The primary key is the last guard: an unexpired answer that this group did not see (it
    // cannot be, with the accounts locked) fails the group, whose submits are then tried alone.
    if done.0 != remembered.key.len() as i64 {
        return Err(StoreError::Other(Arc::new(crate::store::Failure(
            "an idempotency key was stored by another transaction".into(),
        ))));
    }
    Ok(outcomes)
}

/// Each account of the group with the lowest `seq` it was given, for the queue's note (the
/// accounts' event streams read their new tasks from there).
fn first_seqs(rows: &Rows) -> Vec<(&str, i64)> {
    let mut firsts: Vec<(&str, i64)> = Vec::new();
    for (account, &seq) in rows.account_id.iter().zip(&rows.seq) {
        match firsts.iter_mut().find(|(a, _)| *a == account.as_str()) {
            Some((_, first)) => *first = (*first).min(seq),
            None => firsts.push((account, seq)),
        }
    }
    firsts
}

/// The grouped submit's one statement; [`REMEMBER`] adds the idempotency keys' answers.
const SUBMIT: &str = "WITH inserted AS (
             INSERT INTO tasks (seq, account_id, task_type, params, parent_seq, status,
                 priority, prompt, aspect_ratio, process_mode, seed, created_at, webhook_url,
                 webhook_secret, cost, extras, turn, key_id, search)
             SELECT seq, account_id, task_type, params, parent_seq, 'pending', priority, prompt,
                 aspect_ratio, process_mode, seed, $9, webhook_url, webhook_secret, cost, extras,
                 turn, key_id, array_to_tsvector(string_to_array(lexemes, ' '))
             FROM UNNEST($1::bigint[], $2::text[], $3::text[], $4::bigint[], $5::text[],
                         $6::text[], $7::text[], $8::bigint[], $10::text[], $11::text[],
                         $17::text[], $18::bigint[], $19::bigint[], $21::text[], $22::bigint[],
                         $23::text[], $24::text[])
                  AS t(seq, account_id, task_type, priority, prompt, aspect_ratio,
                       process_mode, seed, webhook_url, webhook_secret, params, parent_seq, cost,
                       extras, turn, key_id, lexemes)
             RETURNING 1),
         ledgered AS (
             INSERT INTO credit_ledger (account_id, task_seq, delta, reason, created_at)
             SELECT account_id, seq, -cost, 'submit', $9
             FROM UNNEST($2::text[], $1::bigint[], $19::bigint[]) AS l(account_id, seq, cost)
             WHERE cost > 0
             RETURNING 1),
         counted AS (
             UPDATE accounts SET active_tasks = active_tasks + d.n, credits = credits - d.c
             FROM UNNEST($12::text[], $13::bigint[], $20::bigint[]) AS d(id, n, c)
             WHERE accounts.id = d.id
             RETURNING 1),
         used AS (
             UPDATE api_keys SET last_used_at = $9
             WHERE key_hash = ANY($14) AND revoked_at IS NULL
               AND (last_used_at IS NULL OR last_used_at <= $9 - $15)
             RETURNING 1)
         SELECT 0::bigint, pg_notify('easel_queue', $16)";

/// [`SUBMIT`] with [`REMEMBER`].
static SUBMIT_REMEMBERING: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    let tail = " SELECT 0::bigint, pg_notify('easel_queue', $16)";
    assert!(SUBMIT.ends_with(tail));
    format!("{}{REMEMBER}", &SUBMIT[..SUBMIT.len() - tail.len()])
});

/// The idempotency keys' part of [`SUBMIT`]: each keyed submit's answer, over an expired one;
/// the statement answers how many were written.
const REMEMBER: &str = ",
         remembered AS (
             INSERT INTO idempotency_keys (account_id, idempotency_key, fingerprint, task_id,
                 status, body, created_at, expires_at)
             SELECT account_id, idempotency_key, fingerprint, task_id, 200, body, $9, expires_at
             FROM UNNEST($25::text[], $26::text[], $27::bytea[], $28::text[], $29::text[],
                         $30::bigint[])
                  AS i(account_id, idempotency_key, fingerprint, task_id, body, expires_at)
             ON CONFLICT (account_id, idempotency_key) DO UPDATE SET
                 fingerprint = excluded.fingerprint, task_id = excluded.task_id,
                 status = excluded.status, body = excluded.body,
                 created_at = excluded.created_at, expires_at = excluded.expires_at
             WHERE idempotency_keys.expires_at <= $9
             RETURNING 1)
         SELECT (SELECT count(*) FROM remembered), pg_notify('easel_queue', $16)";

/// The stored answers of the wanted (account, idempotency key) pairs, `$1` and `$2`: one lookup
/// along the primary key per pair, whatever the planner's statistics say, since the `LIMIT` keeps
/// the subquery from being flattened into a join. Written as `IN (SELECT * FROM UNNEST(..))`,
/// the drainer's cached plan, made while the table was empty, was a hash join over the whole
/// table, kept as the table grew (keyed submits on PostgreSQL at a fifth of the plain rate;
/// docs/benchmarks.md). Public for the test that reads its plan.
pub const STORED_ANSWERS: &str =
    "SELECT i.account_id, i.idempotency_key, i.fingerprint, i.task_id, i.status, i.body,
         i.expires_at
     FROM UNNEST($1::text[], $2::text[]) AS w(account_id, idempotency_key)
     CROSS JOIN LATERAL (
         SELECT * FROM idempotency_keys k
         WHERE k.account_id = w.account_id AND k.idempotency_key = w.idempotency_key
         LIMIT 1) i";

/// The stored answers of the group's keyed submits from live keys, by (account, key), read in
/// one statement. No statement runs for a group without keys.
async fn stored_answers(
    conn: &mut PgConnection,
    group: &[Submit],
    accounts: &HashMap<Vec<u8>, String>,
) -> StoreResult<HashMap<(String, String), StoredAnswer>> {
    let (wanted_accounts, wanted_keys): (Vec<&str>, Vec<&str>) = group
        .iter()
        .filter_map(|job| {
            let idem = job.task.idempotency.as_ref()?;
            let account = accounts.get(job.key_hash.as_slice())?;
            Some((account.as_str(), idem.key.as_str()))
        })
        .unzip();
    if wanted_keys.is_empty() {
        return Ok(HashMap::new());
    }
    type Row = (String, String, Vec<u8>, String, i32, String, i64);
    let found: Vec<Row> = sqlx::query_as(STORED_ANSWERS)
        .bind(&wanted_accounts)
        .bind(&wanted_keys)
        .fetch_all(&mut *conn)
        .await?;
    Ok(found
        .into_iter()
        .map(
            |(account, key, fingerprint, task_id, status, body, expires_at)| {
                let answer = StoredAnswer {
                    fingerprint,
                    task_id,
                    status: i64::from(status),
                    body,
                    expires_at,
                };
                ((account, key), answer)
            },
        )
        .collect())
}

/// The answers of a group's keyed submits as columns, for [`REMEMBER`].
#[derive(Default)]
struct Answers {
    account_id: Vec<String>,
    key: Vec<String>,
    fingerprint: Vec<Vec<u8>>,
    task_id: Vec<String>,
    body: Vec<String>,
    expires_at: Vec<i64>,
}

impl Answers {
    fn push(&mut self, account: &str, idem: &Idempotency, task_id: &Uuid, now: i64) {
        self.account_id.push(account.to_string());
        self.key.push(idem.key.clone());
        self.fingerprint.push(idem.fingerprint.to_vec());
        self.task_id.push(task_id.to_string());
        self.body.push(accepted_body(task_id));
        self.expires_at.push(now.saturating_add(idem.ttl_ms));
    }
}

/// Binds [`Answers`] only to the statement that has [`REMEMBER`].
trait BindIdempotency<'q> {
    fn bind_idempotency(self, answers: &'q Answers) -> Self;
}

impl<'q, O> BindIdempotency<'q>
    for sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments>
{
    fn bind_idempotency(self, answers: &'q Answers) -> Self {
        if answers.key.is_empty() {
            return self;
        }
        self.bind(&answers.account_id)
            .bind(&answers.key)
            .bind(&answers.fingerprint)
            .bind(&answers.task_id)
            .bind(&answers.body)
            .bind(&answers.expires_at)
    }
}

#[cfg(test)]
mod tests {
    use super::super::channels::QUEUE_CHANNEL;
    use super::*;

    #[test]
    fn the_submit_notifies_the_queue_channel_with_its_accounts() {
        let notify = format!("pg_notify('{QUEUE_CHANNEL}', $16)");
        assert!(SUBMIT.ends_with(&format!(" SELECT 0::bigint, {notify}")));
        assert!(SUBMIT_REMEMBERING.ends_with(&notify));
    }
}
