//! Durable state: accounts, API keys, tasks (the queue) and the webhook outbox.
//!
//! SQLite in WAL mode. Writes go through one dedicated connection, so writers queue inside the
//! process instead of fighting over the database lock; reads use a separate pool and never wait
//! for writers. Every statement that a worker or dispatcher issues after a claim is fenced (by the
//! task's attempt number or the delivery's lease), so a stale owner cannot overwrite newer state.

mod accounts;
mod deliveries;
mod ids;
mod tasks;
mod writer;

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteSynchronous,
};
use sqlx::Connection;
use tokio_util::sync::CancellationToken;

pub use accounts::{Account, ApiKeyInfo, KeyOwner, LiveKey};
pub use deliveries::{AttemptRecord, AttemptRow, DueDelivery, Redelivery};
pub use ids::TaskIds;
pub use tasks::{ClaimedTask, NewTask, Outcome, Submitted, TaskRow, KEY_TOUCH_EVERY_MS};

/// An error from either SQLite driver (reads go through sqlx's pool, writes through the writer's
/// own connection), shared: one failed commit answers every write that was in it.
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
    /// The writer has stopped: the store is closing.
    fn closed() -> StoreError {
        StoreError::Unavailable(Arc::new(writer::Failure("the store is closed".into())))
    }

    /// Sorted by SQLite's primary result code: SQLITE_BUSY (5), SQLITE_LOCKED (6),
    /// SQLITE_IOERR (10), SQLITE_FULL (13) and SQLITE_CANTOPEN (14) pass; the rest is a fault.
    fn by_code(code: Option<i32>, cause: Cause) -> StoreError {
        match code.map(|c| c & 0xff) {
            Some(5 | 6 | 10 | 13 | 14) => StoreError::Unavailable(cause),
            _ => StoreError::Other(cause),
        }
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        match &e {
            sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) => {
                StoreError::Unavailable(Arc::new(e))
            }
            sqlx::Error::Database(db) => {
                let code = db.code().and_then(|c| c.parse::<i32>().ok());
                StoreError::by_code(code, Arc::new(e))
            }
            _ => StoreError::Other(Arc::new(e)),
        }
    }
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        let code = match &e {
            rusqlite::Error::SqliteFailure(failure, _) => Some(failure.extended_code),
            _ => None,
        };
        StoreError::by_code(code, Arc::new(e))
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

/// How often `run_checkpointer` checkpoints while there are writes. The more often, the less
/// each checkpoint copies and the shorter the writer's stalls behind it (its fsyncs wait on the
/// checkpoint's): in `bench/run --only submit` at 64 clients, `sync=full`, p99 was 23 ms with
/// checkpoints every second, 15 ms every 100 ms, 12 ms every 50 ms, 8.7 to 10.8 ms every 20 ms
/// (five runs) and 7.7 to 8.6 ms every 10 ms (two runs), while throughput fell from 23,400
/// submits/s to 19,400 to 19,700.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(10);
/// How often it looks while the database is idle (the last checkpoint found nothing new).
const CHECKPOINT_IDLE: Duration = Duration::from_millis(500);
/// WAL pages (4 KiB) past which the writer checkpoints itself: 64 MiB.
const WRITER_CHECKPOINT_PAGES: u32 = 16_384;

/// The handle every role shares. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    /// Shared: the store is cloned for every request (with the server's state) and every
    /// delivery, and the options are a deep structure of strings and maps.
    options: Arc<SqliteConnectOptions>,
    /// Every write, on the writer's thread (`writer.rs`).
    writer: writer::Writer,
    reader: SqlitePool,
    /// Public task ids from `seq` and back.
    ids: Arc<TaskIds>,
}

/// The key that task ids are made with, created on first use. It must never change: every id
/// handed out so far is made with it.
async fn task_id_key(conn: &mut SqliteConnection) -> anyhow::Result<[u8; 32]> {
    let mut fresh = [0u8; 32];
    rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut fresh);
    sqlx::query(
        "INSERT INTO settings (name, value) VALUES ('task_id_key', ?) ON CONFLICT DO NOTHING",
    )
    .bind(fresh.as_slice())
    .execute(&mut *conn)
    .await?;
    let key: Vec<u8> = sqlx::query_scalar("SELECT value FROM settings WHERE name = 'task_id_key'")
        .fetch_one(&mut *conn)
        .await?;
    key.try_into()
        .map_err(|_| anyhow::anyhow!("the stored task id key is not 32 bytes"))
}

/// `rows` cut into chunks of 2^k rows (at most `largest`, a power of two), largest first: 34 rows
/// are 32 + 2. Each comes with its k, so that a statement per chunk size, prepared once, serves
/// groups of any size.
fn chunks<T>(rows: &[T], largest: usize) -> impl Iterator<Item = (usize, &[T])> {
    let mut rest = rows;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let k = (rest.len().ilog2()).min(largest.ilog2()) as usize;
        let (chunk, tail) = rest.split_at(1 << k);
        rest = tail;
        Some((k, chunk))
    })
}

/// A list as one JSON text, for `json_each`: how a list reaches SQLite as one bound value.
fn to_json(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).expect("lists of ids serialize")
}

