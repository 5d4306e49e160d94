//! Workers: claim a task with a lease, keep the lease alive while generating, store the images,
//! and record the result (with its webhook) fenced by the attempt number. A reaper returns tasks
//! whose worker vanished to the queue, or fails them once they have used every attempt.
//!
//! `workers` tasks generate at once: a worker holds one of `workers` permits while it generates
//! and encodes, and gives it up before storing the files and recording the result, so that the
//! next task's generation overlaps this one's disk writes and fsyncs. It takes the permit only
//! once its task is claimed and `processing` (two commits) and its input images are read, so
//! that no permit waits for the store or a caller's server. Twice as many worker loops as
//! permits run, so every permit can be busy while results are being stored and the next tasks
//! claimed.
//!
//! Storage that fails in a way that may pass (a full disk, an object store that does not
//! answer) is not the task's failure: the task goes back to the queue uncounted, what it wrote
//! is removed, and every worker loop waits on the shared `blobs::StorageHealth` before its next
//! claim, so the queue waits instead of draining into failures.

mod inputs;
mod reporter;
pub mod retention;
pub mod room;
mod run;
mod screen;
mod sweep;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::blobs::Blobs;
use crate::config::{Config, Live, Plans};
use crate::domain::{ContentPolicy, ProcessMode};
use crate::generate::{Generator, Openings};
use crate::store::{ClaimRules, SharedStore, StoreResult};
pub use inputs::Inputs;
use room::Seat;
pub use room::{Permits, Room, Turns};
pub use sweep::{sweep_orphans, SWEEP_LIMIT, SWEEP_MIN_AGE};

/// Everything a worker needs. Cheap to clone.
#[derive(Clone)]
pub struct WorkerContext {
    pub store: SharedStore,
    pub blobs: Blobs,
    pub generator: Arc<dyn Generator>,
    pub policy: ContentPolicy,
    pub config: Arc<Config>,
    /// Identifies this process in leases (diagnostics only).
    pub owner: String,
    /// One permit per task that may generate at once (`workers`), handed out in line.
    pub generating: Arc<Permits>,
    /// This node's claimed tasks that no backend has taken yet: how far ahead it claims.
    pub room: Arc<Room>,
    /// Whose turn it is to ask the store for work while the node's last claim found none.
    pub turns: Arc<Turns>,
    /// Held while a claim is made and until its job stands in the backends' line: this node's
    /// claims one at a time, so that the jobs meet the line in the order the store gave their
    /// tasks out.
    pub claiming: Arc<tokio::sync::Mutex<()>>,
    /// Where callers' input images come from.
    pub inputs: Inputs,
    /// Progress deliveries of the tasks that ask for them (`webhook_events`).
    pub progress_hooks: crate::webhooks::progress::ProgressHooks,
    /// How this node's claims share the queue.
    pub claims: Claims,
    /// The operator's checkers: result images go to its image checker before they are kept.
    pub moderation: Arc<Live<Option<crate::net::moderation::ModerationServices>>>,
}

/// How this node's workers claim: the running limits, and relax first once in `relax_every`
/// claims (counted over the node's workers together).
#[derive(Clone)]
pub struct Claims {
    /// The plans' rules, and the same with relax first; a reload replaces both.
    rules: Arc<Live<(ClaimRules, ClaimRules)>>,
    relax_every: u64,
    made: Arc<AtomicU64>,
}

impl Claims {
    pub fn new(config: &Config) -> Claims {
        Claims {
            rules: Arc::new(Live::new(Claims::rules_of(&config.plans))),
            relax_every: u64::from(config.worker.relax_every),
            made: Arc::default(),
        }
    }

    fn rules_of(plans: &Plans) -> (ClaimRules, ClaimRules) {
        let rules = ClaimRules::of(plans);
        let mut relax_first = rules.clone();
        relax_first.prefer = Some(ProcessMode::Relax);
        (rules, relax_first)
    }

    /// Take the running limits of reloaded plans (for the claims after this one).
    pub fn reload(&self, plans: &Plans) {
        self.rules.set(Claims::rules_of(plans));
    }

