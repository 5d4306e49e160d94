//! The account webhook and the outbox of account events ([`AccountWebhooks`]), once for both
//! stores; and the statement both stores' submits run when a charge takes a balance under its
//! account webhook's threshold ([`QUEUE_CREDITS_LOW`]).
//!
//! Account events are few (one per crossing), so the outbox is simpler than the task
//! deliveries': a claim marks its rows with a token of its own and reads them back.

use async_trait::async_trait;
use uuid::Uuid;

use super::{sql, Durability, Sql, SqlStore, Write};
use crate::domain::account_webhook::{AccountEvents, AccountWebhook};
use crate::store::outbox::ClaimedRow;
use crate::store::{
    now_ms, AccountDelivery, AccountWebhooks, AttemptRecord, DeliveryKind, DueDelivery, StoreResult,
};

const ONE: Sql = sql!(
    "SELECT url, secret, events, credits_low_threshold, created_at, updated_at
     FROM account_webhooks WHERE account_id = $1"
);
const PUT: Sql = sql!(
    "INSERT INTO account_webhooks (account_id, url, secret, events, credits_low_threshold,
         created_at, updated_at)
     VALUES ($1, $2, $3, $4, $5, $6, $6)
     ON CONFLICT (account_id) DO UPDATE SET url = excluded.url, secret = excluded.secret,
         events = excluded.events, credits_low_threshold = excluded.credits_low_threshold,
         updated_at = excluded.updated_at"
);
const DELETE: Sql = sql!("DELETE FROM account_webhooks WHERE account_id = $1");
const RECENT: Sql = sql!(
    "SELECT id, event, status, attempts, last_status_code, last_error, next_attempt_at,
         created_at, updated_at
     FROM account_deliveries WHERE account_id = $1 ORDER BY id DESC LIMIT $2"
);

/// Queue a `credits.low` for the account `$4` if it has an account webhook (its threshold is
/// set only while it takes `credits.low`): `$1` the delivery's id, `$2` its body, `$3` now.
/// Run by each store's submit, in the transaction that charged the credits.
pub(crate) const QUEUE_CREDITS_LOW: Sql = sql!(
    "INSERT INTO account_deliveries (id, account_id, event, url, webhook_secret, payload, status,
         attempts, next_attempt_at, created_at, updated_at)
     SELECT $1, account_id, 'credits.low', url, secret, $2, 'pending', 0, $3, $3, $3
     FROM account_webhooks WHERE account_id = $4 AND credits_low_threshold IS NOT NULL"
);

/// A new account event's id: time-ordered, as the task deliveries' are.
pub(crate) fn delivery_id() -> String {
    format!("msg_{}", Uuid::now_v7().simple())
}

