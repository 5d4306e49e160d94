//! What can go wrong in the store, sorted by what the caller should do about it, whichever
//! database and driver reported it.

use std::sync::Arc;

/// An error from a database driver, shared: one failed commit answers every write that was in it.
pub type Cause = Arc<dyn std::error::Error + Send + Sync>;

/// What can go wrong in the store, sorted by what the caller should do about it.
#[derive(Clone, Debug, thiserror::Error)]
pub enum StoreError {
    /// The database cannot be reached or is overloaded right now; try again later.
    #[error("store unavailable: {0}")]
    Unavailable(Cause),
    /// Anything else: a bug or a damaged database.
    #[error("store error: {0}")]
    Other(Cause),
}

impl StoreError {
    pub(crate) fn unavailable(what: &str) -> StoreError {
        StoreError::Unavailable(Arc::new(Failure(what.to_string())))
    }

    /// The kind as the metrics label it (`easel_store_errors_total{kind}`).
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Unavailable(_) => "unavailable",
            StoreError::Other(_) => "other",
        }
    }
}

/// A request's store failure, as the contract's refusal: the HTTP boundary answers it (503 or
/// 500), and logs and counts it there.
impl From<StoreError> for crate::refusal::ApiError {
    fn from(e: StoreError) -> Self {
        crate::refusal::ApiError::Store {
            unavailable: matches!(e, StoreError::Unavailable(_)),
            cause: e.into(),
        }
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        match &e {
            sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::WorkerCrashed => StoreError::Unavailable(Arc::new(e)),
            sqlx::Error::Database(db) => {
                let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
                if db
                    .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
                    .is_some()
                {
                    postgres_sorted(&code, Arc::new(e))
                } else {
                    sqlite_sorted(&code, Arc::new(e))
                }
            }
            _ => StoreError::Other(Arc::new(e)),
        }
    }
}

/// A store failure that no driver reported.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Failure(pub String);

pub type StoreResult<T> = Result<T, StoreError>;

/// Whether a PostgreSQL SQLSTATE says the server ended the session, so that a new connection
/// may succeed: connection exceptions (class 08), an operator or crash shutdown or a server
/// still starting (57P01 to 57P03), and `idle_session_timeout` (57P05), which can end a
/// connection that a node keeps open between uses. A dropped database (57P04) is left out:
/// a new connection would fail as well.
pub(crate) fn postgres_session_ended(code: &str) -> bool {
    code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03" | "57P05")
}

/// A PostgreSQL error, sorted by its SQLSTATE: an ended session (see `postgres_session_ended`),
/// insufficient resources (53), and a serialization failure or deadlock (40001, 40P01) pass;
/// the rest is a fault.
fn postgres_sorted(code: &str, cause: Cause) -> StoreError {
    let passes =
        postgres_session_ended(code) || code.starts_with("53") || matches!(code, "40001" | "40P01");
    if passes {
        StoreError::Unavailable(cause)
    } else {
        StoreError::Other(cause)
    }
}

/// A SQLite error, sorted by its primary result code: SQLITE_BUSY (5), SQLITE_LOCKED (6),
/// SQLITE_IOERR (10), SQLITE_FULL (13) and SQLITE_CANTOPEN (14) pass; the rest is a fault.
fn by_code(code: Option<i32>, cause: Cause) -> StoreError {
    match code.map(|c| c & 0xff) {
        Some(5 | 6 | 10 | 13 | 14) => StoreError::Unavailable(cause),
        _ => StoreError::Other(cause),
    }
}

/// An error of sqlx's SQLite driver (the readers), sorted by SQLite's result code.
fn sqlite_sorted(code: &str, cause: Cause) -> StoreError {
    by_code(code.parse::<i32>().ok(), cause)
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        let code = match &e {
            rusqlite::Error::SqliteFailure(failure, _) => Some(failure.extended_code),
            _ => None,
        };
        by_code(code, Arc::new(e))
    }
}

#[cfg(test)]
mod tests {
    use super::postgres_session_ended;

    #[test]
    fn an_ended_session_is_class_08_and_the_server_ending_it() {
        for code in ["08000", "08006", "57P01", "57P02", "57P03", "57P05"] {
            assert!(postgres_session_ended(code), "{code}");
        }
        // A dropped database, a busy server, a deadlock and a constraint: a new connection
        // would not help, or the session goes on.
        for code in ["57P04", "53300", "40P01", "23505", "57014"] {
            assert!(!postgres_session_ended(code), "{code}");
        }
    }
}
