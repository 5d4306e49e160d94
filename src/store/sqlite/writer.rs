//! The writer: the one connection that writes, on an OS thread of its own.
//!
//! Every write in the process goes through it, so writers queue here instead of fighting over
//! SQLite's lock. The thread takes whatever is queued (up to `MAX_DRAIN` jobs) and applies it in
//! **one** transaction, then answers each caller once that transaction has committed: one commit,
//! and with `synchronous = full` one fsync, covers every write that was waiting, whatever its
//! kind (group commit). While a drain commits, the next one queues up. Only a drain made of
//! webhook attempt records alone waits a little for more (`gather_records`); any other write
//! wakes the thread and ends that wait.
//!
//! Inside the transaction each part runs in a savepoint of its own: the submits together, the
//! webhook attempt records together, and each other write alone. A part that fails is rolled
//! back alone and its callers get its error; the others commit. Should a group of submits or
//! records fail as a whole, each of its writes is tried again alone, so one bad row cannot fail
//! the rest. If SQLite abandons the transaction itself (an I/O error, a full disk), nothing of
//! the drain was written and every caller in it gets the error.
//!
//! With `sqlite_synchronous = full`, a drain is fsynced when it commits only if one of its writes
//! needs it ([`Durability`]): what a client was told (a submit accepted, a key, a redelivery) and
//! what later steps act on (a task's final state, which its webhook announces). Claims, attempt
//! records and heartbeats commit without an fsync of their own: they are visible at once and
//! become durable with the next fsync (the next such drain, or the next checkpoint). A power loss
//! can forget the last of them, which only makes easel do that work again: a forgotten claim
//! returns its task or delivery to the queue, a forgotten attempt is made again (deliveries are
//! at least once). A crash of the process alone forgets nothing: a commit is in the WAL file.
//!
//! Why a thread of our own rather than a pooled async connection: the async SQLite driver runs
//! each connection on a thread of its own and every statement is a round trip between threads.
//! A batch of submits took three such round trips; on 2 busy cores each hand-off can wait for a
//! time slice, and those waits, not SQLite or the fsync, set the batch rate. Here a batch costs
//! one hand-off in (waking this thread, if it sleeps) and one answer out per caller.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::Arc;

use rusqlite::{Connection, OpenFlags};
use tokio::sync::{mpsc, oneshot};

use super::records::{apply_records, RecordAttempt};
use super::submit::{apply_submits, InsertTask, SubmitState};
use crate::store::sql::Durability;
use crate::store::{Failure, StoreError, StoreResult, Submitted};

/// Most jobs applied in one transaction.
const MAX_DRAIN: usize = 512;
/// Jobs waiting for the writer; more wait for room (backpressure on the callers).
const QUEUE: usize = 4096;
/// Attempt records a drain of them alone waits for (see `gather_records`).
const GATHER_RECORDS: usize = 32;
/// How long a drain of attempt records alone waits for more at most.
const GATHER_MAX: std::time::Duration = std::time::Duration::from_micros(1000);
/// How often it looks meanwhile.
const GATHER_STEP: std::time::Duration = std::time::Duration::from_micros(200);
/// Prepared statements the writer keeps (the submit and record statements, claims, the rest).
const STATEMENT_CACHE: usize = 64;

/// A write that answers itself once the transaction it ran in has ended: the closure runs the
/// statements and returns whether they succeeded, and how to answer (given the commit's error,
/// if the commit failed).
type Call = Box<dyn FnOnce(&Connection) -> (bool, Answer) + Send>;
type Answer = Box<dyn FnOnce(Option<&StoreError>) + Send>;

enum Job {
    Submit(InsertTask, oneshot::Sender<StoreResult<Submitted>>),
    Record(RecordAttempt, oneshot::Sender<StoreResult<bool>>),
    Call(Call, Durability),
    /// Finish what was queued before, close the connection, then answer.
    Close(oneshot::Sender<()>),
}

/// How the writer's connection is opened.
pub(super) struct WriterOptions {
    pub synchronous_full: bool,
    /// WAL pages past which the writer checkpoints itself (the checkpointer normally does).
    pub autocheckpoint_pages: u32,
    pub cache_kib: u32,
    pub busy_timeout_ms: u32,
}

