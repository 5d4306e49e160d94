use rusqlite::params;
use sqlx::FromRow;
use uuid::Uuid;

use super::writer::Durability;
use super::{now_ms, Store, StoreResult};

/// An account, as authentication resolves it.
#[derive(Clone, Debug, FromRow)]
pub struct Account {
    pub id: String,
    pub email: String,
    pub plan: String,
    pub credits: Option<i64>,
    pub total_images: i64,
    pub signing_secret: String,
}

/// An API key as listed: never the key itself.
#[derive(Clone, Debug, FromRow)]
pub struct ApiKeyInfo {
    pub id: String,
    pub account_email: String,
    pub name: String,
    pub prefix: String,
    pub created_at: i64,
    pub last_used_at: Option<i64>,
    pub revoked_at: Option<i64>,
}

/// A live key, as a statement that checked it in passing found it.
#[derive(Clone, Debug)]
pub struct LiveKey {
    pub key_id: String,
    pub account_id: String,
    pub last_used_at: Option<i64>,
}

/// The account and key that an API key hash resolves to.
#[derive(Clone, Debug)]
pub struct KeyOwner {
    pub key_id: String,
    pub last_used_at: Option<i64>,
    pub account: Account,
}

#[derive(FromRow)]
struct KeyOwnerRow {
    key_id: String,
    last_used_at: Option<i64>,
    id: String,
    email: String,
    plan: String,
    credits: Option<i64>,
    total_images: i64,
    signing_secret: String,
}

const ACCOUNT_COLUMNS: &str = "id, email, plan, credits, total_images, signing_secret";

impl Store {
    pub async fn account_count(&self) -> StoreResult<i64> {
        Ok(sqlx::query_scalar("SELECT COUNT(*) FROM accounts")
            .fetch_one(&self.reader)
            .await?)
    }

    /// The account with this email, created (with the given signing secret) if it does not exist.
    pub async fn ensure_account(&self, email: &str, signing_secret: &str) -> StoreResult<Account> {
        let (email_owned, secret) = (email.to_string(), signing_secret.to_string());
        self.writer
            .call(Durability::Synced, move |conn| {
                conn.prepare_cached(
                    "INSERT INTO accounts (id, email, signing_secret, created_at)
                     VALUES (?, ?, ?, ?) ON CONFLICT (email) DO NOTHING",
                )?
                .execute(params![
                    Uuid::new_v4().to_string(),
                    email_owned,
                    secret,
                    now_ms()
                ])?;
                Ok(())
            })
            .await?;
        // Committed before `call` returned, so the readers see it.
        Ok(sqlx::query_as(&format!(
            "SELECT {ACCOUNT_COLUMNS} FROM accounts WHERE email = ?"
        ))
        .bind(email)
        .fetch_one(&self.reader)
        .await?)
    }

    /// The oldest account, if any.
    pub async fn first_account(&self) -> StoreResult<Option<Account>> {
        Ok(sqlx::query_as(&format!(
            "SELECT {ACCOUNT_COLUMNS} FROM accounts ORDER BY created_at, rowid LIMIT 1"
        ))
        .fetch_optional(&self.reader)
        .await?)
    }

    pub async fn account_by_email(&self, email: &str) -> StoreResult<Option<Account>> {
        Ok(sqlx::query_as(&format!(
            "SELECT {ACCOUNT_COLUMNS} FROM accounts WHERE email = ?"
        ))
        .bind(email)
        .fetch_optional(&self.reader)
        .await?)
    }

    pub async fn set_signing_secret(&self, account_id: &str, secret: &str) -> StoreResult<()> {
        let (account_id, secret) = (account_id.to_string(), secret.to_string());
        self.writer
            .call(Durability::Synced, move |conn| {
                conn.prepare_cached("UPDATE accounts SET signing_secret = ? WHERE id = ?")?
                    .execute(params![secret, account_id])?;
                Ok(())
            })
            .await
    }

    /// Store a new key's hash. Returns the key's id.
    pub async fn insert_api_key(
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

    /// The owner of a live (not revoked) key with this hash.
    pub async fn key_owner(&self, key_hash: &[u8]) -> StoreResult<Option<KeyOwner>> {
        let row: Option<KeyOwnerRow> = sqlx::query_as(
            "SELECT k.id AS key_id, k.last_used_at, a.id, a.email, a.plan, a.credits,
                    a.total_images, a.signing_secret
             FROM api_keys k JOIN accounts a ON a.id = k.account_id
             WHERE k.key_hash = ? AND k.revoked_at IS NULL",
        )
        .bind(key_hash)
        .fetch_optional(&self.reader)
        .await?;
        Ok(row.map(|r| KeyOwner {
            key_id: r.key_id,
            last_used_at: r.last_used_at,
            account: Account {
                id: r.id,
                email: r.email,
                plan: r.plan,
                credits: r.credits,
                total_images: r.total_images,
                signing_secret: r.signing_secret,
            },
        }))
    }

    pub async fn touch_api_key(&self, key_id: &str, at: i64) -> StoreResult<()> {
        let key_id = key_id.to_string();
        self.writer
            .call(Durability::Committed, move |conn| {
                conn.prepare_cached("UPDATE api_keys SET last_used_at = ? WHERE id = ?")?
                    .execute(params![at, key_id])?;
                Ok(())
            })
            .await
    }

    pub async fn list_api_keys(&self) -> StoreResult<Vec<ApiKeyInfo>> {
        Ok(sqlx::query_as(
            "SELECT k.id, a.email AS account_email, k.name, k.prefix, k.created_at,
                    k.last_used_at, k.revoked_at
             FROM api_keys k JOIN accounts a ON a.id = k.account_id
             ORDER BY k.created_at, k.rowid",
        )
        .fetch_all(&self.reader)
        .await?)
    }

    /// Revoke a key by id. Returns whether a live key was revoked.
    pub async fn revoke_api_key(&self, id: &str) -> StoreResult<bool> {
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