/// Current time as Unix milliseconds, the unit of every stored time.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Page cache per connection, in KiB (six connections: the writer, four readers and the
/// checkpointer): memory stays bounded however many tasks are stored.
const CACHE_KIB: u32 = 4096;

impl Store {
    /// Open (creating if needed) the database and bring its schema up to date.
    pub async fn open(url: &str, synchronous_full: bool) -> anyhow::Result<Store> {
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(if synchronous_full {
                SqliteSynchronous::Full
            } else {
                SqliteSynchronous::Normal
            })
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(5))
            .pragma("temp_store", "memory")
            .pragma("cache_size", format!("-{CACHE_KIB}"));
        let path = options.get_filename().to_path_buf();
        if path.as_os_str() == ":memory:" || url.contains("mode=memory") {
            anyhow::bail!(
                "database_url: easel needs a database file, not an in-memory database (the \
                 writer, the readers and the checkpointer are connections of their own)"
            );
        }
        if let Some(parent) = path.parent() {
            if !parent.as_os_str().is_empty() {
                std::fs::create_dir_all(parent)?;
            }
        }
        // Create and migrate with a connection of its own, closed before the writer starts.
        let mut setup = SqliteConnection::connect_with(&options).await?;
        sqlx::migrate!("./migrations/sqlite")
            .run(&mut setup)
            .await?;
        let ids = Arc::new(TaskIds::new(&task_id_key(&mut setup).await?));
        setup.close().await?;

        // The writer checkpoints itself only when the checkpointer (`run_checkpointer`) falls
        // far behind or is not running (the CLI, tests that drive the store directly).
        let writer = writer::Writer::start(
            &path,
            &writer::WriterOptions {
                synchronous_full,
                autocheckpoint_pages: WRITER_CHECKPOINT_PAGES,
                cache_kib: CACHE_KIB,
                busy_timeout_ms: 5000,
            },
            tasks::SubmitState::new(ids.clone()),
        )?;
        // A local file has nothing to test: skip sqlx's ping before every checkout, a round
        // trip to the connection's thread.
        let reader = SqlitePoolOptions::new()
            .test_before_acquire(false)
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options.clone().read_only(true))
            .await?;
        Ok(Store {
            options: Arc::new(options),
            writer,
            ids,
            reader,
        })
    }

    /// Copy committed pages from the write-ahead log back into the database file every
    /// `CHECKPOINT_EVERY` (`CHECKPOINT_IDLE` while nothing is written), on a connection of its
    /// own, until `stop`. Left to the writer (SQLite's default, every 1,000 pages), a checkpoint
    /// runs inside whichever commit crosses the threshold, and every submit in that batch waits
    /// for it; here it runs beside the writer (a `PASSIVE` checkpoint never blocks it).
    pub async fn run_checkpointer(&self, stop: CancellationToken) {
        let mut conn = loop {
            match SqliteConnection::connect_with(&self.options).await {
                Ok(conn) => break conn,
                Err(e) => {
                    tracing::warn!(error = %e, "checkpointer cannot open the database");
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                        _ = stop.cancelled() => return,
                    }
                }
            }
        };
        let mut wait = CHECKPOINT_EVERY;
        let mut last_log = -1;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = stop.cancelled() => break,
            }
            // (busy, frames in the WAL, frames copied back): nothing new when the WAL is
            // unchanged since last time and fully copied.
            let done: Result<(i64, i64, i64), _> = sqlx::query_as("PRAGMA wal_checkpoint(PASSIVE)")
                .fetch_one(&mut conn)
                .await;
            wait = match done {
                Ok((_, log, copied)) => {
                    let idle = log == last_log && copied == log;
                    last_log = log;
                    if idle {
                        CHECKPOINT_IDLE
                    } else {
                        CHECKPOINT_EVERY
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "checkpoint failed; the writer will checkpoint later");
                    CHECKPOINT_IDLE
                }
            };
        }
        let _ = conn.close().await;
    }

    /// The public id of the task stored at `seq`.
    pub fn task_id(&self, seq: i64) -> uuid::Uuid {
        self.ids.id(seq)
    }

    /// Whether the database answers a trivial query.
    pub async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1").execute(&self.reader).await?;
        Ok(())
    }

    /// Close the readers, then the writer once it has applied what was queued.
    pub async fn close(&self) {
        self.reader.close().await;
        self.writer.close().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_cut_into_power_of_two_chunks_largest_first() {
        let sizes = |n: usize, largest: usize| -> Vec<(usize, usize)> {
            let rows: Vec<usize> = (0..n).collect();
            // Every row once, in order.
            let again: Vec<usize> = chunks(&rows, largest)
                .flat_map(|(_, c)| c.to_vec())
                .collect();
            assert_eq!(again, rows);
            chunks(&rows, largest).map(|(k, c)| (k, c.len())).collect()
        };
        assert_eq!(sizes(0, 64), []);
        assert_eq!(sizes(1, 64), [(0, 1)]);
        assert_eq!(sizes(7, 64), [(2, 4), (1, 2), (0, 1)]);
        assert_eq!(sizes(34, 64), [(5, 32), (1, 2)]);
        assert_eq!(sizes(200, 64), [(6, 64), (6, 64), (6, 64), (3, 8)]);
        assert_eq!(sizes(20, 8), [(3, 8), (3, 8), (2, 4)]);
    }
}
