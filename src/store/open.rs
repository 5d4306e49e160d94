//! Opening the store a `[database]` setting names: SQLite or PostgreSQL, by the URL's scheme.

use std::path::Path;
use std::sync::Arc;

use super::{postgres, sqlite, SharedStore};
use crate::config::{self, DatabaseKind};

/// Open the store that `database` names, creating and migrating its schema.
pub async fn open(database: &config::Database, data_dir: &Path) -> anyhow::Result<SharedStore> {
    match database.kind_in(data_dir)? {
        DatabaseKind::Sqlite(url) => Ok(Arc::new(
            sqlite::SqliteStore::open(&url, database.sqlite_synchronous.is_full()).await?,
        )),
        DatabaseKind::Postgres(url) => Ok(Arc::new(
            postgres::PgStore::open(&url, &postgres::PgOptions::from_config(database)).await?,
        )),
    }
}

/// Bring the schema of the store that `database` names up to date, and nothing else (`easel
/// migrate`).
pub async fn migrate(database: &config::Database, data_dir: &Path) -> anyhow::Result<()> {
    match database.kind_in(data_dir)? {
        DatabaseKind::Sqlite(url) => sqlite::SqliteStore::migrate(&url).await,
        DatabaseKind::Postgres(url) => postgres::PgStore::migrate(&url).await,
    }
}