impl Job {
    fn durability(&self) -> Durability {
        match self {
            Job::Submit(..) => Durability::Synced,
            Job::Record(..) => Durability::Committed,
            Job::Call(_, durability) => *durability,
            Job::Close(_) => Durability::Committed,
        }
    }
}

/// The queue in front of the writer's thread. Cheap to clone.
#[derive(Clone)]
pub(super) struct Writer {
    queue: mpsc::Sender<Job>,
    /// The writer's thread, unparked by every write but an attempt record, so that a drain of
    /// records waiting for more (`gather_records`) goes at once.
    thread: std::thread::Thread,
}

impl Writer {
    /// Open the write connection on `path` (which must exist, with its schema) and start the
    /// thread. It stops at `close`, or when every `Writer` clone is gone.
    pub(super) fn start(
        path: &Path,
        options: &WriterOptions,
        submits: SubmitState,
    ) -> anyhow::Result<Writer> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.execute_batch(&format!(
            "PRAGMA journal_mode = WAL;
             PRAGMA synchronous = {};
             PRAGMA foreign_keys = ON;
             PRAGMA busy_timeout = {};
             PRAGMA temp_store = MEMORY;
             PRAGMA cache_size = -{};
             PRAGMA wal_autocheckpoint = {};",
            if options.synchronous_full {
                "FULL"
            } else {
                "NORMAL"
            },
            options.busy_timeout_ms,
            options.cache_kib,
            options.autocheckpoint_pages,
        ))?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        let (queue, jobs) = mpsc::channel(QUEUE);
        let sync = Sync {
            full: options.synchronous_full,
            now_full: options.synchronous_full,
        };
        let thread = std::thread::Builder::new()
            .name("easel-writer".into())
            .spawn(move || run(conn, jobs, submits, sync))?
            .thread()
            .clone();
        Ok(Writer { queue, thread })
    }

    /// Run `write` in the next transaction; returns its result once that has committed (and,
    /// with `Durability::Synced`, been fsynced). On an error the statements `write` ran are
    /// rolled back (and nothing else is).
    pub(super) async fn call<T, F>(&self, durability: Durability, write: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
    {
        self.call_or_undo(durability, |conn| write(conn).map(|value| (true, value)))
            .await
    }

    /// [`Writer::call`] whose `write` may also answer with its statements undone: they are
    /// kept only when it returns `Ok((true, _))`.
    pub(super) async fn call_or_undo<T, F>(
        &self,
        durability: Durability,
        write: F,
    ) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> StoreResult<(bool, T)> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let call: Call = Box::new(move |conn| {
            let result = write(conn);
            let ok = matches!(result, Ok((true, _)));
            let result = result.map(|(_, value)| value);
            let answer: Answer = Box::new(move |commit: Option<&StoreError>| {
                let _ = reply.send(match commit {
                    None => result,
                    Some(e) => Err(e.clone()),
                });
            });
            (ok, answer)
        });
        self.send(Job::Call(call, durability)).await?;
        answer.await.map_err(|_| closed())?
    }

    /// Store a submit in the next transaction, with the others queued beside it.
    pub(super) async fn submit(&self, write: InsertTask) -> StoreResult<Submitted> {
        let (reply, answer) = oneshot::channel();
        self.send(Job::Submit(write, reply)).await?;
        answer.await.map_err(|_| closed())?
    }

    /// Record a webhook attempt in the next transaction, with the others queued beside it.
    pub(super) async fn record(&self, write: RecordAttempt) -> StoreResult<bool> {
        let (reply, answer) = oneshot::channel();
        self.send(Job::Record(write, reply)).await?;
        answer.await.map_err(|_| closed())?
    }

    /// Apply what is queued, close the connection (which checkpoints the WAL), and stop.
    pub(super) async fn close(&self) {
        let (done, closed) = oneshot::channel();
        if self.queue.send(Job::Close(done)).await.is_ok() {
            self.thread.unpark();
            let _ = closed.await;
        }
    }

    async fn send(&self, job: Job) -> StoreResult<()> {
        let wake = !matches!(job, Job::Record(..));
        self.queue.send(job).await.map_err(|_| closed())?;
        if wake {
            // Cheap unless the thread is parked in `gather_records` (an atomic swap otherwise).
            self.thread.unpark();
        }
        Ok(())
    }
}

