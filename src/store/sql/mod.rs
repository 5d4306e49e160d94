//! The SQL both stores run, written once, and the parts of the store's interface made of it.
//!
//! A statement is written with PostgreSQL's `$1`, `$2`... and spelled for each database at
//! compile time ([`sql!`]); where the databases differ, the statement names the difference as a
//! piece spelled each way ([`Sql::each`]). Reads go through sqlx on both stores ([`Reader`]);
//! writes go through [`SqlStore::write`], which each store runs its own way: SQLite on its
//! writer's thread (rusqlite, in the writer's next transaction), PostgreSQL on its pool.
//!
//! Written once over [`SqlStore`]: [`Store`] itself, [`Accounts`](crate::store::Accounts),
//! [`Views`](crate::store::Views), [`Retention`](crate::store::Retention),
//! [`Uploads`](crate::store::Uploads) and [`WebhookTargets`](crate::store::WebhookTargets), but
//! for the little each store does its own way (an upload's daily limit, the background work).
//! The queue and the outbox differ more than they agree (claims, leases, versions and wake-ups
//! work differently on each database), so each store implements those itself, calling the
//! statements here that both share ([`queue_outbox`]).

pub(crate) mod account_webhooks;
mod accounts;
mod moderation;
mod operators;
pub(crate) mod queue_outbox;
mod reader;
pub(crate) mod search;
mod text;
mod upkeep;
pub(crate) mod usage;
mod views;

use std::future::Future;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

pub(crate) use reader::{arguments, json, Arg, Reader};
pub(crate) use text::{joined, joined_len, sql, utf8, Sql};

use crate::store::{
    Outbox, Store, StoreResult, TaskIds, TaskQueue, Upload, UploadAdmitted, Wakeups,
};

/// Whether a write must be on disk before its caller hears of it. SQLite's writer fsyncs a
/// drain only when a write in it needs it (with `synchronous = full`); every PostgreSQL commit
/// is durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Durability {
    /// Fsynced when it commits: a client was told of it, or later steps act on it.
    Synced,
    /// Committed, and fsynced with the next write that is (or the next checkpoint): a write that a
    /// power loss can only make easel do again (claims, attempt records, heartbeats).
    Committed,
}

/// One statement of a write, with its values.
pub(crate) struct Write<'a> {
    pub(crate) sql: &'a Sql,
    pub(crate) args: &'a [Arg<'a>],
}

impl<'a> Write<'a> {
    pub(crate) fn new(sql: &'a Sql, args: &'a [Arg<'a>]) -> Write<'a> {
        Write { sql, args }
    }
}

/// What the SQL written once needs of a store, and what each store does its own way besides
/// the queue and the outbox.
pub(crate) trait SqlStore: Send + Sync {
    /// `sqlite` or `postgres`, for logs.
    const KIND: &'static str;

    /// Where it reads.
    fn reader(&self) -> Reader<'_>;

    /// Public task ids from `seq` and back.
    fn ids(&self) -> &TaskIds;

    /// Its wake-ups of idle workers and dispatchers.
    fn wakeups(&self) -> &Wakeups;

    /// Run `statements` in order, in one transaction; how many rows each changed.
    fn write(
        &self,
        durability: Durability,
        statements: &[Write<'_>],
    ) -> impl Future<Output = StoreResult<Vec<u64>>> + Send;

    /// Run one statement; how many rows it changed.
    fn execute(
        &self,
        durability: Durability,
        sql: &Sql,
        args: &[Arg<'_>],
    ) -> impl Future<Output = StoreResult<u64>> + Send {
        async move {
            let changed = self.write(durability, &[Write::new(sql, args)]).await?;
            Ok(changed.first().copied().unwrap_or(0))
        }
    }

    /// The `seq` of the task with public id `task_id`, if it is the account's. (SQLite also
    /// finds tasks by the random ids they had before ids came from `seq`.)
    fn account_task(
        &self,
        account_id: &str,
        task_id: &Uuid,
    ) -> impl Future<Output = StoreResult<Option<i64>>> + Send;

    /// Record `upload` unless the account's bytes for its day would pass `max_bytes`, decided
    /// under each database's own guard against concurrent uploads: SQLite's one writer, a row
    /// lock on PostgreSQL.
    fn admit_upload(
        &self,
        upload: &Upload,
        max_bytes: i64,
    ) -> impl Future<Output = StoreResult<UploadAdmitted>> + Send;

    /// Bring the prompts' full-text index up to every task stored so far, before a search reads
    /// it: SQLite fills it behind the writer (`sqlite::search_index`); PostgreSQL's is written
    /// with each task.
    fn search_caught_up(&self) -> impl Future<Output = StoreResult<()>> + Send {
        async { Ok(()) }
    }

    /// [`Store::run_background`]: SQLite's checkpoints and prompts' index, PostgreSQL's
    /// listener.
    fn background(&self, stop: CancellationToken) -> impl Future<Output = ()> + Send;

    /// [`Store::close`].
    fn shut_down(&self) -> impl Future<Output = ()> + Send;
}

#[async_trait]
impl<S: SqlStore + TaskQueue + Outbox> Store for S {
    fn kind(&self) -> &'static str {
        S::KIND
    }

    fn task_id(&self, seq: i64) -> Uuid {
        self.ids().id(seq)
    }

    fn wakeups(&self) -> &Wakeups {
        SqlStore::wakeups(self)
    }

    async fn ping(&self) -> StoreResult<()> {
        let _: (i64,) = self.reader().one("SELECT CAST(1 AS BIGINT)", &[]).await?;
        Ok(())
    }

    async fn run_background(&self, stop: CancellationToken) {
        self.background(stop).await
    }

    async fn close(&self) {
        self.shut_down().await
    }
}
