//! How a task ends on SQLite (its worker's result, a cancel, or the reaper's failure): the final
//! state written if the claim still holds, the credits given back and the webhook queued, in one
//! of the writer's transactions; then its listeners told once that has committed.

use rusqlite::{params, Connection, OptionalExtension};
use uuid::Uuid;

use super::ledger::ledger;
use super::versions::next_version;
use super::SqliteStore;
use crate::domain::account_webhook::{envelope, AccountEvent, AccountEvents};
use crate::domain::TaskStatus;
use crate::store::sql::queue_outbox::{QUEUE_DELIVERY, QUEUE_PAYLOAD, REFUNDED};
use crate::store::sql::usage::{usage_day, ROLL_UP};
use crate::store::{now_ms, Ending, Fence, Happened, StoreResult, TaskEvent, TaskIds};

impl SqliteStore {
    /// After the task at `seq` was ended (`Some`) or not: wake the dispatcher when a delivery
    /// was queued, and tell the task's listeners. Whether it was ended.
    pub(super) fn after_end(&self, seq: i64, ended: Option<Ended>) -> bool {
        let Some(ended) = ended else {
            return false;
        };
        if ended.queued {
            self.wakeups.outbox.notify_one();
        }
        self.changed(seq, &ended.account_id, ended.version, ended.status);
        true
    }

    /// The stored state of the task at `seq` changed (committed): tell its listeners.
    pub(super) fn changed(&self, seq: i64, account_id: &str, version: i64, status: TaskStatus) {
        self.wakeups.events.publish(TaskEvent {
            seq,
            account_id: account_id.into(),
            version,
            what: Happened::Changed { status },
        });
    }
}

/// A task's end as written: what its listeners are told, and whether a delivery was queued.
pub(super) struct Ended {
    pub(super) queued: bool,
    account_id: String,
    version: i64,
    status: TaskStatus,
}

/// Write the final state of task `seq` if `fence` still holds, and queue its webhook in the same
/// transaction. None (and nothing written) when it does not (the claim is no longer ours, or the
/// task has ended), else whether a delivery was queued.
pub(super) fn complete_in_tx(
    conn: &Connection,
    ids: &TaskIds,
    seq: i64,
    fence: Fence,
    ending: &Ending,
) -> StoreResult<Option<Ended>> {
    let now = now_ms();
    let version = next_version(conn)?;
    let (status, output, error) = ending.columns();
    let keys = output
        .image_keys
        .map(|keys| serde_json::to_string(&keys).expect("keys serialize"));
    let percentage = ending.percentage();
    let usage = ending.usage_columns();
    // Canceled tasks have none: their columns stay NULL.
    let used = (
        usage.and_then(|u| u.0),
        usage.and_then(|u| u.1),
        usage.map(|u| u.2),
        usage.map(|u| u.3),
        usage.map(|u| u.4),
    );
    type Row = (
        String,
        Option<String>,
        Option<String>,
        Option<String>,
        i64,
        Option<String>,
    );
    let ended: Option<Row> = conn
        .prepare_cached(&format!(
            "UPDATE tasks SET status = ?, percentage = COALESCE(?, percentage), finished_at = ?, grid_key = ?,
                 image_keys = ?, result = ?, error = ?, lease_owner = NULL, lease_expires_at = NULL,
                 event_seq = ?, preview_key = NULL, retry_attempt = NULL, retry_error = NULL,
                 usage_backend = ?, usage_model = ?, backend_ms = ?, usage_images = ?,
                 usage_pixels = ?
             WHERE seq = ? AND {}
             RETURNING account_id, webhook_url, webhook_secret, id, cost, key_id",
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
                version,
                used.0,
                used.1,
                used.2,
                used.3,
                used.4,
                seq,
                fence.attempt()
            ],
            |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                ))
            },
        )
        .optional()?;
    let Some((account_id, webhook_url, webhook_secret, legacy_id, cost, key_id)) = ended else {
        return Ok(None);
    };
    let mut ended = Ended {
        queued: false,
        account_id: account_id.clone(),
        version,
        status,
    };
    // The task's cost net of a refund: what the rollup counts.
    let mut net = cost;
    if ending.refunds() && cost > 0 {
        // A failed or canceled task gives its credits back, in the transaction that records its
        // end (an account made unlimited since has no balance to give them to).
        let refunded = conn
            .prepare_cached(
                "UPDATE accounts SET credits = credits + ? WHERE id = ? AND credits IS NOT NULL",
            )?
            .execute(params![cost, account_id])?;
        if refunded == 1 {
            ledger(conn, &account_id, Some(seq), cost, "refund", now)?;
            net = 0;
            conn.prepare_cached(REFUNDED.sqlite)?
                .execute(params![seq])?;
        }
    }
    if let Some((_, model, backend_ms, images, pixels)) = usage {
        conn.prepare_cached(ROLL_UP.sqlite)?.execute(params![
            account_id,
            usage_day(now),
            model.unwrap_or(""),
            key_id.as_deref().unwrap_or(""),
            images,
            pixels,
            backend_ms,
            net,
        ])?;
    }
    let images = ending.images();
    if images > 0 {
        conn.prepare_cached("UPDATE accounts SET total_images = total_images + ? WHERE id = ?")?
            .execute(params![images, account_id])?;
    }
    if webhook_secret.is_some() {
        // Read above for the delivery, if there is one: no copy stays with the task, as none
        // does on PostgreSQL, whether or not the ending is delivered.
        conn.prepare_cached("UPDATE tasks SET webhook_secret = NULL WHERE seq = ?")?
            .execute(params![seq])?;
    }
    // An ending the caller left out of `webhook_events` queues nothing; a task without a
    // webhook of its own goes to its account's webhook, if that takes the event.
    let (url, webhook_secret, payload) = match webhook_url {
        Some(url) if ending.delivers => (url, webhook_secret, None),
        Some(_) => return Ok(Some(ended)),
        None => {
            let hook = match AccountEvent::of_ending(status) {
                Some(event) => account_hook(conn, &account_id, event)?,
                None => None,
            };
            let Some((url, secret, event)) = hook else {
                return Ok(Some(ended));
            };
            (url, secret, Some(envelope(event, now, &ending.payload)))
        }
    };
    let task_id = ids.of_row(seq, legacy_id.as_deref());
    conn.prepare_cached(QUEUE_DELIVERY.sqlite)?
        .execute(params![
            // Time-ordered, like `seq`, to keep the outbox's index appending.
            format!("msg_{}", Uuid::now_v7().simple()),
            seq,
            task_id,
            account_id,
            url,
            now,
            webhook_secret,
        ])?;
    conn.prepare_cached(QUEUE_PAYLOAD.sqlite)?
        .execute(params![seq, payload.as_deref().unwrap_or(&ending.payload)])?;
    ended.queued = true;
    Ok(Some(ended))
}

/// The account's webhook, if it takes `event`: its URL and secret.
fn account_hook(
    conn: &Connection,
    account_id: &str,
    event: AccountEvent,
) -> StoreResult<Option<(String, Option<String>, AccountEvent)>> {
    let hook: Option<(String, Option<String>, String)> = conn
        .prepare_cached("SELECT url, secret, events FROM account_webhooks WHERE account_id = ?")?
        .query_row([account_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    Ok(hook
        .filter(|(_, _, events)| AccountEvents::from_column(events).has(event))
        .map(|(url, secret, _)| (url, secret, event)))
}