    /// The rules now, and whether the next claim takes relax first (the second of them).
    fn next(&self) -> (Arc<(ClaimRules, ClaimRules)>, bool) {
        let n = self.made.fetch_add(1, Ordering::Relaxed) + 1;
        (
            self.rules.get(),
            self.relax_every > 0 && n % self.relax_every == 0,
        )
    }
}

/// How one claimed task ended for this worker.
#[derive(Debug, PartialEq, Eq)]
pub enum Ran {
    /// The queue was empty.
    Idle,
    /// The result was recorded.
    Completed,
    /// Another worker holds the task now; our result was discarded.
    LostLease,
    /// Shutdown came first; the task went back to the queue.
    Released,
    /// The image store failed in a way that may pass: the task went back to the queue, the
    /// attempt not counted, and the workers pause until storage works again.
    Requeued,
}

impl WorkerContext {
    fn lease_ms(&self) -> i64 {
        self.config.worker.lease.as_millis() as i64
    }

    /// Claim the next task, if any, and run it to the end. `hard_stop` interrupts a running task
    /// and gives it back to the queue (used when a graceful shutdown runs out of time).
    pub async fn run_one_task(&self, hard_stop: &CancellationToken) -> StoreResult<Ran> {
        self.run_seated(None, hard_stop).await
    }

    /// How many more tasks could start generating now or within [`room::SOON`]: backend slots
    /// free or about to free, within the free permits (a job about to give its slot back gives
    /// its permit back about then too).
    fn openings(&self) -> Openings {
        let permits = self.generating.free();
        match self.generator.openings(room::SOON) {
            Some(slots) => Openings {
                now: slots.now.min(permits),
                ..slots
            },
            None => Openings {
                now: permits,
                soon: room::CLAIMED_AHEAD,
                next: None,
            },
        }
    }

    /// [`WorkerContext::run_one_task`] holding `seat` (the claim's room) until a backend takes
    /// the task or it ends.
    async fn run_seated(
        &self,
        seat: Option<Seat>,
        hard_stop: &CancellationToken,
    ) -> StoreResult<Ran> {
        // One claim at a time on this node, each waiting (a moment: at most `CLAIM_TURN`) for
        // the last claimed job to stand in the backends' line, so that the jobs meet the line in
        // the order the store gave their tasks out.
        let turn = tokio::time::timeout(CLAIM_TURN, self.claiming.clone().lock_owned())
            .await
            .ok();
        let (rules, relax_first) = self.claims.next();
        let rules = if relax_first { &rules.1 } else { &rules.0 };
        let claimed = self
            .store
            .claim_next(&self.owner, self.lease_ms(), rules)
            .await;
        self.turns.found(matches!(claimed, Ok(Some(_))));
        let Some(task) = claimed? else {
            return Ok(Ran::Idle);
        };
        let place = Instant::now();
        let span = tracing::info_span!("task", task_id = %task.id, attempt = task.attempts);
        self.run_claimed(task, place, (seat, turn), hard_stop)
            .instrument(span)
            .await
    }
}

/// The longest a claim waits for the last claimed job to stand in the backends' line (one whose
/// input images take long to fetch does not hold the node's claims back for longer).
const CLAIM_TURN: Duration = Duration::from_secs(1);

/// How long a stopped generation may take to take its job off the backend and end.
pub(super) const STOP_GRACE: Duration = Duration::from_secs(15);

