//! The credit ledger's one statement on the writer's connection, shared by submits (charges) and
//! ended tasks (refunds).

use rusqlite::{params, Connection};

use crate::store::sql::queue_outbox::LEDGER_ROW;

/// Write one ledger row.
pub(super) fn ledger(
    conn: &Connection,
    account_id: &str,
    task_seq: Option<i64>,
    delta: i64,
    reason: &str,
    at: i64,
) -> rusqlite::Result<()> {
    conn.prepare_cached(LEDGER_ROW.sqlite)?
        .execute(params![account_id, task_seq, delta, reason, at])?;
    Ok(())
}
