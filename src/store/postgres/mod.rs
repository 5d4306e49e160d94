//! The PostgreSQL store: the one that many easel nodes share.
//!
//! - Schema in `migrations/postgres`, applied at start by sqlx's migrator, which holds a
//!   PostgreSQL advisory lock while it runs, so nodes that start together apply each migration
//!   once (`easel migrate` runs the same without serving).
//! - Claims of tasks and deliveries pick rows with `FOR UPDATE SKIP LOCKED` and set the lease in
//!   the same statement, so nodes never wait on each other's claims.
//! - Submits are grouped into multi-row inserts (`submit.rs`), with the quota decided under the
//!   account rows' locks, so it holds however many nodes submit at once.
//! - Every commit that makes work (a task queued, a delivery queued or due again) sends a
//!   `NOTIFY`; a listener on every node (`run_background`) wakes that node's idle workers and
//!   dispatcher. Polling stays the fallback.
//! - When the database goes away, calls fail as `StoreError::Unavailable` within the pool's
//!   acquire timeout (the API answers 503 with `Retry-After`) and the pool reconnects by itself
//!   once it is back.

mod batch;
mod channels;
mod claims;
mod deliveries;
mod endings;
mod shared;
mod submit;
mod task_columns;
mod task_queue;

pub use submit::STORED_ANSWERS;

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions};
use sqlx::ConnectOptions;
use tokio_util::sync::CancellationToken;

use super::{fresh_id_key, redact, TaskIds, Wakeups};
use crate::config::Database;
use channels::{read_event, read_new_tasks, OUTBOX_CHANNEL, QUEUE_CHANNEL, TASK_EVENT_CHANNEL};

/// How the PostgreSQL store is set up, from the configuration.
#[derive(Clone, Debug)]
pub struct PgOptions {
    /// Most connections this node holds (the server's `max_connections` is shared by all nodes).
    pub max_connections: u32,
    /// How long a request waits for a connection before it is answered 503.
    pub acquire_timeout: Duration,
}

impl PgOptions {
    pub fn from_config(database: &Database) -> PgOptions {
        PgOptions {
            max_connections: database.max_connections,
            acquire_timeout: Duration::from_secs(3),
        }
    }
}

/// The PostgreSQL store. Shared behind an `Arc<dyn Store>`.
pub struct PgStore {
    pool: PgPool,
    ids: Arc<TaskIds>,
    wakeups: Arc<Wakeups>,
    submits: submit::Submitter,
}

/// Whether an error at start is worth retrying: the server is unreachable or not ready yet, as
/// opposed to a wrong password or a missing database, which waiting does not fix.
fn worth_retrying(e: &sqlx::Error) -> bool {
    submit::connection_lost(e)
        || matches!(e, sqlx::Error::Tls(_) | sqlx::Error::PoolTimedOut)
        || submit::sql_state(e).is_some_and(|c| c.starts_with("53"))
}

impl PgStore {
    /// Connect (retrying while the server cannot be reached, with a log line each time), apply
    /// the migrations, and start the submit batcher.
    pub async fn open(url: &str, options: &PgOptions) -> anyhow::Result<PgStore> {
        let pool = connect(url, options).await?;
        migrate_pool(&pool).await?;
        let key = task_id_key(&pool).await?;
        let ids = Arc::new(TaskIds::new(&key));
        let wakeups = Arc::new(Wakeups::default());
        let submits = submit::Submitter::start(&pool, ids.clone(), options.acquire_timeout)?;
        tracing::info!(url = %redact(url), "PostgreSQL store open");
        Ok(PgStore {
            pool,
            ids,
            wakeups,
            submits,
        })
    }

    /// Bring the schema up to date and return (`easel migrate`).
    pub async fn migrate(url: &str) -> anyhow::Result<()> {
        let options = PgOptions {
            max_connections: 2,
            acquire_timeout: Duration::from_secs(10),
        };
        let pool = connect(url, &options).await?;
        migrate_pool(&pool).await?;
        pool.close().await;
        Ok(())
    }

