//! The SQLite store: easel's embedded default, one node on one database file in WAL mode.
//!
//! Writes go through one dedicated connection on a thread of its own (`writer.rs`), so writers
//! queue inside the process instead of fighting over the database lock, and each drain of the
//! queue commits as one transaction (group commit); reads use a separate pool and never wait
//! for writers. A checkpointer copies the WAL back beside the writer (`run_background`).

mod batch;
mod claims;
mod deliveries;
mod endings;
mod ledger;
mod records;
mod search_index;
mod shared;
mod submit;
mod task_queue;
mod versions;
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

use super::queue::Heads;
use super::{fresh_id_key, TaskIds, Wakeups};

/// Where each mode's head stands when the store opens: the highest turn of its tasks started
/// and not ended, or its lowest waiting turn if higher (a restart forgets the claims of tasks
/// since ended, which only lets a newcomer's turn be lower than the last claimed, never behind a
/// task still waiting).
async fn queue_heads(conn: &mut SqliteConnection) -> anyhow::Result<[i64; 3]> {
    let mut at = [0i64; 3];
    for (priority, head) in (0i64..).zip(at.iter_mut()) {
        *head = sqlx::query_scalar(
            "SELECT max(
                 COALESCE((SELECT max(turn) FROM tasks
                           WHERE status IN ('starting', 'processing') AND priority = ?1), 0),
                 COALESCE((SELECT turn FROM tasks WHERE status = 'pending' AND priority = ?1
                           ORDER BY turn LIMIT 1), 0))",
        )
        .bind(priority)
        .fetch_one(&mut *conn)
        .await?;
    }
    Ok(at)
}

/// The key that task ids are made with, created on first use. It must never change: every id
/// handed out so far is made with it.
async fn task_id_key(conn: &mut SqliteConnection) -> anyhow::Result<[u8; 32]> {
    sqlx::query(
        "INSERT INTO settings (name, value) VALUES ('task_id_key', ?) ON CONFLICT DO NOTHING",
    )
    .bind(fresh_id_key().as_slice())
    .execute(&mut *conn)
    .await?;
    let key: Vec<u8> = sqlx::query_scalar("SELECT value FROM settings WHERE name = 'task_id_key'")
        .fetch_one(&mut *conn)
        .await?;
    key.try_into()
        .map_err(|_| anyhow::anyhow!("the stored task id key is not 32 bytes"))
}

/// How often `run_checkpointer` checkpoints while there are writes. The more often, the less
/// each checkpoint copies and the shorter the writer's stalls behind it (its fsyncs wait on the
/// checkpoint's), for some throughput: submit p99 against the interval is measured in
/// docs/design.md ("The SQLite store").
const CHECKPOINT_EVERY: Duration = Duration::from_millis(10);
/// How often it looks while the database is idle (the last checkpoint found nothing new).
const CHECKPOINT_IDLE: Duration = Duration::from_millis(500);
/// WAL pages (4 KiB) past which the writer checkpoints itself: 64 MiB.
const WRITER_CHECKPOINT_PAGES: u32 = 16_384;

/// The SQLite store. Shared behind an `Arc<dyn Store>`.
pub struct SqliteStore {
    /// For the checkpointer's connection.
    options: SqliteConnectOptions,
    /// Every write, on the writer's thread (`writer.rs`).
    writer: writer::Writer,
    reader: SqlitePool,
    /// Public task ids from `seq` and back.
    ids: Arc<TaskIds>,
    /// Wake-ups stay inside the process: one node owns the file.
    wakeups: Wakeups,
    /// The modes' heads (`store::queue`): this process makes every claim, so it keeps them.
    heads: Arc<Heads>,
}

/// Page cache per connection, in KiB (six connections: the writer, four readers and the
/// checkpointer): memory stays bounded however many tasks are stored.
const CACHE_KIB: u32 = 4096;

impl SqliteStore {
    /// The connection options for `url`, and the database file's path.
    fn options(
        url: &str,
        synchronous_full: bool,
    ) -> anyhow::Result<(SqliteConnectOptions, std::path::PathBuf)> {
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
        Ok((options, path))
    }

    /// Open (creating if needed) the database and bring its schema up to date.
    pub async fn open(url: &str, synchronous_full: bool) -> anyhow::Result<SqliteStore> {
        let (options, path) = Self::options(url, synchronous_full)?;
        // Create and migrate with a connection of its own, closed before the writer starts.
        let mut setup = SqliteConnection::connect_with(&options).await?;
        sqlx::migrate!("./migrations/sqlite")
            .run(&mut setup)
            .await?;
        let ids = Arc::new(TaskIds::new(&task_id_key(&mut setup).await?));
        let heads = Arc::new(Heads::new(queue_heads(&mut setup).await?));
        setup.close().await?;

        let wakeups = Wakeups::default();
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
            submit::SubmitState::new(ids.clone(), heads.clone(), wakeups.outbox.clone()),
        )?;
        // A local file has nothing to test: skip sqlx's ping before every checkout, a round
        // trip to the connection's thread.
        let reader = SqlitePoolOptions::new()
            .test_before_acquire(false)
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options.clone().read_only(true))
            .await?;
        Ok(SqliteStore {
            options,
            writer,
            ids,
            reader,
            heads,
            wakeups,
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

    /// Create the database if needed and bring its schema up to date (`easel migrate`).
    pub async fn migrate(url: &str) -> anyhow::Result<()> {
        let (options, _) = Self::options(url, true)?;
        let mut setup = SqliteConnection::connect_with(&options).await?;
        sqlx::migrate!("./migrations/sqlite")
            .run(&mut setup)
            .await?;
        setup.close().await?;
        Ok(())
    }
}
