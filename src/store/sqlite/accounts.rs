//! Accounts, keys, sessions and sign-in throttling on SQLite. Keys and sessions are checked
//! against the database on every request (no cache), so a revocation or a sign-out holds from
//! the next request on.

use async_trait::async_trait;
use rusqlite::{params, OptionalExtension};
use uuid::Uuid;

use super::ledger::ledger;
use super::writer::Durability;
use super::SqliteStore;
use crate::store::rows::{KeyOwnerRow, ACCOUNT_COLUMNS};
use crate::store::{
    now_ms, Account, Accounts, ApiKeyInfo, KeyOwner, KeyRow, LedgerRow, NewAccount, StoreResult,
};

/// An account's row as `ACCOUNT_COLUMNS` selects it, read by the writer's connection.
pub(super) fn account_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Account> {
    Ok(Account {
        id: r.get(0)?,
        email: r.get(1)?,
        plan: r.get(2)?,
        credits: r.get(3)?,
        total_images: r.get(4)?,
        signing_secret: r.get(5)?,
        admin: r.get(6)?,
        disabled: r.get(7)?,
        created_at: r.get(8)?,
        has_password: r.get(9)?,
    })
}

impl SqliteStore {
    /// Run an `UPDATE accounts ... WHERE id = ?` style statement; whether a row changed.
    async fn update_account(
        &self,
        sql: &'static str,
        account_id: &str,
        value: rusqlite::types::Value,
        and_sessions: bool,
    ) -> StoreResult<bool> {
        let account_id = account_id.to_string();
        self.writer
            .call(Durability::Synced, move |conn| {
                let changed = conn
                    .prepare_cached(sql)?
                    .execute(params![value, account_id])?;
                if changed == 1 && and_sessions {
                    conn.prepare_cached("DELETE FROM sessions WHERE account_id = ?")?
                        .execute([&account_id])?;
                }
                Ok(changed == 1)
            })
            .await
    }
}

#[async_trait]
impl Accounts for SqliteStore {
    async fn account_count(&self) -> StoreResult<i64> {
        Ok(sqlx::query_scalar("SELECT COUNT(*) FROM accounts")
            .fetch_one(&self.reader)
            .await?)
    }