/// Run `workers` worker loops and the lease reaper until `shutdown`; then let running tasks finish
/// for up to `shutdown_timeout`, after which they are released to the queue.
pub async fn run_pool(ctx: WorkerContext, shutdown: CancellationToken) {
    let hard_stop = CancellationToken::new();
    let mut set = JoinSet::new();
    for i in 0..ctx.config.worker.workers * 2 {
        let ctx = ctx.clone();
        let shutdown = shutdown.clone();
        let hard_stop = hard_stop.clone();
        set.spawn(
            async move { worker_loop(ctx, shutdown, hard_stop).await }
                .instrument(tracing::info_span!("worker", worker = i)),
        );
    }
    set.spawn(news_loop(ctx.clone(), shutdown.clone()));
    set.spawn(reaper_loop(ctx.clone(), shutdown.clone()));
    set.spawn(sweep_at_start(ctx.clone(), shutdown.clone()));
    set.spawn(retention::run(
        ctx.store.clone(),
        ctx.blobs.clone(),
        ctx.config.retention.keep,
        ctx.config.retention.sweep_interval,
        shutdown.clone(),
    ));

    shutdown.cancelled().await;
    let drained = tokio::time::timeout(ctx.config.server.shutdown_timeout, async {
        while set.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!("shutdown timeout reached; releasing running tasks");
        hard_stop.cancel();
        while set.join_next().await.is_some() {}
    }
}

async fn worker_loop(
    ctx: WorkerContext,
    shutdown: CancellationToken,
    hard_stop: CancellationToken,
) {
    while !shutdown.is_cancelled() {
        // No claim while images cannot be written: the task would only fail or come back.
        if !ctx
            .blobs
            .health()
            .wait_writable(&ctx.blobs, &shutdown)
            .await
        {
            break;
        }
        // While the last claim found nothing, one loop at a time asks again (see `Turns`).
        if !ctx.turns.wait(&shutdown).await {
            break;
        }
        // No claim until it could start soon (see `room`): the queue keeps the rest in order.
        let Some(seat) = ctx.room.seat(|| ctx.openings(), &shutdown).await else {
            break;
        };
        match ctx.run_seated(Some(seat), &hard_stop).await {
            Ok(Ran::Idle) => {}
            // A task's end may let a task held back by its account's running limit go: a turn
            // to look (the store wakes no one for an end).
            Ok(_) => ctx.turns.news(),
            Err(e) => {
                crate::metrics::store_error("worker", e.kind());
                tracing::error!(error = %e, "worker could not reach the store");
            }
        }
    }
}

/// Gives the node's idle loops a turn to ask the store for work at each wake-up of the queue
/// (a task queued or requeued, here or on another node) and once every poll interval.
async fn news_loop(ctx: WorkerContext, shutdown: CancellationToken) {
    loop {
        tokio::select! {
            _ = ctx.store.wakeups().queue.notified() => {}
            _ = tokio::time::sleep(ctx.config.worker.poll_interval) => {}
            _ = shutdown.cancelled() => return,
        }
        ctx.turns.news();
    }
}

/// One sweep of images no task refers to, in the background of a worker node's start.
async fn sweep_at_start(ctx: WorkerContext, shutdown: CancellationToken) {
    let min_age = SWEEP_MIN_AGE.max(ctx.config.worker.lease * 4);
    tokio::select! {
        swept = sweep_orphans(&ctx.store, &ctx.blobs, min_age, SWEEP_LIMIT) => match swept {
            Ok(0) => {}
            Ok(removed) => tracing::info!(removed, "removed images that no task refers to"),
            Err(e) => tracing::warn!(error = %e, "the sweep of unreferenced images stopped"),
        },
        _ = shutdown.cancelled() => {}
    }
}

async fn reaper_loop(ctx: WorkerContext, shutdown: CancellationToken) {
    let every = ctx
        .config
        .worker
        .poll_interval
        .min(ctx.config.worker.lease / 2)
        .max(Duration::from_millis(50));
    loop {
        match ctx
            .store
            .recover_expired(ctx.config.worker.max_attempts)
            .await
        {
            Ok((requeued, failed)) => {
                for id in &failed {
                    ctx.blobs.remove_stale_attempts(id, None).await;
                }
                let failed = failed.len();
                // The store wakes idle workers and the dispatcher itself.
                if requeued > 0 || failed > 0 {
                    tracing::warn!(requeued, failed, "recovered tasks whose worker was lost");
                }
            }
            Err(e) => {
                crate::metrics::store_error("worker", e.kind());
                tracing::error!(error = %e, "lease reaper could not reach the store")
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = shutdown.cancelled() => return,
        }
    }
}