    /// Wake this node's idle workers and dispatcher whenever any node's commit notifies, until
    /// `stop`. A notification lost while the listener reconnects is made up for by waking
    /// everyone after each reconnect, and by polling.
    async fn listen(&self, stop: CancellationToken) {
        let mut reported = false;
        loop {
            let mut listener = match PgListener::connect_with(&self.pool).await {
                Ok(listener) => listener,
                Err(e) => {
                    if !reported {
                        tracing::warn!(error = %e, "cannot listen for other nodes' wake-ups; polling meanwhile");
                        reported = true;
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                        _ = stop.cancelled() => return,
                    }
                }
            };
            if let Err(e) = listener
                .listen_all([QUEUE_CHANNEL, OUTBOX_CHANNEL, TASK_EVENT_CHANNEL])
                .await
            {
                tracing::warn!(error = %e, "LISTEN failed; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    _ = stop.cancelled() => return,
                }
            }
            if reported {
                tracing::info!("listening for other nodes' wake-ups again");
            }
            self.wake_all();
            loop {
                let received = tokio::select! {
                    received = listener.try_recv() => received,
                    _ = stop.cancelled() => return,
                };
                match received {
                    Ok(Some(note)) => match note.channel() {
                        QUEUE_CHANNEL => {
                            self.wakeups.queue.notify_one();
                            self.wakeups.queue.notify_waiters();
                            if let Some(firsts) = read_new_tasks(note.payload()) {
                                for (account, seq) in firsts {
                                    self.wakeups.events.new_tasks(account, seq);
                                }
                            } else if !note.payload().is_empty() {
                                self.wakeups.events.resync();
                            }
                        }
                        TASK_EVENT_CHANNEL => match read_event(note.payload()) {
                            Some(event) => self.wakeups.events.publish(event),
                            None => self.wakeups.events.resync(),
                        },
                        _ => self.wakeups.outbox.notify_one(),
                    },
                    // The connection was lost: `try_recv` reconnects on the next call, but
                    // whatever was sent meanwhile is gone.
                    Ok(None) => self.wake_all(),
                    Err(e) => {
                        tracing::warn!(error = %e, "lost the wake-up listener; reconnecting");
                        reported = true;
                        break;
                    }
                }
            }
        }
    }

    /// After the listener (re)connected or may have missed notifications: everyone looks again.
    fn wake_all(&self) {
        self.wakeups.queue.notify_waiters();
        self.wakeups.outbox.notify_one();
        self.wakeups.events.resync();
    }
}

/// A pool for `url`, once the server answers. Unreachable servers are retried every 2 s with a
/// line in the log; anything else (a wrong password, no such database) stops at once.
async fn connect(url: &str, options: &PgOptions) -> anyhow::Result<PgPool> {
    let connect: PgConnectOptions = url
        .parse()
        .map_err(|e| anyhow::anyhow!("database_url ({}): {e}", redact(url)))?;
    // Statements are logged at debug by sqlx; they carry no secrets but are noisy.
    let connect = connect.log_statements(tracing::log::LevelFilter::Trace);
    let mut tries = 0u32;
    loop {
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(options.acquire_timeout)
            .connect_with(connect.clone())
            .await;
        match pool {
            Ok(pool) => return Ok(pool),
            Err(e) if worth_retrying(&e) => {
                tries += 1;
                tracing::warn!(
                    url = %redact(url),
                    error = %e,
                    tries,
                    "cannot reach PostgreSQL yet; retrying in 2 s"
                );
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            Err(e) => anyhow::bail!("cannot open PostgreSQL at {}: {e}", redact(url)),
        }
    }
}

async fn migrate_pool(pool: &PgPool) -> anyhow::Result<()> {
    sqlx::migrate!("./migrations/postgres")
        .run(pool)
        .await
        .map_err(|e| anyhow::anyhow!("PostgreSQL migrations: {e}"))
}

/// The key that task ids are made with, created by the first node that needs it. It must never
/// change: every id handed out so far is made with it.
async fn task_id_key(pool: &PgPool) -> anyhow::Result<[u8; 32]> {
    sqlx::query(
        "INSERT INTO settings (name, value) VALUES ('task_id_key', $1) ON CONFLICT DO NOTHING",
    )
    .bind(fresh_id_key().as_slice())
    .execute(pool)
    .await?;
    let key: Vec<u8> = sqlx::query_scalar("SELECT value FROM settings WHERE name = 'task_id_key'")
        .fetch_one(pool)
        .await?;
    key.try_into()
        .map_err(|_| anyhow::anyhow!("the stored task id key is not 32 bytes"))
}