    async fn create_user(&self, new: &NewAccount) -> StoreResult<Option<Account>> {
        let new = new.clone();
        self.writer
            .call(Durability::Synced, move |conn| {
                let now = now_ms();
                // No conflict target: the case-insensitive index on the email is what conflicts.
                let created = conn
                    .prepare_cached(&format!(
                        "INSERT INTO accounts (id, email, signing_secret, created_at,
                             password_hash, admin, credits)
                         VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING
                         RETURNING {}",
                        ACCOUNT_COLUMNS.replace("a.", "")
                    ))?
                    .query_row(
                        params![
                            Uuid::new_v4().to_string(),
                            new.email.trim(),
                            new.signing_secret,
                            now,
                            new.password_hash,
                            new.admin,
                            new.credits
                        ],
                        account_row,
                    )
                    .optional()?;
                if let (Some(account), Some(credits)) = (&created, new.credits) {
                    ledger(conn, &account.id, None, credits, "signup", now)?;
                }
                Ok(created)
            })
            .await
    }

    async fn first_account(&self) -> StoreResult<Option<Account>> {
        Ok(sqlx::query_as(&format!(
            "SELECT {ACCOUNT_COLUMNS} FROM accounts a ORDER BY a.created_at, a.rowid LIMIT 1"
        ))
        .fetch_optional(&self.reader)
        .await?)
    }

    async fn account_by_email(&self, email: &str) -> StoreResult<Option<Account>> {
        Ok(sqlx::query_as(&format!(
            "SELECT {ACCOUNT_COLUMNS} FROM accounts a WHERE lower(a.email) = lower(?)"
        ))
        .bind(email.trim())
        .fetch_optional(&self.reader)
        .await?)
    }

    async fn account_by_id(&self, account_id: &str) -> StoreResult<Option<Account>> {
        Ok(sqlx::query_as(&format!(
            "SELECT {ACCOUNT_COLUMNS} FROM accounts a WHERE a.id = ?"
        ))
        .bind(account_id)
        .fetch_optional(&self.reader)
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
            sqlx::query_scalar("SELECT password_hash FROM accounts WHERE id = ?")
                .bind(&account.id)
                .fetch_one(&self.reader)
                .await?;
        Ok(Some((account, hash)))
    }

    async fn list_accounts(&self) -> StoreResult<Vec<Account>> {
        Ok(sqlx::query_as(&format!(
            "SELECT {ACCOUNT_COLUMNS} FROM accounts a ORDER BY a.created_at, a.rowid"
        ))
        .fetch_all(&self.reader)
        .await?)
    }

    async fn set_password(&self, account_id: &str, password_hash: &str) -> StoreResult<bool> {
        self.update_account(
            "UPDATE accounts SET password_hash = ? WHERE id = ?",
            account_id,
            password_hash.to_string().into(),
            true,
        )
        .await
    }

    async fn set_admin(&self, account_id: &str, admin: bool) -> StoreResult<bool> {
        self.update_account(
            "UPDATE accounts SET admin = ? WHERE id = ?",
            account_id,
            i64::from(admin).into(),
            false,
        )
        .await
    }

    async fn set_disabled(&self, account_id: &str, disabled: bool) -> StoreResult<bool> {
        self.update_account(
            "UPDATE accounts SET disabled = ? WHERE id = ?",
            account_id,
            i64::from(disabled).into(),
            disabled,
        )
        .await
    }

    async fn set_credits(&self, account_id: &str, credits: Option<i64>) -> StoreResult<bool> {
        let account_id = account_id.to_string();
        self.writer
            .call(Durability::Synced, move |conn| {
                let changed = conn
                    .prepare_cached("UPDATE accounts SET credits = ? WHERE id = ?")?
                    .execute(params![credits, account_id])?;
                if changed == 0 {
                    return Ok(false);
                }
                if let Some(balance) = credits {
                    let sum: i64 = conn
                        .prepare_cached(
                            "SELECT COALESCE(SUM(delta), 0) FROM credit_ledger WHERE account_id = ?",
                        )?
                        .query_row([&account_id], |r| r.get(0))?;
                    if balance != sum {
                        ledger(conn, &account_id, None, balance - sum, "admin", now_ms())?;
                    }
                }
                Ok(true)
            })
            .await
    }

    async fn credit_ledger(&self, account_id: &str, limit: i64) -> StoreResult<Vec<LedgerRow>> {
        let rows: Vec<(i64, Option<i64>, Option<String>, i64, String, i64)> = sqlx::query_as(
            "SELECT l.id, l.task_seq, t.id, l.delta, l.reason, l.created_at
             FROM credit_ledger l LEFT JOIN tasks t ON t.seq = l.task_seq
             WHERE l.account_id = ? ORDER BY l.id DESC LIMIT ?",
        )
        .bind(account_id)
        .bind(limit)
        .fetch_all(&self.reader)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(id, seq, legacy, delta, reason, created_at)| LedgerRow {
                id,
                task_id: seq.map(|seq| self.ids.of_row(seq, legacy.as_deref())),
                delta,
                reason,
                created_at,
            })
            .collect())
    }

    async fn set_signing_secret(&self, account_id: &str, secret: &str) -> StoreResult<()> {
        let (account_id, secret) = (account_id.to_string(), secret.to_string());
        self.writer
            .call(Durability::Synced, move |conn| {
                conn.prepare_cached("UPDATE accounts SET signing_secret = ? WHERE id = ?")?
                    .execute(params![secret, account_id])?;
                Ok(())
            })
            .await
    }

    async fn insert_api_key(
        &self,
        account_id: &str,
        name: &str,
        prefix: &str,
        key_hash: &[u8],
    ) -> StoreResult<String> {
        let id = Uuid::new_v4().to_string();
        let row = (
            id.clone(),
            account_id.to_string(),
            name.to_string(),
            prefix.to_string(),
            key_hash.to_vec(),
        );
        self.writer
            .call(Durability::Synced, move |conn| {
                let (id, account_id, name, prefix, key_hash) = row;
                conn.prepare_cached(
                    "INSERT INTO api_keys (id, account_id, name, prefix, key_hash, created_at)
                     VALUES (?, ?, ?, ?, ?, ?)",
                )?
                .execute(params![
                    id,
                    account_id,
                    name,
                    prefix,
                    key_hash,
                    now_ms()
                ])?;
                Ok(())
            })
            .await?;
        Ok(id)
    }

    async fn key_owner(&self, key_hash: &[u8]) -> StoreResult<Option<KeyOwner>> {
        let row: Option<KeyOwnerRow> = sqlx::query_as(&format!(
            "SELECT k.id AS key_id, k.last_used_at, {ACCOUNT_COLUMNS}
             FROM api_keys k JOIN accounts a ON a.id = k.account_id
             WHERE k.key_hash = ? AND k.revoked_at IS NULL AND a.disabled = 0"
        ))
        .bind(key_hash)
        .fetch_optional(&self.reader)
        .await?;
        Ok(row.map(KeyOwnerRow::into_owner))
    }

    async fn touch_api_key(&self, key_id: &str, at: i64) -> StoreResult<()> {
        let key_id = key_id.to_string();
        self.writer
            .call(Durability::Committed, move |conn| {
                conn.prepare_cached("UPDATE api_keys SET last_used_at = ? WHERE id = ?")?
                    .execute(params![at, key_id])?;
                Ok(())
            })
            .await
    }

    async fn list_api_keys(&self) -> StoreResult<Vec<ApiKeyInfo>> {
        Ok(sqlx::query_as(
            "SELECT k.id, a.email AS account_email, k.name, k.prefix, k.created_at,
                    k.last_used_at, k.revoked_at
             FROM api_keys k JOIN accounts a ON a.id = k.account_id
             ORDER BY k.created_at, k.rowid",
        )
        .fetch_all(&self.reader)
        .await?)
    }

    async fn account_keys(&self, account_id: &str) -> StoreResult<Vec<KeyRow>> {
        Ok(sqlx::query_as(
            "SELECT id, name, prefix, created_at, last_used_at, revoked_at FROM api_keys
             WHERE account_id = ? ORDER BY created_at DESC, rowid DESC",
        )
        .bind(account_id)
        .fetch_all(&self.reader)
        .await?)
    }

    async fn revoke_api_key(&self, id: &str) -> StoreResult<bool> {
        let id = id.to_string();
        self.writer
            .call(Durability::Synced, move |conn| {
                let changed = conn
                    .prepare_cached(
                        "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
                    )?
                    .execute(params![now_ms(), id])?;
                Ok(changed == 1)
            })
            .await
    }

    async fn revoke_account_key(&self, account_id: &str, key_id: &str) -> StoreResult<bool> {
        let (account_id, key_id) = (account_id.to_string(), key_id.to_string());
        self.writer
            .call(Durability::Synced, move |conn| {
                let changed = conn
                    .prepare_cached(
                        "UPDATE api_keys SET revoked_at = ?
                         WHERE id = ? AND account_id = ? AND revoked_at IS NULL",
                    )?
                    .execute(params![now_ms(), key_id, account_id])?;
                Ok(changed == 1)
            })
            .await
    }

    async fn create_session(
        &self,
        account_id: &str,
        token_hash: &[u8; 32],
        expires_at: i64,
    ) -> StoreResult<()> {
        let (account_id, token_hash) = (account_id.to_string(), *token_hash);
        self.writer
            .call(Durability::Synced, move |conn| {
                conn.prepare_cached(
                    "INSERT INTO sessions (token_hash, account_id, created_at, expires_at)
                     VALUES (?, ?, ?, ?)",
                )?
                .execute(params![
                    token_hash.as_slice(),
                    account_id,
                    now_ms(),
                    expires_at
                ])?;
                Ok(())
            })
            .await
    }

    async fn session_account(
        &self,
        token_hash: &[u8; 32],
        now: i64,
    ) -> StoreResult<Option<Account>> {
        Ok(sqlx::query_as(&format!(
            "SELECT {ACCOUNT_COLUMNS} FROM sessions s JOIN accounts a ON a.id = s.account_id
             WHERE s.token_hash = ? AND s.expires_at > ? AND a.disabled = 0"
        ))
        .bind(token_hash.as_slice())
        .bind(now)
        .fetch_optional(&self.reader)
        .await?)
    }

    async fn delete_session(&self, token_hash: &[u8; 32]) -> StoreResult<bool> {
        let token_hash = *token_hash;
        self.writer
            .call(Durability::Synced, move |conn| {
                let n = conn
                    .prepare_cached("DELETE FROM sessions WHERE token_hash = ?")?
                    .execute([token_hash.as_slice()])?;
                Ok(n == 1)
            })
            .await
    }

    async fn delete_account_sessions(&self, account_id: &str) -> StoreResult<u64> {
        let account_id = account_id.to_string();
        self.writer
            .call(Durability::Synced, move |conn| {
                let n = conn
                    .prepare_cached("DELETE FROM sessions WHERE account_id = ?")?
                    .execute([account_id])?;
                Ok(n as u64)
            })
            .await
    }

    async fn delete_expired_sessions(&self, now: i64) -> StoreResult<u64> {
        self.writer
            .call(Durability::Committed, move |conn| {
                let n = conn
                    .prepare_cached("DELETE FROM sessions WHERE expires_at <= ?")?
                    .execute([now])?;
                Ok(n as u64)
            })
            .await
    }

    async fn throttle_events(&self, scope: &str, since: i64) -> StoreResult<i64> {
        Ok(
            sqlx::query_scalar("SELECT COUNT(*) FROM sign_in_failures WHERE scope = ? AND at >= ?")
                .bind(scope)
                .bind(since)
                .fetch_one(&self.reader)
                .await?,
        )
    }

    async fn record_throttle_events(
        &self,
        scopes: &[String],
        at: i64,
        forget_before: i64,
    ) -> StoreResult<()> {
        let scopes = scopes.to_vec();
        self.writer
            .call(Durability::Committed, move |conn| {
                conn.prepare_cached("DELETE FROM sign_in_failures WHERE at < ?")?
                    .execute([forget_before])?;
                let mut insert =
                    conn.prepare_cached("INSERT INTO sign_in_failures (scope, at) VALUES (?, ?)")?;
                for scope in &scopes {
                    insert.execute(params![scope, at])?;
                }
                Ok(())
            })
            .await
    }

    async fn clear_throttle_events(&self, scope: &str) -> StoreResult<()> {
        let scope = scope.to_string();
        self.writer
            .call(Durability::Committed, move |conn| {
                // substr and length count characters on both sides, so a prefix of any
                // characters matches (LIKE would read `_` and `%` in emails as wildcards).
                conn.prepare_cached(
                    "DELETE FROM sign_in_failures
                     WHERE scope = ?1 OR substr(scope, 1, length(?1) + 1) = ?1 || ' '",
                )?
                .execute([scope])?;
                Ok(())
            })
            .await
    }
}