/// The writer's `synchronous` setting: what it is configured to (`full`: fsync what needs it) and
/// what the connection is set to now.
struct Sync {
    full: bool,
    now_full: bool,
}

impl Sync {
    /// Set the connection to fsync the commit of a drain holding `jobs`, or not.
    fn set(&mut self, conn: &Connection, jobs: &[Job]) -> rusqlite::Result<()> {
        let full = self.full && jobs.iter().any(|j| j.durability() == Durability::Synced);
        if full != self.now_full {
            conn.execute_batch(if full {
                "PRAGMA synchronous = FULL"
            } else {
                "PRAGMA synchronous = NORMAL"
            })?;
            self.now_full = full;
        }
        Ok(())
    }
}

fn run(conn: Connection, mut jobs: mpsc::Receiver<Job>, mut submits: SubmitState, mut sync: Sync) {
    let mut drain = Vec::with_capacity(MAX_DRAIN);
    while let Some(job) = jobs.blocking_recv() {
        drain.push(job);
        take_queued(&mut jobs, &mut drain);
        gather_records(&mut jobs, &mut drain);
        let close = match drain.iter().position(|j| matches!(j, Job::Close(_))) {
            // What was queued after the close is dropped: its callers hear that the store closed.
            Some(at) => match drain.drain(at..).next() {
                Some(Job::Close(done)) => Some(done),
                _ => unreachable!("a close job at that place"),
            },
            None => None,
        };
        let jobs_now = std::mem::take(&mut drain);
        let applied = catch_unwind(AssertUnwindSafe(|| {
            if !jobs_now.is_empty() {
                apply(&conn, jobs_now, &mut submits, &mut sync);
            }
        }));
        if applied.is_err() {
            // A bug in a write. Its callers and those beside it in the drain have lost their
            // answer channels (they hear that the store closed); the writer goes on.
            tracing::error!("a write panicked; its transaction was rolled back");
            if !conn.is_autocommit() {
                let _ = exec(&conn, "ROLLBACK");
            }
        }
        if let Some(done) = close {
            drop(conn);
            let _ = done.send(());
            return;
        }
    }
}

/// Add what is queued to `drain`, up to `MAX_DRAIN` jobs.
fn take_queued(jobs: &mut mpsc::Receiver<Job>, drain: &mut Vec<Job>) {
    while drain.len() < MAX_DRAIN {
        match jobs.try_recv() {
            Ok(job) => drain.push(job),
            Err(_) => break,
        }
    }
}

/// A drain of webhook attempt records alone waits up to `GATHER_MAX` for more (until it holds
/// `GATHER_RECORDS`), looking every `GATHER_STEP`: records answer no client and need no fsync,
/// and a commit costs about as much for one as for dozens (it writes the pages they share: the
/// deliveries' rows, the due index, the attempts and their index). Any other job ends the wait:
/// its sender unparks this thread (`Writer::send`), so it is taken at once, not at the next look.
fn gather_records(jobs: &mut mpsc::Receiver<Job>, drain: &mut Vec<Job>) {
    let only_records = |drain: &[Job]| drain.iter().all(|j| matches!(j, Job::Record(..)));
    let started = std::time::Instant::now();
    while drain.len() < GATHER_RECORDS && only_records(drain) && started.elapsed() < GATHER_MAX {
        std::thread::park_timeout(GATHER_STEP);
        take_queued(jobs, drain);
    }
}

/// What to send once the transaction has ended.
enum Reply {
    Submit(
        oneshot::Sender<StoreResult<Submitted>>,
        StoreResult<Submitted>,
    ),
    Record(oneshot::Sender<StoreResult<bool>>, StoreResult<bool>),
    Call(Answer),
}

