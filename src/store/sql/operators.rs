//! [`Operators`], once for both stores: an account's change and its audit row in one
//! transaction; the audit log and the accounts paged by cursor.

use async_trait::async_trait;

use super::accounts::{ACCOUNT, ADMIN_CREDITS, MADE, SET_CREDITS, SET_DISABLED};
use super::{sql, Arg, Durability, Sql, SqlStore, Write};
use crate::store::{
    now_ms, Account, AccountChange, AuditEntry, Grant, NewAudit, Operators, StoreResult,
};

/// Each write names the account; one that does not exist changes no row. The credits are set
/// as `Accounts::set_credits` sets them, so that the ledger still sums to the balance.
const SET_PLAN: Sql = sql!("UPDATE accounts SET plan = $1 WHERE id = $2");
const SET_EXPIRES: Sql = sql!("UPDATE accounts SET expires_at = $1 WHERE id = $2");
const SIGN_OUT: Sql = sql!("DELETE FROM sessions WHERE account_id = $1");
/// Recorded only when the account exists (or the action is about none).
const AUDIT: Sql = sql!(
    "INSERT INTO audit_log (at, actor, action, account_id, before_json, after_json)
     SELECT $1, $2, $3, $4, $5, $6
     WHERE $4 IS NULL OR EXISTS (SELECT 1 FROM accounts WHERE id = $4)"
);
/// The plans not configured, for the default plan's grant.
const NOT_CONFIGURED: Sql = Sql::each(
    "NOT (a.plan IN (SELECT value FROM json_each($7)))",
    "NOT (a.plan = ANY($7))",
);
/// The accounts' grant rows, in id order (two nodes granting at once wait on each other's rows
/// in the same order); a row that exists already is left alone, and its account gets nothing.
const GRANT_ROWS: Sql = sql!(
    "INSERT INTO plan_grants (account_id, period, credits, granted_at, token)
     SELECT a.id, $1, $2, $3, $4 FROM accounts a
     WHERE a.credits IS NOT NULL AND (a.plan = $5 OR ($6 AND ",
    NOT_CONFIGURED,
    "))
     ORDER BY a.id
     ON CONFLICT DO NOTHING"
);
/// Lock the granted accounts' rows before their balance is read (against concurrent submits).
const GRANT_LOCK: Sql = sql!(
    "UPDATE accounts SET credits = credits
     WHERE id IN (SELECT account_id FROM plan_grants WHERE token = $1)"
);
const GRANT_LEDGER: Sql = sql!(
    "INSERT INTO credit_ledger (account_id, delta, reason, created_at)
     SELECT a.id, g.credits - a.credits, 'grant', g.granted_at
     FROM plan_grants g JOIN accounts a ON a.id = g.account_id
     WHERE g.token = $1 AND a.credits IS NOT NULL"
);
const GRANT_BALANCE: Sql = sql!(
    "UPDATE accounts SET credits =
         (SELECT g.credits FROM plan_grants g WHERE g.account_id = accounts.id AND g.token = $1)
     WHERE id IN (SELECT account_id FROM plan_grants WHERE token = $1) AND credits IS NOT NULL"
);
const AUDIT_AT: Sql = sql!(
    "SELECT id, at, actor, action, account_id, before_json, after_json FROM audit_log
     WHERE $1 IS NULL OR id < $1 ORDER BY id DESC LIMIT $2"
);
const PAGE: Sql = sql!(
    "SELECT ",
    ACCOUNT,
    " FROM accounts a
     WHERE ($1 IS NULL OR lower(a.email) = lower($1))
       AND ($2 IS NULL OR a.",
    MADE,
    " > (SELECT ",
    MADE,
    " FROM accounts WHERE id = $2))
     ORDER BY a.",
    MADE,
    " LIMIT $3"
);

#[async_trait]
impl<S: SqlStore> Operators for S {
    async fn change_account(
        &self,
        account_id: &str,
        change: &AccountChange,
        audit: &NewAudit,
    ) -> StoreResult<bool> {
        let now = now_ms();
        let id: Arg = account_id.into();
        let plan = change.plan.as_deref().map(|p| [p.into(), id]);
        let credits = change.credits.map(|c| [c.into(), id]);
        let ledger = [id, now.into()];
        let expires = change.expires_at.map(|e| [e.into(), id]);
        let disabled = change.disabled.map(|d| [d.into(), id]);
        let sign_out = [id];
        let (before, after) = (audit.before.to_string(), audit.after.to_string());
        let record = audit_args(now, audit, &before, &after);
        // The audit row first: it is written only when the account exists, and the
        // statements after it change that same row.
        let mut writes = vec![Write::new(&AUDIT, &record)];
        if let Some(args) = &plan {
            writes.push(Write::new(&SET_PLAN, args));
        }
        if let Some(args) = &credits {
            writes.push(Write::new(&SET_CREDITS, args));
            writes.push(Write::new(&ADMIN_CREDITS, &ledger));
        }
        if let Some(args) = &expires {
            writes.push(Write::new(&SET_EXPIRES, args));
        }
        if let Some(args) = &disabled {
            writes.push(Write::new(&SET_DISABLED, args));
            if change.disabled == Some(true) {
                writes.push(Write::new(&SIGN_OUT, &sign_out));
            }
        }
        Ok(self.write(Durability::Synced, &writes).await?[0] == 1)
    }

    async fn grant(&self, grant: &Grant) -> StoreResult<u64> {
        let token = uuid::Uuid::new_v4().to_string();
        let rows = [
            grant.period.as_str().into(),
            grant.credits.into(),
            grant.at.into(),
            token.as_str().into(),
            grant.plan.as_str().into(),
            grant.others.into(),
            grant.configured.as_slice().into(),
        ];
        let by_token = [token.as_str().into()];
        let writes = [
            Write::new(&GRANT_ROWS, &rows),
            Write::new(&GRANT_LOCK, &by_token),
            Write::new(&GRANT_LEDGER, &by_token),
            Write::new(&GRANT_BALANCE, &by_token),
        ];
        Ok(self.write(Durability::Synced, &writes).await?[0])
    }

    async fn record_audit(&self, audit: &NewAudit) -> StoreResult<()> {
        let (before, after) = (audit.before.to_string(), audit.after.to_string());
        let record = audit_args(now_ms(), audit, &before, &after);
        self.execute(Durability::Synced, &AUDIT, &record).await?;
        Ok(())
    }

    async fn audit_log(&self, before: Option<i64>, limit: i64) -> StoreResult<Vec<AuditEntry>> {
        type Row = (i64, i64, String, String, Option<String>, String, String);
        let rows: Vec<Row> = self
            .reader()
            .all(&AUDIT_AT, &[before.into(), limit.into()])
            .await?;
        let json = |text: &str| serde_json::from_str(text).unwrap_or(serde_json::Value::Null);
        Ok(rows
            .into_iter()
            .map(
                |(id, at, actor, action, account_id, before, after)| AuditEntry {
                    id,
                    at,
                    actor,
                    action,
                    account_id,
                    before: json(&before),
                    after: json(&after),
                },
            )
            .collect())
    }

    async fn accounts_page(
        &self,
        email: Option<&str>,
        after: Option<&str>,
        limit: i64,
    ) -> StoreResult<Vec<Account>> {
        self.reader()
            .all(&PAGE, &[email.into(), after.into(), limit.into()])
            .await
    }
}

fn audit_args<'a>(now: i64, audit: &'a NewAudit, before: &'a str, after: &'a str) -> [Arg<'a>; 6] {
    [
        now.into(),
        audit.actor.as_str().into(),
        audit.action.as_str().into(),
        audit.account_id.as_deref().into(),
        before.into(),
        after.into(),
    ]
}
