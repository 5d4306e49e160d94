//! How a task ends on PostgreSQL (its worker's result, a cancel, or the reaper's failure): the
//! final state written if the claim still holds, the account's counts and credits moved and the
//! webhook queued, in one transaction whose notes tell every node's listeners when it commits.

use sqlx::{Postgres, Transaction};
use uuid::Uuid;

use super::channels::{event_note, notify, OUTBOX_CHANNEL, TASK_EVENT_CHANNEL};
use super::PgStore;
use crate::domain::account_webhook::{envelope, AccountEvent, AccountEvents};
use crate::store::sql::queue_outbox::{LEDGER_ROW, QUEUE_DELIVERY, QUEUE_PAYLOAD, REFUNDED};
use crate::store::sql::usage::{usage_day, ROLL_UP};
use crate::store::{now_ms, Ending, Fence, Happened, StoreResult, TaskEvent};

impl PgStore {
    /// Write the final state of the task at `seq` if `fence` holds, with its webhook, in one
    /// transaction; whether it was written. Every node's watchers of the task hear of it through
    /// the listener.
    pub(super) async fn end_task(
        &self,
        seq: i64,
        fence: Fence,
        ending: &Ending,
    ) -> StoreResult<bool> {
        let mut tx = self.pool.begin().await?;
        let id = self.ids.id(seq).to_string();
        let written = complete_in_tx(&mut tx, &id, seq, fence, ending).await?;
        tx.commit().await?;
        if written == Some(true) {
            self.wakeups.outbox.notify_one();
        }
        Ok(written.is_some())
    }
}