/// Another node's claim is skipped, not waited for.
const SKIP_LOCKED: Sql = Sql::each("", " FOR UPDATE SKIP LOCKED");
/// `$1` now, `$2` the lease's end, `$3` the claim's token, `$4` how many. The outer conditions
/// repeat the inner ones so that, on PostgreSQL, a row another claim took first is left alone.
const CLAIM: Sql = sql!(
    "UPDATE account_deliveries SET lease_until = $2, claimed_by = $3
     WHERE id IN (SELECT id FROM account_deliveries
                  WHERE status = 'pending' AND next_attempt_at <= $1
                    AND (lease_until IS NULL OR lease_until <= $1)
                  ORDER BY next_attempt_at LIMIT $4",
    SKIP_LOCKED,
    ")
       AND status = 'pending' AND (lease_until IS NULL OR lease_until <= $1)"
);
const CLAIMED: Sql = sql!(
    "SELECT d.id, '', d.url, d.attempts, d.first_failed_at, d.webhook_secret, d.lease_until,
         d.payload, a.signing_secret
     FROM account_deliveries d JOIN accounts a ON a.id = d.account_id
     WHERE d.claimed_by = $1 AND d.status = 'pending' ORDER BY d.next_attempt_at"
);
const RECORD: Sql = sql!(
    "UPDATE account_deliveries SET status = $1, attempts = attempts + 1, next_attempt_at = $2,
         first_failed_at = $3, lease_until = NULL, claimed_by = NULL, last_status_code = $4,
         last_error = $5, updated_at = $6
     WHERE id = $7 AND attempts = $8 AND lease_until = $9 AND status = 'pending'"
);
const RELEASE: Sql = sql!(
    "UPDATE account_deliveries SET lease_until = NULL, claimed_by = NULL
     WHERE id = $1 AND lease_until = $2 AND status = 'pending'"
);
const NEXT_DUE: Sql = sql!(
    "SELECT next_attempt_at FROM account_deliveries
     WHERE status = 'pending' AND (lease_until IS NULL OR lease_until <= $1)
     ORDER BY next_attempt_at LIMIT 1"
);

type Hook = (String, Option<String>, String, Option<i64>, i64, i64);

#[async_trait]
impl<S: SqlStore> AccountWebhooks for S {
    async fn account_webhook(&self, account_id: &str) -> StoreResult<Option<AccountWebhook>> {
        let row: Option<Hook> = self.reader().optional(&ONE, &[account_id.into()]).await?;
        Ok(row.map(
            |(url, secret, events, credits_low_threshold, created_at, updated_at)| AccountWebhook {
                url,
                secret,
                events: AccountEvents::from_column(&events),
                credits_low_threshold,
                created_at,
                updated_at,
            },
        ))
    }

    async fn put_account_webhook(
        &self,
        account_id: &str,
        hook: &AccountWebhook,
    ) -> StoreResult<()> {
        let events = hook.events.to_column();
        let args = [
            account_id.into(),
            hook.url.as_str().into(),
            hook.secret.as_deref().into(),
            events.as_str().into(),
            hook.credits_low_threshold.into(),
            hook.updated_at.into(),
        ];
        self.execute(Durability::Synced, &PUT, &args).await?;
        Ok(())
    }

    async fn delete_account_webhook(&self, account_id: &str) -> StoreResult<bool> {
        let removed = self
            .execute(Durability::Synced, &DELETE, &[account_id.into()])
            .await?;
        Ok(removed > 0)
    }

    async fn account_deliveries(
        &self,
        account_id: &str,
        limit: i64,
    ) -> StoreResult<Vec<AccountDelivery>> {
        self.reader()
            .all(&RECENT, &[account_id.into(), limit.into()])
            .await
    }

    async fn claim_account_deliveries(
        &self,
        limit: i64,
        lease_ms: i64,
    ) -> StoreResult<Vec<DueDelivery>> {
        let now = now_ms();
        // The dispatcher asks whenever the task deliveries leave room, and account events are
        // rare: a read says whether one is due before a write claims it (on SQLite a claim is a
        // transaction of the one writer). The dispatcher claims task deliveries first, through
        // the writer, so this read comes after the commit of the submit that woke it.
        if self
            .next_account_delivery_due()
            .await?
            .is_none_or(|due| due > now)
        {
            return Ok(Vec::new());
        }
        let token = Uuid::new_v4().simple().to_string();
        let args = [
            now.into(),
            (now + lease_ms).into(),
            token.as_str().into(),
            limit.into(),
        ];
        let taken = self
            .write(Durability::Committed, &[Write::new(&CLAIM, &args)])
            .await?;
        if taken.first().copied().unwrap_or(0) == 0 {
            return Ok(Vec::new());
        }
        let rows: Vec<ClaimedRow> = self
            .reader()
            .all(&CLAIMED, &[token.as_str().into()])
            .await?;
        Ok(rows
            .into_iter()
            .map(|row| DueDelivery::claimed(row, DeliveryKind::Account))
            .collect())
    }

    async fn record_account_attempt(
        &self,
        claim: &DueDelivery,
        record: &AttemptRecord,
    ) -> StoreResult<bool> {
        let args = [
            record.delivery_status().into(),
            record.next_attempt_at.into(),
            record.first_failed_at.into(),
            record.status_code.map(i64::from).into(),
            record.error.as_deref().into(),
            now_ms().into(),
            claim.id.as_str().into(),
            claim.attempts.into(),
            claim.lease_until.into(),
        ];
        let changed = self.execute(Durability::Committed, &RECORD, &args).await?;
        Ok(changed == 1)
    }

    async fn release_account_deliveries(&self, claimed: &[DueDelivery]) -> StoreResult<u64> {
        let args: Vec<[super::Arg<'_>; 2]> = claimed
            .iter()
            .map(|d| [d.id.as_str().into(), d.lease_until.into()])
            .collect();
        let writes: Vec<Write<'_>> = args.iter().map(|a| Write::new(&RELEASE, a)).collect();
        if writes.is_empty() {
            return Ok(0);
        }
        let released = self.write(Durability::Committed, &writes).await?;
        Ok(released.iter().sum())
    }

    async fn next_account_delivery_due(&self) -> StoreResult<Option<i64>> {
        let row: Option<(Option<i64>,)> = self
            .reader()
            .optional(&NEXT_DUE, &[now_ms().into()])
            .await?;
        Ok(row.and_then(|(at,)| at))
    }
}
