//! Durable state: accounts, API keys, tasks (the queue) and the webhook outbox, behind one
//! interface ([`Store`]) with two implementations: SQLite ([`sqlite`], the embedded default, one
//! node) and PostgreSQL ([`postgres`], shared by many nodes). [`open`] picks one by the
//! database URL's scheme.
//!
//! Whatever the database, the same rules hold: a submit checks the key and the account's quota in
//! the transaction that inserts; a claim takes a lease; every change a worker or dispatcher makes
//! after its claim is fenced (by the task's attempt number or the delivery's attempt count), so a
//! stale owner cannot overwrite newer state; a task's webhook delivery is queued in the
//! transaction that writes its final state (the outbox). The rules that can be stated without SQL
//! live in [`model`], once; the SQL lives in each implementation.

mod chunks;
mod ends;
mod error;
mod idempotency;
mod ids;
mod interface;
mod model;
pub mod postgres;
mod rows;
pub mod sqlite;

use std::sync::Arc;

pub(crate) use chunks::chunks;
pub use ends::{TaskEnds, TaskWatch};
pub use error::{Cause, Failure, StoreError, StoreResult};
pub use idempotency::accepted_body;
pub(crate) use ids::fresh_id_key;
pub use ids::TaskIds;
pub use interface::{Accounts, Outbox, Retention, SharedStore, Store, TaskQueue, Views, Wakeups};
pub use model::{
    now_ms, Account, ApiKeyInfo, AttemptRecord, AttemptRow, ClaimedTask, DayUsage, DueDelivery,
    Ending, ExpiredTask, FailingDestination, Idempotency, KeyOwner, KeyRow, LedgerRow, LiveKey,
    NewAccount, NewTask, Outcome, QueueRow, Redelivery, Submitted, Task, TaskFilter, TaskPage,
    WebhookState, FAILING_SCAN_MAX, KEY_TOUCH_EVERY_MS, LIST_LIMIT_MAX,
};
pub(crate) use model::{usage_since, worker_lost, Fence, Quota, Refused, RUNNING};

use crate::config::Config;

/// The schemes `database_url` accepts, for the error that names them.
const SCHEMES: &str = "sqlite://PATH (or a plain path), postgres:// or postgresql://";

/// Which database a URL names.
#[derive(Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite(String),
    Postgres(String),
}

impl Backend {
    /// Sort `url` by its scheme: `sqlite:` or a plain path selects SQLite, `postgres:` or
    /// `postgresql:` PostgreSQL; any other scheme is refused.
    pub fn from_url(url: &str) -> anyhow::Result<Backend> {
        let url = url.trim();
        if url.is_empty() {
            anyhow::bail!("configuration: database_url is empty; it accepts {SCHEMES}");
        }
        let scheme = url
            .split_once(':')
            .map(|(s, _)| s.to_ascii_lowercase())
            .filter(|s| {
                // `C:\data\easel.db` is a path, not a scheme.
                s.len() > 1
                    && s.chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
            });
        match scheme.as_deref() {
            None => Ok(Backend::Sqlite(format!("sqlite://{url}"))),
            Some("sqlite") => Ok(Backend::Sqlite(url.to_string())),
            Some("postgres" | "postgresql") => Ok(Backend::Postgres(url.to_string())),
            Some(other) => anyhow::bail!(
                "configuration: database_url has the scheme `{other}:`, which easel does not \
                 know; it accepts {SCHEMES}"
            ),
        }
    }
}

/// `url` with any password replaced by `***`, for logs and errors.
pub fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        _ => url.to_string(),
    }
}

/// Open the store that `config.database_url()` names, creating and migrating its schema.
pub async fn open(config: &Config) -> anyhow::Result<SharedStore> {
    match Backend::from_url(&config.database_url())? {
        Backend::Sqlite(url) => Ok(Arc::new(
            sqlite::SqliteStore::open(&url, config.sqlite_synchronous == "full").await?,
        )),
        Backend::Postgres(url) => Ok(Arc::new(
            postgres::PgStore::open(&url, &postgres::PgOptions::from_config(config)).await?,
        )),
    }
}

/// Bring the schema of the store that `config` names up to date, and nothing else (`easel
/// migrate`).
pub async fn migrate(config: &Config) -> anyhow::Result<()> {
    match Backend::from_url(&config.database_url())? {
        Backend::Sqlite(url) => sqlite::SqliteStore::migrate(&url).await,
        Backend::Postgres(url) => postgres::PgStore::migrate(&url).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_scheme_picks_the_store() {
        assert_eq!(
            Backend::from_url("data/easel.db").unwrap(),
            Backend::Sqlite("sqlite://data/easel.db".into())
        );
        assert_eq!(
            Backend::from_url("sqlite:///var/easel.db").unwrap(),
            Backend::Sqlite("sqlite:///var/easel.db".into())
        );
        assert!(matches!(
            Backend::from_url("postgres://u@h/db").unwrap(),
            Backend::Postgres(_)
        ));
        assert!(matches!(
            Backend::from_url("postgresql://u@h/db").unwrap(),
            Backend::Postgres(_)
        ));
        let refused = Backend::from_url("mysql://root@h/db")
            .unwrap_err()
            .to_string();
        assert!(refused.contains("database_url"), "{refused}");
        assert!(refused.contains("postgres://"), "{refused}");
        assert!(Backend::from_url("").is_err());
    }

    #[test]
    fn passwords_never_reach_logs() {
        assert_eq!(
            redact("postgres://easel:hunter2@db:5432/easel"),
            "postgres://easel:***@db:5432/easel"
        );
        assert_eq!(redact("postgres://db/easel"), "postgres://db/easel");
    }
}
