//! Webhook attempt records as the writer applies them: a group at a time, in its transaction.

use rusqlite::{params, Connection, ToSql};

use crate::store::{chunks, now_ms, AttemptRecord};

/// An attempt's record and the delivery's next state, for the writer's group of records.
pub(super) struct RecordAttempt {
    pub(super) delivery_id: String,
    pub(super) claimed_attempts: i64,
    /// The claim's lease: a redelivery since, which sets the attempt count back to where the
    /// claim found it, clears the lease.
    pub(super) claimed_lease: i64,
    pub(super) record: AttemptRecord,
}

/// Record a group of attempts, inside the writer's transaction. Each moves its delivery to its
/// next state if the delivery still has the attempt count and the lease seen at claim (a stale
/// dispatcher changes nothing), one after another: so should a group hold two records for one
/// delivery, the first is recorded and the second finds the count moved on. Then the attempt
/// rows of the records that passed go in together, in chunks (an `INSERT` writes the
/// AUTOINCREMENT counter once per statement). True for each record that was written.
pub(super) fn apply_records(
    conn: &Connection,
    batch: &[RecordAttempt],
) -> rusqlite::Result<Vec<bool>> {
    let now = now_ms();
    let mut update = conn.prepare_cached(
        "UPDATE webhook_deliveries SET status = ?1, attempts = attempts + 1,
             next_attempt_at = ?2, first_failed_at = ?3, lease_until = NULL,
             last_status_code = ?4, last_error = ?5, updated_at = ?6
         WHERE id = ?7 AND attempts = ?8 AND lease_until = ?9 AND status = 'pending'",
    )?;
    let written: Vec<bool> = batch
        .iter()
        .map(|w| {
            let r = &w.record;
            let changed = update.execute(params![
                r.delivery_status(),
                r.next_attempt_at,
                r.first_failed_at,
                r.status_code,
                r.error,
                now,
                w.delivery_id,
                w.claimed_attempts,
                w.claimed_lease,
            ])?;
            Ok(changed == 1)
        })
        .collect::<rusqlite::Result<_>>()?;
    let rows: Vec<&RecordAttempt> = batch
        .iter()
        .zip(&written)
        .filter(|(_, w)| **w)
        .map(|(r, _)| r)
        .collect();
    for (k, chunk) in chunks(&rows, INSERT_CHUNK_MAX) {
        let mut insert = conn.prepare_cached(&INSERT_ATTEMPTS[k])?;
        let mut values: Vec<&dyn ToSql> = Vec::with_capacity(chunk.len() * 6);
        for w in chunk {
            let r = &w.record;
            values.extend_from_slice(&[
                &w.delivery_id as &dyn ToSql,
                &r.attempted_at,
                &r.duration_ms,
                &r.status_code,
                &r.error,
                &r.next_attempt_at,
            ]);
        }
        insert.execute(rusqlite::params_from_iter(values))?;
    }
    Ok(written)
}

/// Most attempt rows one `INSERT` takes (in chunks of 1, 2, 4, ... of them, see `store::chunks`).
const INSERT_CHUNK_MAX: usize = 64;

/// The `INSERT` of 2^k attempt rows at index k, in `apply_records`' order.
static INSERT_ATTEMPTS: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| {
    (0..=INSERT_CHUNK_MAX.ilog2())
        .map(|k| {
            format!(
                "INSERT INTO webhook_attempts (delivery_id, attempted_at, duration_ms,
                     status_code, error, next_attempt_at)
                 VALUES {}",
                vec!["(?, ?, ?, ?, ?, ?)"; 1 << k].join(", ")
            )
        })
        .collect()
});
