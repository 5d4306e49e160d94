//! What operators change on accounts (plan, credits, expiry, disabled), each change with its
//! audit row in the same transaction, and the audit log as it is read back.

use async_trait::async_trait;

use super::{Account, StoreResult};

/// The fields of an account an operator sets; None leaves a field as it is.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AccountChange {
    pub plan: Option<String>,
    /// `Some(None)`: unlimited credits.
    pub credits: Option<Option<i64>>,
    /// `Some(None)`: never expires.
    pub expires_at: Option<Option<i64>>,
    pub disabled: Option<bool>,
}

impl AccountChange {
    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        *self == AccountChange::default()
    }
}

/// One operator action as it is recorded.
#[derive(Clone, Debug)]
pub struct NewAudit {
    /// Who: `admin:<email>` through the API or the admin page, `cli:<user>` on the command line.
    pub actor: String,
    /// What: `account.update`, `key.revoke`, ...
    pub action: String,
    /// Whose account, when it is about one.
    pub account_id: Option<String>,
    /// The values changed, before and after (JSON objects of the same keys).
    pub before: serde_json::Value,
    pub after: serde_json::Value,
}

/// One row of the audit log.
#[derive(Clone, Debug, PartialEq)]
pub struct AuditEntry {
    pub id: i64,
    pub at: i64,
    pub actor: String,
    pub action: String,
    pub account_id: Option<String>,
    pub before: serde_json::Value,
    pub after: serde_json::Value,
}

/// One plan's grant for one period: every account on the plan (and, for the default plan, on
/// any plan not configured) with a balance gets it once.
#[derive(Clone, Debug)]
pub struct Grant {
    pub plan: String,
    /// Whether the accounts on a plan that is not one of `configured` get it too.
    pub others: bool,
    pub configured: Vec<String>,
    /// The period's key (`2026-11`, `2026-W48`, `2026-11-29`).
    pub period: String,
    /// The balance each account is set to: nothing left over is carried into the period.
    pub credits: i64,
    pub at: i64,
}

#[async_trait]
pub trait Operators: Send + Sync {
    /// Apply `change` to the account and record `audit`, in one transaction (the ledger row of
    /// a credits change, and the sign-out of an account disabled, in it too). False when there
    /// is no such account: nothing is changed or recorded.
    async fn change_account(
        &self,
        account_id: &str,
        change: &AccountChange,
        audit: &NewAudit,
    ) -> StoreResult<bool>;

    /// Give `grant` to each account that has not had one for its period: one `plan_grants` row
    /// (unique per account and period), one `grant` ledger row of the difference and the new
    /// balance, all in one transaction, so that however many nodes try, each account gets it
    /// once. How many accounts got it.
    async fn grant(&self, grant: &Grant) -> StoreResult<u64>;

    /// Record an operator action that changes nothing in an account row.
    async fn record_audit(&self, audit: &NewAudit) -> StoreResult<()>;

    /// The audit log, newest first, from the row before `before` (None: the newest).
    async fn audit_log(&self, before: Option<i64>, limit: i64) -> StoreResult<Vec<AuditEntry>>;

    /// Accounts in the order they were made, after the account `after` (None: from the first),
    /// only `email` (compared without regard to case) when given.
    async fn accounts_page(
        &self,
        email: Option<&str>,
        after: Option<&str>,
        limit: i64,
    ) -> StoreResult<Vec<Account>>;
}
