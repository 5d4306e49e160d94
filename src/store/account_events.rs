//! The account webhook's settings and the outbox of account events that belong to no task
//! (`credits.low`); written once for both stores in `store::sql::account_webhooks`. An account
//! webhook's task events are the task's own delivery, in the task outbox ([`Outbox`]).
//!
//! [`Outbox`]: super::Outbox

use async_trait::async_trait;

use super::{AttemptRecord, DueDelivery, StoreResult};
use crate::domain::account_webhook::AccountWebhook;

/// One account event's delivery, as the account's webhook answer lists it (newest first).
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct AccountDelivery {
    pub id: String,
    pub event: String,
    pub status: String,
    pub attempts: i64,
    pub last_status_code: Option<i64>,
    pub last_error: Option<String>,
    pub next_attempt_at: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
}

#[async_trait]
pub trait AccountWebhooks: Send + Sync {
    async fn account_webhook(&self, account_id: &str) -> StoreResult<Option<AccountWebhook>>;

    /// Set the account's webhook (replacing the one it had).
    async fn put_account_webhook(&self, account_id: &str, hook: &AccountWebhook)
        -> StoreResult<()>;

    /// Remove it; whether there was one. Events already queued are still sent.
    async fn delete_account_webhook(&self, account_id: &str) -> StoreResult<bool>;

    /// The account's latest account-event deliveries, newest first, at most `limit`.
    async fn account_deliveries(
        &self,
        account_id: &str,
        limit: i64,
    ) -> StoreResult<Vec<AccountDelivery>>;

    /// Claim up to `limit` due account events for `lease_ms`, as [`Outbox::claim_due_deliveries`]
    /// claims task deliveries (`task_id` empty).
    ///
    /// [`Outbox::claim_due_deliveries`]: super::Outbox::claim_due_deliveries
    async fn claim_account_deliveries(
        &self,
        limit: i64,
        lease_ms: i64,
    ) -> StoreResult<Vec<DueDelivery>>;

    /// Record an attempt, fenced by the claim's attempt count and lease.
    async fn record_account_attempt(
        &self,
        claim: &DueDelivery,
        record: &AttemptRecord,
    ) -> StoreResult<bool>;

    /// Hand back claimed account events not attempted.
    async fn release_account_deliveries(&self, claimed: &[DueDelivery]) -> StoreResult<u64>;

    /// When the next account event not in flight becomes due.
    async fn next_account_delivery_due(&self) -> StoreResult<Option<i64>>;
}
