//! Accounts, keys, sessions and sign-in throttling on PostgreSQL. Keys and sessions are checked
//! against the table on every request (no cache), so a revoked key or a deleted session is
//! refused by every node from its next request.

use async_trait::async_trait;
use sqlx::{Postgres, Transaction};
use uuid::Uuid;

use super::PgStore;
use crate::store::rows::{KeyOwnerRow, ACCOUNT_COLUMNS};
use crate::store::{
    now_ms, Account, Accounts, ApiKeyInfo, KeyOwner, KeyRow, LedgerRow, NewAccount, StoreResult,
};

/// Write one ledger row.
pub(super) async fn ledger(
    tx: &mut Transaction<'_, Postgres>,
    account_id: &str,
    task_seq: Option<i64>,
    delta: i64,
    reason: &str,
    at: i64,
) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO credit_ledger (account_id, task_seq, delta, reason, created_at)
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(account_id)
    .bind(task_seq)
    .bind(delta)
    .bind(reason)
    .bind(at)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

impl PgStore {
    /// Run `UPDATE accounts SET x = $1 WHERE id = $2` with a boolean; whether a row changed.
    /// With `and_sessions`, the account's sessions go in the same transaction.
    async fn set_flag(
        &self,
        sql: &str,
        account_id: &str,
        value: bool,
        and_sessions: bool,
    ) -> StoreResult<bool> {
        let mut tx = self.pool.begin().await?;
        let changed = sqlx::query(sql)
            .bind(value)
            .bind(account_id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if changed == 1 && and_sessions {
            sqlx::query("DELETE FROM sessions WHERE account_id = $1")
                .bind(account_id)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(changed == 1)
    }
}

#[async_trait]
impl Accounts for PgStore {
    async fn account_count(&self) -> StoreResult<i64> {
        Ok(sqlx::query_scalar("SELECT COUNT(*) FROM accounts")
            .fetch_one(&self.pool)
            .await?)
    }

    async fn create_user(&self, new: &NewAccount) -> StoreResult<Option<Account>> {
        let now = now_ms();
        let mut tx = self.pool.begin().await?;
        // No conflict target: the case-insensitive index on the email is what conflicts.
        let created: Option<Account> = sqlx::query_as(&format!(
            "INSERT INTO accounts AS a (id, email, signing_secret, created_at, password_hash,
                 admin, credits)
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING
             RETURNING {ACCOUNT_COLUMNS}"
        ))
        .bind(Uuid::new_v4().to_string())
        .bind(new.email.trim())
        .bind(&new.signing_secret)
        .bind(now)
        .bind(&new.password_hash)
        .bind(new.admin)
        .bind(new.credits)
        .fetch_optional(&mut *tx)
        .await?;
        if let (Some(account), Some(credits)) = (&created, new.credits) {
            ledger(&mut tx, &account.id, None, credits, "signup", now).await?;
        }
        tx.commit().await?;
        Ok(created)
    }

    async fn first_account(&self) -> StoreResult<Option<Account>> {
        Ok(sqlx::query_as(&format!(
            "SELECT {ACCOUNT_COLUMNS} FROM accounts a ORDER BY a.created_at, a.created_seq LIMIT 1"
        ))
        .fetch_optional(&self.pool)
        .await?)
    }

    async fn account_by_email(&self, email: &str) -> StoreResult<Option<Account>> {
        Ok(sqlx::query_as(&format!(
            "SELECT {ACCOUNT_COLUMNS} FROM accounts a WHERE lower(a.email) = lower($1)"
        ))
        .bind(email.trim())
        .fetch_optional(&self.pool)
        .await?)
    }

    async fn account_by_id(&self, account_id: &str) -> StoreResult<Option<Account>> {
        Ok(sqlx::query_as(&format!(
            "SELECT {ACCOUNT_COLUMNS} FROM accounts a WHERE a.id = $1"
        ))
        .bind(account_id)
        .fetch_optional(&self.pool)
        .await?)
    }

    async fn account_for_sign_in(
        &self,
        email: &str,
    ) -> StoreResult<Option<(Account, Option<String>)>> {
        let Some(account) = self.account_by_email(email).await? else {
            return Ok(None);
        };
        let hash: Option<String> =
            sqlx::query_scalar("SELECT password_hash FROM accounts WHERE id = $1")
                .bind(&account.id)
                .fetch_one(&self.pool)
                .await?;
        Ok(Some((account, hash)))
    }

    async fn list_accounts(&self) -> StoreResult<Vec<Account>> {
        Ok(sqlx::query_as(&format!(
            "SELECT {ACCOUNT_COLUMNS} FROM accounts a ORDER BY a.created_at, a.created_seq"
        ))
        .fetch_all(&self.pool)
        .await?)
    }

    async fn set_password(&self, account_id: &str, password_hash: &str) -> StoreResult<bool> {
        let mut tx = self.pool.begin().await?;
        let changed = sqlx::query("UPDATE accounts SET password_hash = $1 WHERE id = $2")
            .bind(password_hash)
            .bind(account_id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if changed == 1 {
            sqlx::query("DELETE FROM sessions WHERE account_id = $1")
                .bind(account_id)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(changed == 1)
    }

    async fn set_admin(&self, account_id: &str, admin: bool) -> StoreResult<bool> {
        self.set_flag(
            "UPDATE accounts SET admin = $1 WHERE id = $2",
            account_id,
            admin,
            false,
        )
        .await
    }

    async fn set_disabled(&self, account_id: &str, disabled: bool) -> StoreResult<bool> {
        self.set_flag(
            "UPDATE accounts SET disabled = $1 WHERE id = $2",
            account_id,
            disabled,
            disabled,
        )
        .await
    }

    async fn set_credits(&self, account_id: &str, credits: Option<i64>) -> StoreResult<bool> {
        let mut tx = self.pool.begin().await?;
        // The row's lock orders this against submits and refunds of the same account.
        let changed = sqlx::query("UPDATE accounts SET credits = $1 WHERE id = $2")
            .bind(credits)
            .bind(account_id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if changed == 1 {
            if let Some(balance) = credits {
                let sum: i64 = sqlx::query_scalar(
                    "SELECT COALESCE(SUM(delta), 0)::bigint FROM credit_ledger WHERE account_id = $1",
                )
                .bind(account_id)
                .fetch_one(&mut *tx)
                .await?;
                if balance != sum {
                    ledger(&mut tx, account_id, None, balance - sum, "admin", now_ms()).await?;
                }
            }
        }
        tx.commit().await?;
        Ok(changed == 1)
    }

    async fn credit_ledger(&self, account_id: &str, limit: i64) -> StoreResult<Vec<LedgerRow>> {
        let rows: Vec<(i64, Option<i64>, i64, String, i64)> = sqlx::query_as(
            "SELECT id, task_seq, delta, reason, created_at FROM credit_ledger
             WHERE account_id = $1 ORDER BY id DESC LIMIT $2",
        )
        .bind(account_id)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(id, seq, delta, reason, created_at)| LedgerRow {
                id,
                task_id: seq.map(|seq| self.ids.id(seq).to_string()),
                delta,
                reason,
                created_at,
            })
            .collect())
    }

    async fn set_signing_secret(&self, account_id: &str, secret: &str) -> StoreResult<()> {
        sqlx::query("UPDATE accounts SET signing_secret = $1 WHERE id = $2")
            .bind(secret)
            .bind(account_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn insert_api_key(
        &self,
        account_id: &str,
        name: &str,
        prefix: &str,
        key_hash: &[u8],
    ) -> StoreResult<String> {
        let id = Uuid::new_v4().to_string();
        sqlx::query(
            "INSERT INTO api_keys (id, account_id, name, prefix, key_hash, created_at)
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(&id)
        .bind(account_id)
        .bind(name)
        .bind(prefix)
        .bind(key_hash)
        .bind(now_ms())
        .execute(&self.pool)
        .await?;
        Ok(id)
    }

    async fn key_owner(&self, key_hash: &[u8]) -> StoreResult<Option<KeyOwner>> {
        let row: Option<KeyOwnerRow> = sqlx::query_as(&format!(
            "SELECT k.id AS key_id, k.last_used_at, {ACCOUNT_COLUMNS}
             FROM api_keys k JOIN accounts a ON a.id = k.account_id
             WHERE k.key_hash = $1 AND k.revoked_at IS NULL AND NOT a.disabled"
        ))
        .bind(key_hash)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(KeyOwnerRow::into_owner))
    }

    async fn touch_api_key(&self, key_id: &str, at: i64) -> StoreResult<()> {
        sqlx::query("UPDATE api_keys SET last_used_at = $1 WHERE id = $2")
            .bind(at)
            .bind(key_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn list_api_keys(&self) -> StoreResult<Vec<ApiKeyInfo>> {
        Ok(sqlx::query_as(
            "SELECT k.id, a.email AS account_email, k.name, k.prefix, k.created_at,
                    k.last_used_at, k.revoked_at
             FROM api_keys k JOIN accounts a ON a.id = k.account_id
             ORDER BY k.created_at, k.created_seq",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    async fn account_keys(&self, account_id: &str) -> StoreResult<Vec<KeyRow>> {
        Ok(sqlx::query_as(
            "SELECT id, name, prefix, created_at, last_used_at, revoked_at FROM api_keys
             WHERE account_id = $1 ORDER BY created_at DESC, created_seq DESC",
        )
        .bind(account_id)
        .fetch_all(&self.pool)
        .await?)
    }

    async fn revoke_api_key(&self, id: &str) -> StoreResult<bool> {
        let changed =
            sqlx::query("UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL")
                .bind(now_ms())
                .bind(id)
                .execute(&self.pool)
                .await?;
        Ok(changed.rows_affected() == 1)
    }

    async fn revoke_account_key(&self, account_id: &str, key_id: &str) -> StoreResult<bool> {
        let changed = sqlx::query(
            "UPDATE api_keys SET revoked_at = $1
             WHERE id = $2 AND account_id = $3 AND revoked_at IS NULL",
        )
        .bind(now_ms())
        .bind(key_id)
        .bind(account_id)
        .execute(&self.pool)
        .await?;
        Ok(changed.rows_affected() == 1)
    }

    async fn create_session(
        &self,
        account_id: &str,
        token_hash: &[u8; 32],
        expires_at: i64,
    ) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO sessions (token_hash, account_id, created_at, expires_at)
             VALUES ($1, $2, $3, $4)",
        )
        .bind(token_hash.as_slice())
        .bind(account_id)
        .bind(now_ms())
        .bind(expires_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn session_account(
        &self,
        token_hash: &[u8; 32],
        now: i64,
    ) -> StoreResult<Option<Account>> {
        Ok(sqlx::query_as(&format!(
            "SELECT {ACCOUNT_COLUMNS} FROM sessions s JOIN accounts a ON a.id = s.account_id
             WHERE s.token_hash = $1 AND s.expires_at > $2 AND NOT a.disabled"
        ))
        .bind(token_hash.as_slice())
        .bind(now)
        .fetch_optional(&self.pool)
        .await?)
    }

    async fn delete_session(&self, token_hash: &[u8; 32]) -> StoreResult<bool> {
        let n = sqlx::query("DELETE FROM sessions WHERE token_hash = $1")
            .bind(token_hash.as_slice())
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(n == 1)
    }

    async fn delete_account_sessions(&self, account_id: &str) -> StoreResult<u64> {
        Ok(sqlx::query("DELETE FROM sessions WHERE account_id = $1")
            .bind(account_id)
            .execute(&self.pool)
            .await?
            .rows_affected())
    }

    async fn delete_expired_sessions(&self, now: i64) -> StoreResult<u64> {
        Ok(sqlx::query("DELETE FROM sessions WHERE expires_at <= $1")
            .bind(now)
            .execute(&self.pool)
            .await?
            .rows_affected())
    }

    async fn throttle_events(&self, scope: &str, since: i64) -> StoreResult<i64> {
        Ok(sqlx::query_scalar(
            "SELECT COUNT(*) FROM sign_in_failures WHERE scope = $1 AND at >= $2",
        )
        .bind(scope)
        .bind(since)
        .fetch_one(&self.pool)
        .await?)
    }

    async fn record_throttle_events(
        &self,
        scopes: &[String],
        at: i64,
        forget_before: i64,
    ) -> StoreResult<()> {
        sqlx::query(
            "WITH old AS (DELETE FROM sign_in_failures WHERE at < $3)
             INSERT INTO sign_in_failures (scope, at) SELECT s, $2 FROM UNNEST($1::text[]) AS s",
        )
        .bind(scopes)
        .bind(at)
        .bind(forget_before)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn clear_throttle_events(&self, scope: &str) -> StoreResult<()> {
        sqlx::query(
            "DELETE FROM sign_in_failures WHERE scope = $1 OR starts_with(scope, $1 || ' ')",
        )
        .bind(scope)
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}