/// Write the final state of task `seq` if `fence` still holds, and queue its webhook in the same
/// transaction; every node's watchers of the task are told when it commits. None (and nothing
/// written) when the fence does not hold (the claim is no longer ours, or the task has ended),
/// else whether a delivery was queued.
pub(super) async fn complete_in_tx(
    tx: &mut Transaction<'_, Postgres>,
    task_id: &str,
    seq: i64,
    fence: Fence,
    ending: &Ending,
) -> StoreResult<Option<bool>> {
    let now = now_ms();
    let (status, output, error) = ending.columns();
    let percentage = ending.percentage();
    // The old secret is read under the row's lock, then cleared: it moves to the delivery (claims
    // read it from there) and no second copy stays.
    // Canceled tasks have no usage: their columns stay NULL.
    let usage = ending.usage_columns();
    type Ended = (
        String,
        Option<String>,
        Option<String>,
        i64,
        i64,
        Option<String>,
    );
    let ended: Option<Ended> = sqlx::query_as(&format!(
        "UPDATE tasks t SET status = $1, percentage = COALESCE($2, t.percentage), finished_at = $3, grid_key = $4,
             image_keys = $5, result = $9, error = $6, lease_owner = NULL, lease_expires_at = NULL,
             webhook_secret = NULL, event_seq = nextval('task_seq'), preview_key = NULL,
             retry_attempt = NULL, retry_error = NULL, usage_backend = $10, usage_model = $11,
             backend_ms = $12, usage_images = $13, usage_pixels = $14
         FROM (SELECT seq, webhook_secret FROM tasks WHERE seq = $7 FOR UPDATE) old
         WHERE t.seq = old.seq AND {}
         RETURNING t.account_id, t.webhook_url, old.webhook_secret, t.cost, t.event_seq,
             t.key_id",
        fence.condition("t.attempts", "t.status", "$8::bigint")
    ))
    .bind(status.as_str())
    .bind(percentage)
    .bind(now)
    .bind(&output.grid_key)
    .bind(&output.image_keys)
    .bind(error)
    .bind(seq)
    .bind(fence.attempt())
    .bind(&output.result)
    .bind(usage.and_then(|u| u.0))
    .bind(usage.and_then(|u| u.1))
    .bind(usage.map(|u| u.2))
    .bind(usage.map(|u| u.3))
    .bind(usage.map(|u| u.4))
    .fetch_optional(&mut **tx)
    .await?;
    let Some((account_id, webhook_url, webhook_secret, cost, version, key_id)) = ended else {
        return Ok(None);
    };
    let ended = TaskEvent {
        seq,
        account_id: account_id.as_str().into(),
        version,
        what: Happened::Changed { status },
    };
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(TASK_EVENT_CHANNEL)
        .bind(event_note(&ended))
        .execute(&mut **tx)
        .await?;
    // A failed or canceled task gives its credits back, in the transaction that records its end
    // (an account made unlimited since has no balance to give them to).
    let refund = if ending.refunds() { cost } else { 0 };
    // With the account's webhook (url, secret, events), read in the same statement, for a task
    // without a webhook of its own.
    let (refunded, hook): (Option<i64>, Option<Vec<Option<String>>>) = sqlx::query_as(
        "UPDATE accounts SET active_tasks = active_tasks - 1, total_images = total_images + $1,
             credits = credits + $3
         WHERE id = $2
         RETURNING credits, (SELECT ARRAY[w.url, w.secret, w.events] FROM account_webhooks w
                             WHERE w.account_id = accounts.id)",
    )
    .bind(ending.images())
    .bind(&account_id)
    .bind(refund)
    .fetch_one(&mut **tx)
    .await?;
    // The task's cost net of a refund: what the record and the rollup say.
    let mut net = cost;
    if refund > 0 && refunded.is_some() {
        ledger(tx, &account_id, Some(seq), refund, "refund", now).await?;
        net = 0;
        sqlx::query(REFUNDED.postgres)
            .bind(seq)
            .execute(&mut **tx)
            .await?;
    }
    if let Some((_, model, backend_ms, images, pixels)) = usage {
        sqlx::query(ROLL_UP.postgres)
            .bind(&account_id)
            .bind(usage_day(now))
            .bind(model.unwrap_or(""))
            .bind(key_id.as_deref().unwrap_or(""))
            .bind(images)
            .bind(pixels)
            .bind(backend_ms)
            .bind(net)
            .execute(&mut **tx)
            .await?;
    }
    // An ending the caller left out of `webhook_events` queues nothing; a task without a
    // webhook of its own goes to its account's webhook, if that takes the event.
    let (url, webhook_secret, payload) = match webhook_url {
        Some(url) if ending.delivers => (url, webhook_secret, None),
        Some(_) => return Ok(Some(false)),
        None => {
            let event = AccountEvent::of_ending(status);
            let hook = hook.zip(event).and_then(|(hook, event)| match &hook[..] {
                [Some(url), secret, Some(events)]
                    if AccountEvents::from_column(events).has(event) =>
                {
                    Some((url.clone(), secret.clone(), event))
                }
                _ => None,
            });
            let Some((url, secret, event)) = hook else {
                return Ok(Some(false));
            };
            (url, secret, Some(envelope(event, now, &ending.payload)))
        }
    };
    sqlx::query(QUEUE_DELIVERY.postgres)
        // Time-ordered, like `seq`, to keep the outbox's index appending.
        .bind(format!("msg_{}", Uuid::now_v7().simple()))
        .bind(seq)
        .bind(task_id)
        .bind(&account_id)
        .bind(&url)
        .bind(now)
        .bind(&webhook_secret)
        .execute(&mut **tx)
        .await?;
    sqlx::query(QUEUE_PAYLOAD.postgres)
        .bind(seq)
        .bind(payload.as_deref().unwrap_or(&ending.payload))
        .execute(&mut **tx)
        .await?;
    notify(tx, OUTBOX_CHANNEL).await?;
    Ok(Some(true))
}

/// Write one ledger row (a refund: a submit's charges are written by its group's statement).
async fn ledger(
    tx: &mut Transaction<'_, Postgres>,
    account_id: &str,
    task_seq: Option<i64>,
    delta: i64,
    reason: &str,
    at: i64,
) -> StoreResult<()> {
    sqlx::query(LEDGER_ROW.postgres)
        .bind(account_id)
        .bind(task_seq)
        .bind(delta)
        .bind(reason)
        .bind(at)
        .execute(&mut **tx)
        .await?;
    Ok(())
}
