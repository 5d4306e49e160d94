//! Where the tasks, accounts and deliveries are kept: `database_url` and its pool and
//! durability settings.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::values::choice;

choice! {
    /// SQLite `synchronous` pragma: `full` (fsync on every commit, the default) or `normal`
    /// (survives a crash of the process, may lose the last commits on power loss).
    pub enum SqliteSynchronous ("sqlite_synchronous") {
        Full = "full",
        Normal = "normal",
    }
}

impl SqliteSynchronous {
    /// Whether every commit reaches the disk before it counts (image files follow the same rule).
    pub fn is_full(self) -> bool {
        self == SqliteSynchronous::Full
    }
}

/// The database settings. Field names differ from the keys (`database_url` is `url` here); the
/// keys stay those of the flat file.
#[derive(Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct Database {
    /// Database URL: `sqlite://PATH` or a plain path (SQLite), or `postgres://...` /
    /// `postgresql://...` (PostgreSQL, for several nodes). Default: `sqlite://{data_dir}/easel.db`.
    /// A password in it is never logged.
    #[serde(rename = "database_url")]
    pub url: Option<String>,
    /// The size of this node's PostgreSQL pool (unused with SQLite); the node keeps one more
    /// connection, outside the pool, for its submits. Every node's connections count against
    /// the server's own `max_connections`.
    #[serde(rename = "database_max_connections")]
    pub max_connections: u32,
    /// SQLite's `synchronous` pragma; also whether local image files are synced.
    pub sqlite_synchronous: SqliteSynchronous,
}

impl Default for Database {
    fn default() -> Self {
        Database {
            url: None,
            max_connections: 16,
            sqlite_synchronous: SqliteSynchronous::Full,
        }
    }
}

impl Database {
    /// The database URL in force: `database_url`, or the SQLite file in `data_dir`.
    pub fn url_in(&self, data_dir: &Path) -> String {
        self.url
            .clone()
            .unwrap_or_else(|| format!("sqlite://{}", data_dir.join("easel.db").display()))
    }

    /// Which database the URL in force names.
    pub fn kind_in(&self, data_dir: &Path) -> anyhow::Result<DatabaseKind> {
        DatabaseKind::from_url(&self.url_in(data_dir))
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        if let Some(url) = &self.url {
            DatabaseKind::from_url(url)?;
        }
        if self.max_connections < 2 {
            anyhow::bail!("configuration: database_max_connections must be at least 2");
        }
        Ok(())
    }
}

/// The schemes `database_url` accepts, for the error that names them.
const SCHEMES: &str = "sqlite://PATH (or a plain path), postgres:// or postgresql://";

/// Which database a URL names, with the URL to open it by.
#[derive(Debug, PartialEq, Eq)]
pub enum DatabaseKind {
    Sqlite(String),
    Postgres(String),
}

impl DatabaseKind {
    /// Sort `url` by its scheme: `sqlite:` or a plain path selects SQLite, `postgres:` or
    /// `postgresql:` PostgreSQL; any other scheme is refused.
    pub fn from_url(url: &str) -> anyhow::Result<DatabaseKind> {
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
            None => Ok(DatabaseKind::Sqlite(format!("sqlite://{url}"))),
            Some("sqlite") => Ok(DatabaseKind::Sqlite(url.to_string())),
            Some("postgres" | "postgresql") => Ok(DatabaseKind::Postgres(url.to_string())),
            Some(other) => anyhow::bail!(
                "configuration: database_url has the scheme `{other}:`, which easel does not \
                 know; it accepts {SCHEMES}"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_scheme_picks_the_store() {
        assert_eq!(
            DatabaseKind::from_url("data/easel.db").unwrap(),
            DatabaseKind::Sqlite("sqlite://data/easel.db".into())
        );
        assert_eq!(
            DatabaseKind::from_url("sqlite:///var/easel.db").unwrap(),
            DatabaseKind::Sqlite("sqlite:///var/easel.db".into())
        );
        assert!(matches!(
            DatabaseKind::from_url("postgres://u@h/db").unwrap(),
            DatabaseKind::Postgres(_)
        ));
        assert!(matches!(
            DatabaseKind::from_url("postgresql://u@h/db").unwrap(),
            DatabaseKind::Postgres(_)
        ));
        let refused = DatabaseKind::from_url("mysql://root@h/db")
            .unwrap_err()
            .to_string();
        assert!(refused.contains("database_url"), "{refused}");
        assert!(refused.contains("postgres://"), "{refused}");
        assert!(DatabaseKind::from_url("").is_err());
    }
}
