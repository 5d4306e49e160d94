//! Accounts and their API keys, as the store keeps and resolves them, and the credit ledger's rows.

/// An account, as authentication resolves it.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct Account {
    pub id: String,
    pub email: String,
    pub plan: String,
    /// The balance; None is unlimited.
    pub credits: Option<i64>,
    pub total_images: i64,
    pub signing_secret: String,
    /// An operator: sees every account, the queue and failing destinations.
    pub admin: bool,
    /// Refused everywhere: its keys and sessions stop working.
    pub disabled: bool,
    pub created_at: i64,
    /// Whether a password was ever set (accounts made by `easel keys create` have none).
    pub has_password: bool,
    /// Unix ms after which its keys are refused (402 `account_expired`); None: never.
    pub expires_at: Option<i64>,
}

impl Account {
    /// Whether it has expired by `now` (Unix ms).
    pub fn expired(&self, now: i64) -> bool {
        self.expires_at.is_some_and(|at| at <= now)
    }
}

/// A new account. The email is kept as given and compared without regard to case.
#[derive(Clone, Debug)]
pub struct NewAccount {
    pub email: String,
    /// An argon2id PHC string (see `crate::accounts::hash_password`), or None for an account
    /// that cannot sign in until `easel accounts set-password`.
    pub password_hash: Option<String>,
    pub signing_secret: String,
    pub admin: bool,
    /// The starting balance (written as one `signup` ledger row); None is unlimited.
    pub credits: Option<i64>,
}

/// One row of an account's credit ledger. For an account with a balance, the sum of its rows
/// is its balance.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct LedgerRow {
    pub id: i64,
    /// The task charged or refunded, by its public id.
    pub task_id: Option<String>,
    pub delta: i64,
    /// `signup`, `submit`, `refund` or `admin`.
    pub reason: String,
    pub created_at: i64,
}

/// An API key as its owner lists it.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct KeyRow {
    pub id: String,
    pub name: String,
    pub prefix: String,
    pub created_at: i64,
    pub last_used_at: Option<i64>,
    pub revoked_at: Option<i64>,
}

/// An API key as listed: never the key itself.
#[derive(Clone, Debug, sqlx::FromRow)]
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

/// `last_used_at` is written at most this often per key.
pub const KEY_TOUCH_EVERY_MS: i64 = 60_000;
