//! Durable state: accounts, API keys, tasks (the queue) and the webhook outbox.
//!
//! SQLite in WAL mode. Writes go through one dedicated connection, so writers queue inside the
//! process instead of fighting over the database lock; reads use a separate pool and never wait
//! for writers. Every statement that a worker or dispatcher issues after a claim is fenced (by the
//! task's attempt number or the delivery's lease), so a stale owner cannot overwrite newer state.

mod accounts;
mod batch;
mod deliveries;
mod ids;
mod tasks;

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

/// What can go wrong in the store, sorted by what the caller should do about it.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database cannot be reached or is overloaded right now; try again later.
    #[error("store unavailable: {0}")]
    Unavailable(sqlx::Error),
    /// Anything else: a bug or a damaged database.
    #[error("store error: {0}")]
    Other(sqlx::Error),
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        let transient = match &e {
            sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) => true,
            sqlx::Error::Database(db) => {
                // SQLITE_BUSY (5), SQLITE_LOCKED (6), SQLITE_IOERR (10), SQLITE_FULL (13),
                // SQLITE_CANTOPEN (14), with or without extended codes.
                let code = db
                    .code()
                    .and_then(|c| c.parse::<i64>().ok())
                    .map(|c| c & 0xff);
                matches!(code, Some(5 | 6 | 10 | 13 | 14))
            }
            _ => false,
        };
        if transient {
            StoreError::Unavailable(e)
        } else {
            StoreError::Other(e)
        }
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
    writer: SqlitePool,
    reader: SqlitePool,
    /// Submits and attempt records on their way to their group-commit batchers.
    submits: batch::Batcher<tasks::InsertTask>,
    attempts: batch::Batcher<deliveries::RecordAttempt>,
    /// Public task ids from `seq` and back.
    ids: Arc<TaskIds>,
}

/// The key that task ids are made with, created on first use. It must never change: every id
/// handed out so far is made with it.
async fn task_id_key(writer: &SqlitePool) -> anyhow::Result<[u8; 32]> {
    let mut fresh = [0u8; 32];
    rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut fresh);
    sqlx::query(
        "INSERT INTO settings (name, value) VALUES ('task_id_key', ?) ON CONFLICT DO NOTHING",
    )
    .bind(fresh.as_slice())
    .execute(writer)
    .await?;
    let key: Vec<u8> = sqlx::query_scalar("SELECT value FROM settings WHERE name = 'task_id_key'")
        .fetch_one(writer)
        .await?;
    key.try_into()
        .map_err(|_| anyhow::anyhow!("the stored task id key is not 32 bytes"))
}

/// Current time as Unix milliseconds, the unit of every stored time.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

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
            // 4 MiB of page cache per connection (five connections): memory stays bounded
            // however many tasks are stored.
            .pragma("cache_size", "-4096");
        if let Some(path) = options.get_filename().parent() {
            if !path.as_os_str().is_empty() {
                std::fs::create_dir_all(path)?;
            }
        }
        // A local file has nothing to test: skip sqlx's ping before every checkout, a round
        // trip to the connection's thread.
        // The writer checkpoints only when the checkpointer (`run_checkpointer`) falls far
        // behind or is not running (the CLI, tests that drive the store directly).
        let writer = SqlitePoolOptions::new()
            .test_before_acquire(false)
            .max_connections(1)
            .min_connections(1)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(
                options
                    .clone()
                    .pragma("wal_autocheckpoint", WRITER_CHECKPOINT_PAGES.to_string()),
            )
            .await?;
        sqlx::migrate!("./migrations/sqlite").run(&writer).await?;
        let ids = Arc::new(TaskIds::new(&task_id_key(&writer).await?));
        let reader = SqlitePoolOptions::new()
            .test_before_acquire(false)
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options.clone().read_only(true))
            .await?;
        Ok(Store {
            options: Arc::new(options),
            submits: batch::Batcher::spawn(writer.clone(), tasks::SubmitState::new(ids.clone())),
            attempts: batch::Batcher::spawn(writer.clone(), ()),
            ids,
            writer,
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

    /// Close both pools, letting queued statements finish.
    pub async fn close(&self) {
        self.reader.close().await;
        self.writer.close().await;
    }
}