impl Reply {
    /// Answer; `lost` is the error every write of the transaction gets when it did not commit.
    fn send(self, lost: Option<&StoreError>) {
        match self {
            Reply::Submit(reply, result) => {
                let _ = reply.send(lost.map_or(result, |e| Err(e.clone())));
            }
            Reply::Record(reply, result) => {
                let _ = reply.send(lost.map_or(result, |e| Err(e.clone())));
            }
            Reply::Call(answer) => answer(lost),
        }
    }
}

/// Apply one drain in one transaction and answer every job in it.
fn apply(conn: &Connection, jobs: Vec<Job>, submits: &mut SubmitState, sync: &mut Sync) {
    // A drain that cannot be made as durable as its writes need is not applied at all.
    let begun = sync
        .set(conn, &jobs)
        .and_then(|()| exec(conn, "BEGIN IMMEDIATE"));
    let mut submit_jobs = Vec::new();
    let mut record_jobs = Vec::new();
    let mut calls = Vec::new();
    for job in jobs {
        match job {
            Job::Submit(write, reply) => submit_jobs.push((write, reply)),
            Job::Record(write, reply) => record_jobs.push((write, reply)),
            Job::Call(call, _) => calls.push(call),
            Job::Close(_) => unreachable!("taken out before"),
        }
    }
    let mut replies = Vec::with_capacity(submit_jobs.len() + record_jobs.len() + calls.len());
    if let Err(e) = begun {
        let e = StoreError::from(e);
        fail_all(submit_jobs, record_jobs, calls, &e);
        return;
    }

    // The first group runs straight in the transaction, without a savepoint of its own.
    let mut first = true;
    if !submit_jobs.is_empty() {
        let (writes, senders): (Vec<InsertTask>, Vec<_>) = submit_jobs.into_iter().unzip();
        let results = group(conn, &writes, std::mem::take(&mut first), |conn, writes| {
            apply_submits(conn, writes, submits)
        });
        replies.extend(
            senders
                .into_iter()
                .zip(results)
                .map(|(s, r)| Reply::Submit(s, r)),
        );
    }
    if !record_jobs.is_empty() {
        let (writes, senders): (Vec<RecordAttempt>, Vec<_>) = record_jobs.into_iter().unzip();
        let results = group(conn, &writes, std::mem::take(&mut first), apply_records);
        replies.extend(
            senders
                .into_iter()
                .zip(results)
                .map(|(s, r)| Reply::Record(s, r)),
        );
    }
    for call in calls {
        // A call that cannot run (the transaction is gone) is dropped unrun, which tells its
        // caller that the store is unavailable.
        if let Some(answer) = in_savepoint(conn, call) {
            replies.push(Reply::Call(answer));
        }
    }

    // SQLite rolls a transaction back by itself after some errors (I/O, a full disk): then
    // nothing of this drain was written, including the parts that went well before.
    let lost = if conn.is_autocommit() {
        Some(lost())
    } else {
        match exec(conn, "COMMIT") {
            Ok(()) => None,
            Err(e) => {
                let _ = exec(conn, "ROLLBACK");
                Some(StoreError::from(e))
            }
        }
    };
    for reply in replies {
        reply.send(lost.as_ref());
    }
}

/// Run `part` in a savepoint of the open transaction: released when it says it succeeded,
/// rolled back otherwise. None, and `part` is not run, when there is no open transaction (SQLite
/// abandoned it after an error): a savepoint would then open a transaction of its own, and its
/// release would commit the part alone.
fn in_savepoint<T>(conn: &Connection, part: impl FnOnce(&Connection) -> (bool, T)) -> Option<T> {
    if conn.is_autocommit() || exec(conn, "SAVEPOINT part").is_err() {
        return None;
    }
    let (ok, value) = part(conn);
    if !conn.is_autocommit() {
        if !ok {
            let _ = exec(conn, "ROLLBACK TO part");
        }
        let _ = exec(conn, "RELEASE part");
    }
    Some(value)
}

/// Run a statement that takes no parameters and returns no rows, prepared once.
fn exec(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(drop)
}

