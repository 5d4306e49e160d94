//! Submits as the writer applies them: a group at a time, in its transaction, with the quota,
//! the balance and idempotency keys decided there.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use rusqlite::{params, Connection, OptionalExtension};

use super::ledger::ledger;
use crate::domain::account_webhook::credits_low_payload;
use crate::store::idempotency::{KeyedGroup, StoredAnswer, STORED_STATUS};
use crate::store::queue::{next_turn, Heads};
use crate::store::sql::account_webhooks::{delivery_id, QUEUE_CREDITS_LOW};
use crate::store::{
    accepted_body, chunks, now_ms, Idempotency, NewTask, PendingLimits, Quota, Refused, Submitted,
    TaskIds, KEY_TOUCH_EVERY_MS,
};

/// A submit, for the writer's group of submits: insert unless the account already has as many
/// tasks queued or running as `limits` give its plan.
pub(super) struct InsertTask {
    /// Boxed: the writer's queue of jobs is as large as its largest job.
    pub(super) task: Box<NewTask>,
    pub(super) key_hash: [u8; 32],
    pub(super) limits: PendingLimits,
}

/// What the writer keeps for submits from one drain to the next: the ids' key, and when it last
/// wrote each key's `last_used_at` (key hash to Unix ms), so that it skips the statement for keys
/// it wrote within `KEY_TOUCH_EVERY_MS` (it would change nothing). Entries older than that are
/// dropped; the statement's own condition still decides.
pub(super) struct SubmitState {
    ids: Arc<TaskIds>,
    /// The modes' heads, which claims raise.
    heads: Arc<Heads>,
    touched: HashMap<[u8; 32], i64>,
    /// The dispatcher's wake-up, for the account events a group's charges queue: woken inside
    /// the transaction, as its claims run on this writer after the commit.
    outbox: Arc<tokio::sync::Notify>,
}

