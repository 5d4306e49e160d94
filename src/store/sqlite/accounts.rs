use async_trait::async_trait;
use rusqlite::{params, OptionalExtension};
use uuid::Uuid;

use super::writer::Durability;
use super::SqliteStore;
use crate::store::rows::KeyOwnerRow;
use crate::store::{now_ms, Account, Accounts, ApiKeyInfo, KeyOwner, StoreResult};

const ACCOUNT_COLUMNS: &str = "id, email, plan, credits, total_images, signing_secret";

#[async_trait]
impl Accounts for SqliteStore {
    async fn account_count(&self) -> StoreResult<i64> {
        Ok(sqlx::query_scalar("SELECT COUNT(*) FROM accounts")
            .fetch_one(&self.reader)
            .await?)
    }

    async fn create_account(
        &self,
        email: &str,
        signing_secret: &str,
    ) -> StoreResult<Option<Account>> {
        let (email, secret) = (email.to_string(), signing_secret.to_string());
        self.writer
            .call(Durability::Synced, move |conn| {
                let created = conn
                    .prepare_cached(&format!(
                        "INSERT INTO accounts (id, email, signing_secret, created_at)
                         VALUES (?, ?, ?, ?) ON CONFLICT (email) DO NOTHING
                         RETURNING {ACCOUNT_COLUMNS}"
                    ))?
                    .query_row(
                        params![Uuid::new_v4().to_string(), email, secret, now_ms()],
                        |r| {
                            Ok(Account {
                                id: r.get(0)?,
                                email: r.get(1)?,
                                plan: r.get(2)?,
                                credits: r.get(3)?,
                                total_images: r.get(4)?,
                                signing_secret: r.get(5)?,
                            })
                        },
                    )
                    .optional()?;
                Ok(created)
            })
            .await
    }

    async fn first_account(&self) -> StoreResult<Option<Account>> {
        Ok(sqlx::query_as(&format!(
            "SELECT {ACCOUNT_COLUMNS} FROM accounts ORDER BY created_at, rowid LIMIT 1"
        ))
        .fetch_optional(&self.reader)
        .await?)
    }

    async fn account_by_email(&self, email: &str) -> StoreResult<Option<Account>> {
        Ok(sqlx::query_as(&format!(
            "SELECT {ACCOUNT_COLUMNS} FROM accounts WHERE email = ?"
        ))
        .bind(email)
        .fetch_optional(&self.reader)
        .await?)
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
        let row: Option<KeyOwnerRow> = sqlx::query_as(
            "SELECT k.id AS key_id, k.last_used_at, a.id, a.email, a.plan, a.credits,
                    a.total_images, a.signing_secret
             FROM api_keys k JOIN accounts a ON a.id = k.account_id
             WHERE k.key_hash = ? AND k.revoked_at IS NULL",
        )
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
}