/// Apply a group of writes of one kind together, in a savepoint; if the group fails as a whole,
/// each write alone, in a savepoint of its own. One result per write.
///
/// The `first` group of a transaction has nothing before it to keep, so it runs without a
/// savepoint, and a failure rolls back the transaction and begins another: a savepoint makes
/// SQLite copy every page the group changes into its sub-journal first, which was a sixth of
/// the writer's time on submits (docs/benchmarks.md, issue 27).
fn group<W, O>(
    conn: &Connection,
    writes: &[W],
    first: bool,
    mut apply_all: impl FnMut(&Connection, &[W]) -> rusqlite::Result<Vec<O>>,
) -> Vec<StoreResult<O>> {
    if first && !conn.is_autocommit() {
        match apply_all(conn, writes) {
            Ok(outputs) => return outputs.into_iter().map(Ok).collect(),
            Err(e) => {
                let again = if conn.is_autocommit() {
                    exec(conn, "BEGIN IMMEDIATE")
                } else {
                    exec(conn, "ROLLBACK").and_then(|()| exec(conn, "BEGIN IMMEDIATE"))
                };
                if writes.len() == 1 || again.is_err() {
                    let e = StoreError::from(e);
                    return writes.iter().map(|_| Err(e.clone())).collect();
                }
            }
        }
    } else if writes.len() > 1 {
        let together = in_savepoint(conn, |conn| match apply_all(conn, writes) {
            Ok(outputs) => (true, Some(outputs)),
            Err(_) => (false, None),
        });
        match together {
            Some(Some(outputs)) => return outputs.into_iter().map(Ok).collect(),
            None => return writes.iter().map(|_| Err(lost())).collect(),
            // The group failed: each write alone, so that one bad write fails only itself.
            Some(None) => {}
        }
    }
    writes
        .iter()
        .map(|write| {
            in_savepoint(conn, |conn| {
                match apply_all(conn, std::slice::from_ref(write)) {
                    Ok(mut outputs) => (true, Ok(outputs.pop().expect("one output"))),
                    Err(e) => (false, Err(StoreError::from(e))),
                }
            })
            .unwrap_or_else(|| Err(lost()))
        })
        .collect()
}

/// The error of a write that the writer can no longer take or answer.
fn closed() -> StoreError {
    StoreError::Unavailable(Arc::new(Failure("the store is closed".into())))
}

/// The error of every write in a transaction that SQLite abandoned.
fn lost() -> StoreError {
    StoreError::Unavailable(Arc::new(Failure(
        "the transaction was rolled back by the database".into(),
    )))
}

