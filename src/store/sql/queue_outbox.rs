//! What the stores' own implementations of the queue ([`TaskQueue`](crate::store::TaskQueue))
//! and the outbox ([`Outbox`](crate::store::Outbox)) share: the statements that are the same on
//! both databases.

use super::{sql, Sql, SqlStore};
use crate::store::{now_ms, StoreResult};

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
const NEXT_DUE: Sql = sql!(
    "SELECT next_attempt_at FROM webhook_deliveries
     WHERE status = 'pending' AND (lease_until IS NULL OR lease_until <= $1)
     ORDER BY next_attempt_at LIMIT 1"
);

/// [`Outbox::next_delivery_due`](crate::store::Outbox::next_delivery_due).
pub(crate) async fn next_delivery_due(store: &impl SqlStore) -> StoreResult<Option<i64>> {
    let due: Option<(i64,)> = store
        .reader()
        .optional(&NEXT_DUE, &[now_ms().into()])
        .await?;
    Ok(due.map(|(at,)| at))
}