impl SubmitState {
    pub(super) fn new(
        ids: Arc<TaskIds>,
        heads: Arc<Heads>,
        outbox: Arc<tokio::sync::Notify>,
    ) -> Self {
        SubmitState {
            ids,
            heads,
            touched: HashMap::new(),
            outbox,
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
    // Each live key's id, which its tasks keep (usage by key).
    let mut key_ids: HashMap<[u8; 32], String> = HashMap::new();
    let mut expired: std::collections::HashSet<String> = Default::default();
    let mut quota = Quota::default();
    {
        let mut key = conn.prepare_cached(
            "SELECT k.account_id, a.active_tasks, a.credits, a.plan, a.expires_at, k.id,
                 (SELECT w.credits_low_threshold FROM account_webhooks w
                  WHERE w.account_id = a.id)
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
                        r.get::<_, String>(3)?,
                        r.get::<_, Option<i64>>(4)?,
                        r.get::<_, String>(5)?,
                        r.get::<_, Option<i64>>(6)?,
                    ))
                })
                .optional()?;
            if let Some((account, n, credits, plan, expires_at, key_id, low)) = found {
                key_ids.insert(*hash, key_id);
                if expires_at.is_some_and(|at| at <= now) {
                    expired.insert(account.clone());
                }
                let limits = batch.iter().find(|w| &w.key_hash == hash);
                let max_active = limits.map_or(0, |w| w.limits.of(&plan));
                quota.set(&account, n, max_active, credits);
                quota.watch_low(&account, low);
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
            if expired.contains(account) {
                return Err(Submitted::AccountExpired);
            }
            if let Some(idem) = &w.task.idempotency {
                let stored = answers.get(&(account.clone(), idem.key.clone()));
                if let Some(answer) = keyed.decide(account, idem, stored, now) {
                    return Err(answer);
                }
            }
            let charged = quota
                .admit(account, w.task.cost)
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
    let rows: Vec<(&NewTask, i64, &str, i64, &str)> = batch
        .iter()
        .zip(&outcomes)
        .filter_map(|(w, o)| {
            o.as_ref().ok().map(|&(seq, account, charged)| {
                let key_id = key_ids.get(&w.key_hash).map_or("", String::as_str);
                (&*w.task, seq, account, charged, key_id)
            })
        })
        .collect();
    let turns = turns(
        conn,
        &state.heads,
        rows.iter()
            .map(|&(t, _, account, _, _)| (account, t.priority)),
    )?;
    let mut turn = turns.iter();
    for (k, chunk) in chunks(&rows, INSERT_CHUNK_MAX) {
        let mut insert = conn.prepare_cached(&INSERT_TASKS[k])?;
        let mut values: Vec<&dyn rusqlite::ToSql> = Vec::with_capacity(chunk.len() * 16);
        // The stored forms of the typed fields, kept alive beside the borrowed values.
        type Stored<'a> = (&'a str, Option<String>, String, &'a str);
        let stored: Vec<Stored> = chunk
            .iter()
            .map(|(t, _, _, _, _)| {
                (
                    t.task_type().as_str(),
                    t.operation.to_params(),
                    t.aspect_ratio.to_string(),
                    t.process_mode.as_str(),
                )
            })
            .collect();
        for ((t, seq, account, charged, key_id), (task_type, params, aspect_ratio, process_mode)) in
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
                turn.next().expect("a turn per row"),
                key_id,
            ]);
        }
        insert.execute(rusqlite::params_from_iter(values))?;
    }
    // Extras in their own table, out of the row that every later update of the task rewrites.
    let with_extras: Vec<(i64, String)> = rows
        .iter()
        .filter_map(|(t, seq, ..)| t.extras.to_column().map(|e| (*seq, e)))
        .collect();
    for (k, chunk) in chunks(&with_extras, INSERT_CHUNK_MAX) {
        let values: Vec<&dyn rusqlite::ToSql> = chunk
            .iter()
            .flat_map(|(seq, extras)| [seq as &dyn rusqlite::ToSql, extras])
            .collect();
        conn.prepare_cached(&INSERT_EXTRAS[k])?
            .execute(rusqlite::params_from_iter(values))?;
    }
    // The group's seqs run from `last + 1` to `next_seq` with no gap.
    let seqs: Vec<i64> = (last + 1..=next_seq).collect();
    let task_ids = state.ids.ids(&seqs);
    let id_of = |seq: i64| task_ids[(seq - last - 1) as usize];
    remember_answers(conn, batch, &outcomes, &id_of, now)?;
    // Each charge is one ledger row, and the balances move once per account.
    {
        let mut charge =
            conn.prepare_cached("UPDATE accounts SET credits = credits - ? WHERE id = ?")?;
        for (account, spent) in quota.charged() {
            charge.execute(params![spent, account])?;
        }
        for &(_, seq, account, charged, _) in rows.iter().filter(|r| r.3 > 0) {
            ledger(conn, account, Some(seq), -charged, "submit", now)?;
        }
        let mut queue = None;
        for (account, credits, threshold) in quota.went_under() {
            let queue = match &mut queue {
                Some(queue) => queue,
                None => queue.insert(conn.prepare_cached(QUEUE_CREDITS_LOW.sqlite)?),
            };
            queue.execute(params![
                delivery_id(),
                credits_low_payload(now, credits, threshold),
                now,
                account
            ])?;
            state.outbox.notify_one();
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
                task_id: id_of(seq),
                seq,
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
    id_of: &dyn Fn(i64) -> uuid::Uuid,
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
            let task_id = id_of(*seq);
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

/// The turns of a submit group's tasks, in its order: each `(account, priority)` continues from
/// the account's newest waiting task of that mode, never behind the mode's head
/// (`store::queue`). The newest is the first of the account's waiting tasks, newest first in
/// `tasks_by_account_status`, of that mode: usually the first one read.
fn turns<'a>(
    conn: &Connection,
    heads: &Heads,
    tasks: impl Iterator<Item = (&'a str, i64)>,
) -> rusqlite::Result<Vec<i64>> {
    let mut next: HashMap<(&str, i64), i64> = HashMap::new();
    let mut own = conn.prepare_cached(
        "SELECT turn FROM tasks INDEXED BY tasks_by_account_status
         WHERE account_id = ?1 AND status = 'pending' AND priority = ?2
         ORDER BY seq DESC LIMIT 1",
    )?;
    let mut turns = Vec::new();
    for (account, priority) in tasks {
        let turn = match next.get(&(account, priority)) {
            Some(&turn) => turn,
            None => {
                let newest: Option<i64> = own
                    .query_row(params![account, priority], |r| r.get(0))
                    .optional()?;
                next_turn(newest, heads.get(priority))
            }
        };
        next.insert((account, priority), turn + 1);
        turns.push(turn);
    }
    Ok(turns)
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
    let row = "(?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
    (0..=INSERT_CHUNK_MAX.ilog2())
        .map(|k| {
            format!(
                "INSERT INTO tasks (seq, account_id, task_type, params, parent_seq, status,
                     priority, prompt,
                     aspect_ratio, process_mode, seed, created_at, webhook_url, webhook_secret,
                     cost, turn, key_id)
                 VALUES {}",
                vec![row; 1 << k].join(", ")
            )
        })
        .collect()
});

/// The `INSERT` of 2^k tasks' extras at index k.
static INSERT_EXTRAS: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| {
    (0..=INSERT_CHUNK_MAX.ilog2())
        .map(|k| {
            format!(
                "INSERT INTO task_extras (seq, extras) VALUES {}",
                vec!["(?, ?)"; 1 << k].join(", ")
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
        assert_eq!(INSERT_EXTRAS.len(), 7);
        assert_eq!(INSERT_EXTRAS[2].matches("(?, ?)").count(), 4);
    }
}