fn fail_all(
    submits: Vec<(InsertTask, oneshot::Sender<StoreResult<Submitted>>)>,
    records: Vec<(RecordAttempt, oneshot::Sender<StoreResult<bool>>)>,
    calls: Vec<Call>,
    e: &StoreError,
) {
    for (_, reply) in submits {
        let _ = reply.send(Err(e.clone()));
    }
    for (_, reply) in records {
        let _ = reply.send(Err(e.clone()));
    }
    // Dropping a call drops its reply channel: its caller hears that the store is unavailable.
    drop(calls);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn synchronous(conn: &Connection) -> i64 {
        conn.query_row("PRAGMA synchronous", [], |r| r.get(0))
            .expect("pragma")
    }

    fn call(durability: Durability) -> Job {
        Job::Call(Box::new(|_| (true, Box::new(|_| {}))), durability)
    }

    fn record() -> Job {
        let write = RecordAttempt {
            delivery_id: "msg_1".into(),
            claimed_attempts: 0,
            claimed_lease: 0,
            record: crate::store::AttemptRecord {
                attempted_at: 0,
                duration_ms: 1,
                status_code: Some(200),
                error: None,
                delivered: true,
                next_attempt_at: None,
                first_failed_at: None,
            },
        };
        Job::Record(write, oneshot::channel().0)
    }

    /// A drain of attempt records alone takes in what arrives while it waits, up to
    /// `GATHER_RECORDS`; a drain holding any other write does not wait.
    #[test]
    fn only_a_drain_of_records_alone_waits_for_more() {
        let (queue, mut jobs) = mpsc::channel(QUEUE);
        // What arrives while the drain waits: queued before the call, taken after its first look.
        for _ in 0..GATHER_RECORDS + 8 {
            queue.try_send(record()).expect("room");
        }
        let mut drain = vec![record()];
        gather_records(&mut jobs, &mut drain);
        assert_eq!(
            drain.len(),
            1 + GATHER_RECORDS + 8,
            "all that was queued is taken"
        );
        assert!(drain.iter().all(|j| matches!(j, Job::Record(..))));

        for _ in 0..3 {
            queue.try_send(record()).expect("room");
        }
        let mut drain = vec![record(), call(Durability::Committed)];
        gather_records(&mut jobs, &mut drain);
        assert_eq!(drain.len(), 2, "a drain with another write goes as it is");
        let mut drain = vec![call(Durability::Synced)];
        gather_records(&mut jobs, &mut drain);
        assert_eq!(drain.len(), 1);
    }

    /// A database in WAL mode in a new folder (kept as long as the folder is), its
    /// `synchronous` FULL or NORMAL (`now_full`), then `then` run (a `BEGIN`, say); with the
    /// setting of a writer configured to fsync what needs it.
    fn wal_database(now_full: bool, then: &str) -> (tempfile::TempDir, Connection, Sync) {
        let dir = tempfile::tempdir().expect("dir");
        let conn = Connection::open(dir.path().join("t.db")).expect("open");
        let level = if now_full { "FULL" } else { "NORMAL" };
        conn.execute_batch(&format!(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = {level}; {then}"
        ))
        .expect("pragmas");
        let sync = Sync {
            full: true,
            now_full,
        };
        (dir, conn, sync)
    }

    /// A drain whose `synchronous` cannot be set is not applied: its callers get the error and
    /// the setting is left as it was. (SQLite refuses to change it inside a transaction.)
    #[test]
    fn a_drain_that_cannot_be_made_durable_enough_is_refused() {
        let (_dir, conn, mut sync) = wal_database(false, "BEGIN");
        let synced = [call(Durability::Synced)];
        assert!(sync.set(&conn, &synced).is_err());
        assert!(!sync.now_full, "the setting is not taken as changed");
        assert_eq!(synchronous(&conn), 1);

        let (reply, mut answer) = oneshot::channel();
        let (write, _) = match record() {
            Job::Record(write, reply) => (write, reply),
            _ => unreachable!(),
        };
        let jobs = vec![Job::Record(write, reply), call(Durability::Synced)];
        let mut submits = SubmitState::new(
            Arc::new(crate::store::TaskIds::new(&[7; 32])),
            Arc::default(),
            Arc::default(),
        );
        apply(&conn, jobs, &mut submits, &mut sync);
        let answered = answer.try_recv().expect("answered at once");
        let error = answered.expect_err("the record is refused, not written");
        // The setting's own error, not the `BEGIN` that would fail after it in this transaction.
        assert!(
            error
                .to_string()
                .contains("Safety level may not be changed"),
            "{error}"
        );
    }

    /// With `synchronous = full`, a drain is fsynced only when one of its writes needs it; with
    /// `normal`, never. (SQLite: 2 is FULL, 1 is NORMAL.)
    #[test]
    fn a_drain_is_fsynced_only_when_a_write_in_it_needs_it() {
        let (_dir, conn, mut sync) = wal_database(true, "");
        let committed = [call(Durability::Committed), call(Durability::Committed)];
        sync.set(&conn, &committed).expect("set");
        assert_eq!(synchronous(&conn), 1);
        let mixed = [call(Durability::Committed), call(Durability::Synced)];
        sync.set(&conn, &mixed).expect("set");
        assert_eq!(synchronous(&conn), 2);
        sync.set(&conn, &committed).expect("set");
        assert_eq!(synchronous(&conn), 1);

        conn.execute_batch("PRAGMA synchronous = NORMAL")
            .expect("pragma");
        let mut normal = Sync {
            full: false,
            now_full: false,
        };
        normal.set(&conn, &mixed).expect("set");
        assert_eq!(synchronous(&conn), 1);
    }
}
