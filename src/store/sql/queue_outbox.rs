//! What the stores' own implementations of the queue ([`TaskQueue`](crate::store::TaskQueue))
//! and the outbox ([`Outbox`](crate::store::Outbox)) share: the statements that are the same on
//! both databases.

use uuid::Uuid;

use super::{sql, Durability, Sql, SqlStore};
use crate::store::{now_ms, AttemptRow, ClaimRules, StoreResult, Waiting};

/// A batch's answer over the one its first task's key stored, in the batch's transaction
/// (`store::batch`).
pub(crate) const REMEMBER_BATCH: Sql =
    sql!("UPDATE idempotency_keys SET body = $1 WHERE account_id = $2 AND idempotency_key = $3");
/// An ended task's delivery, due now (`$6`) with the task's own secret (`$7`) or its account's.
pub(crate) const QUEUE_DELIVERY: Sql = sql!(
    "INSERT INTO webhook_deliveries (id, task_seq, task_id, account_id, url,
         status, next_attempt_at, created_at, updated_at, webhook_secret)
     VALUES ($1, $2, $3, $4, $5, 'pending', $6, $6, $6, $7)"
);
/// Its payload, apart from the delivery's row, which every attempt writes again (migration
/// 0006).
pub(crate) const QUEUE_PAYLOAD: Sql =
    sql!("INSERT INTO webhook_payloads (task_seq, payload) VALUES ($1, $2)");
/// A task's delivery sent again from its first attempt, due now (`$1`).
pub(crate) const REDELIVER: Sql = sql!(
    "UPDATE webhook_deliveries SET status = 'pending', attempts = 0,
         next_attempt_at = $1, first_failed_at = NULL, lease_until = NULL, updated_at = $1
     WHERE task_seq = $2"
);
/// One row of an account's credit ledger: a submit's charge, a refund.
pub(crate) const LEDGER_ROW: Sql = sql!(
    "INSERT INTO credit_ledger (account_id, task_seq, delta, reason, created_at)
     VALUES ($1, $2, $3, $4, $5)"
);
/// A refunded task's cost, net of the refund.
pub(crate) const REFUNDED: Sql = sql!("UPDATE tasks SET cost = 0 WHERE seq = $1");
const COUNTS: Sql = sql!("SELECT status, COUNT(*) FROM tasks GROUP BY status ORDER BY status");
/// Oldest first, at most `$2`.
const FORGET_IDEMPOTENCY_KEYS: Sql = sql!(
    "DELETE FROM idempotency_keys WHERE (account_id, idempotency_key) IN (
         SELECT account_id, idempotency_key FROM idempotency_keys
         WHERE expires_at <= $1 ORDER BY expires_at LIMIT $2)"
);
/// The tasks claimed and waiting for a backend (`starting`), then the queue in claim order, each
/// with whether its account is at its running limit (`$2`, the plans' limits as a JSON object;
/// `$3`, every other plan's); at most `$1`. On SQLite from partial indexes only: `tasks_leases`
/// (running tasks: the `IN` lets the planner use it), read once for the accounts' running counts
/// and once for those waiting for a backend, and `tasks_queue`, read in order; each queued
/// task's account by its key. The databases read the limits' JSON each their own way.
const WAITING: Sql = sql!(
    sqlite: "WITH running AS (
                 SELECT account_id, COUNT(*) AS n FROM tasks
                 WHERE status IN ('starting', 'processing') GROUP BY account_id)
             SELECT seq, 1, 0 FROM (SELECT seq FROM tasks
                                   WHERE status IN ('starting', 'processing')
                                     AND status = 'starting'
                                   ORDER BY priority, turn, seq)
             UNION ALL
             SELECT seq, 0, held FROM (
                 SELECT t.seq,
                        COALESCE((SELECT n FROM running WHERE running.account_id = t.account_id),
                                 0)
                        >= COALESCE((SELECT value FROM json_each($2)
                                     WHERE key = (SELECT a.plan FROM accounts a
                                                  WHERE a.id = t.account_id)), $3) AS held
                 FROM tasks t WHERE t.status = 'pending'
                 ORDER BY t.priority, t.turn, t.seq LIMIT $1)
             LIMIT $1",
    postgres: "WITH running AS (
                   SELECT account_id, COUNT(*) AS n FROM tasks
                   WHERE status IN ('starting', 'processing') GROUP BY account_id)
               (SELECT seq, true, false FROM tasks
                WHERE status IN ('starting', 'processing') AND status = 'starting'
                ORDER BY priority, turn, seq)
               UNION ALL
               (SELECT t.seq, false,
                       COALESCE((SELECT n FROM running WHERE running.account_id = t.account_id), 0)
                       >= COALESCE(($2::jsonb ->> a.plan)::bigint, $3)
                FROM tasks t JOIN accounts a ON a.id = t.account_id
                WHERE t.status = 'pending' ORDER BY t.priority, t.turn, t.seq LIMIT $1)
               LIMIT $1",
);
const NEXT_DUE: Sql = sql!(
    "SELECT next_attempt_at FROM webhook_deliveries
     WHERE status = 'pending' AND (lease_until IS NULL OR lease_until <= $1)
     ORDER BY next_attempt_at LIMIT 1"
);
const ATTEMPTS: Sql = sql!(
    "SELECT a.attempted_at, a.duration_ms, a.status_code, a.error, a.next_attempt_at
     FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id
     WHERE d.task_seq = $1 ORDER BY a.id"
);

/// [`TaskQueue::task_counts`](crate::store::TaskQueue::task_counts).
pub(crate) async fn task_counts(store: &impl SqlStore) -> StoreResult<Vec<(String, i64)>> {
    store.reader().all(&COUNTS, &[]).await
}

/// [`TaskQueue::delete_expired_idempotency_keys`](crate::store::TaskQueue::delete_expired_idempotency_keys).
pub(crate) async fn forget_idempotency_keys(
    store: &impl SqlStore,
    now: i64,
    limit: i64,
) -> StoreResult<u64> {
    let args = [now.into(), limit.into()];
    store
        .execute(Durability::Committed, &FORGET_IDEMPOTENCY_KEYS, &args)
        .await
}

/// [`TaskQueue::queue_order`](crate::store::TaskQueue::queue_order).
pub(crate) async fn queue_order(
    store: &impl SqlStore,
    limit: u32,
    rules: &ClaimRules,
) -> StoreResult<Vec<Waiting>> {
    let args = [
        i64::from(limit).into(),
        (&**rules.plan_limits_json()).into(),
        rules.default_limit().into(),
    ];
    let rows: Vec<(i64, bool, bool)> = store.reader().all(&WAITING, &args).await?;
    Ok(rows
        .into_iter()
        .map(|(seq, claimed, held)| Waiting { seq, claimed, held })
        .collect())
}

/// [`Outbox::next_delivery_due`](crate::store::Outbox::next_delivery_due).
pub(crate) async fn next_delivery_due(store: &impl SqlStore) -> StoreResult<Option<i64>> {
    let due: Option<(i64,)> = store
        .reader()
        .optional(&NEXT_DUE, &[now_ms().into()])
        .await?;
    Ok(due.map(|(at,)| at))
}

/// [`Outbox::delivery_attempts`](crate::store::Outbox::delivery_attempts).
pub(crate) async fn delivery_attempts(
    store: &impl SqlStore,
    account_id: &str,
    task_id: &Uuid,
) -> StoreResult<Option<Vec<AttemptRow>>> {
    let Some(seq) = store.account_task(account_id, task_id).await? else {
        return Ok(None);
    };
    Ok(Some(store.reader().all(&ATTEMPTS, &[seq.into()]).await?))
}
