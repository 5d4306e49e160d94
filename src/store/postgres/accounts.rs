//! Accounts and API keys on PostgreSQL. Keys are checked against the table on every request (no
//! cache), so a revoked key is refused by every node from its next request.

use async_trait::async_trait;
use uuid::Uuid;

use super::PgStore;
use crate::store::rows::KeyOwnerRow;
use crate::store::{now_ms, Account, Accounts, ApiKeyInfo, KeyOwner, StoreResult};

const ACCOUNT_COLUMNS: &str = "id, email, plan, credits, total_images, signing_secret";

#[async_trait]
impl Accounts for PgStore {
    async fn account_count(&self) -> StoreResult<i64> {
        Ok(sqlx::query_scalar("SELECT COUNT(*) FROM accounts")
            .fetch_one(&self.pool)
            .await?)
    }

    async fn create_account(
        &self,
        email: &str,
        signing_secret: &str,
    ) -> StoreResult<Option<Account>> {
        Ok(sqlx::query_as(&format!(
            "INSERT INTO accounts (id, email, signing_secret, created_at)
             VALUES ($1, $2, $3, $4) ON CONFLICT (email) DO NOTHING
             RETURNING {ACCOUNT_COLUMNS}"
        ))
        .bind(Uuid::new_v4().to_string())
        .bind(email)
        .bind(signing_secret)
        .bind(now_ms())
        .fetch_optional(&self.pool)
        .await?)
    }

    async fn first_account(&self) -> StoreResult<Option<Account>> {
        Ok(sqlx::query_as(&format!(
            "SELECT {ACCOUNT_COLUMNS} FROM accounts ORDER BY created_at, created_seq LIMIT 1"
        ))
        .fetch_optional(&self.pool)
        .await?)
    }

    async fn account_by_email(&self, email: &str) -> StoreResult<Option<Account>> {
        Ok(sqlx::query_as(&format!(
            "SELECT {ACCOUNT_COLUMNS} FROM accounts WHERE email = $1"
        ))
        .bind(email)
        .fetch_optional(&self.pool)
        .await?)
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
        let row: Option<KeyOwnerRow> = sqlx::query_as(
            "SELECT k.id AS key_id, k.last_used_at, a.id, a.email, a.plan, a.credits,
                    a.total_images, a.signing_secret
             FROM api_keys k JOIN accounts a ON a.id = k.account_id
             WHERE k.key_hash = $1 AND k.revoked_at IS NULL",
        )
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

    async fn revoke_api_key(&self, id: &str) -> StoreResult<bool> {
        let changed =
            sqlx::query("UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL")
                .bind(now_ms())
                .bind(id)
                .execute(&self.pool)
                .await?;
        Ok(changed.rows_affected() == 1)
    }
}
