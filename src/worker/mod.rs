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
mod sweep;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::blobs::{BlobError, Blobs};
use crate::config::Config;

use crate::domain::actions::Offer;
use crate::domain::operation::FOLLOW_UP_MAX_SIDE;
use crate::domain::webhook_events::{WebhookEvent, WebhookEvents};
use crate::domain::{prompt_text, ContentPolicy, Outcome, Output, ProcessMode, TaskStatus};
use crate::generate::{Generator, Job, Product, Progress};
use crate::images::grid;
use crate::images::grid::follow::{self as grids, PendingGrid};
use crate::store::{ClaimRules, ClaimedTask, Ending, SharedStore, StoreError, StoreResult};
use crate::webhooks::progress::{ProgressSender, ProgressTarget};
use bytes::Bytes;
pub use inputs::Inputs;
use inputs::Refused;
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
    /// One permit per task that may generate at once (`workers`).
    pub generating: Arc<Semaphore>,
    /// Where callers' input images come from.
    pub inputs: Inputs,
    /// Progress deliveries of the tasks that ask for them (`webhook_events`).
    pub progress_hooks: crate::webhooks::progress::ProgressHooks,
    /// How this node's claims share the queue.
    pub claims: Claims,
}

/// How this node's workers claim: the running limits, and relax first once in `relax_every`
/// claims (counted over the node's workers together).
#[derive(Clone)]
pub struct Claims {
    rules: Arc<ClaimRules>,
    /// The same rules with relax first.
    relax_first: Arc<ClaimRules>,
    relax_every: u64,
    made: Arc<AtomicU64>,
}

impl Claims {
    pub fn new(config: &Config) -> Claims {
        let rules = ClaimRules::of(&config.limits);
        let mut relax_first = rules.clone();
        relax_first.prefer = Some(ProcessMode::Relax);
        Claims {
            rules: Arc::new(rules),
            relax_first: Arc::new(relax_first),
            relax_every: u64::from(config.worker.relax_every),
            made: Arc::default(),
        }
    }

    /// The rules of the next claim.
    fn next(&self) -> &ClaimRules {
        let n = self.made.fetch_add(1, Ordering::Relaxed) + 1;
        if self.relax_every > 0 && n % self.relax_every == 0 {
            &self.relax_first
        } else {
            &self.rules
        }
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

/// What generating and storing a task's images came to.
enum Produced {
    /// The task's outcome, the folder its images were written to, and the grid to make once
    /// the outcome is recorded.
    Done(Outcome, Option<String>, Option<Box<PendingGrid>>),
    /// The image store failed in a way that may pass; nothing written is left.
    StorageUnavailable(BlobError),
}

impl WorkerContext {
    fn lease_ms(&self) -> i64 {
        self.config.worker.lease.as_millis() as i64
    }

    /// Claim the next task, if any, and run it to the end. `hard_stop` interrupts a running task
    /// and gives it back to the queue (used when a graceful shutdown runs out of time).
    pub async fn run_one_task(&self, hard_stop: &CancellationToken) -> StoreResult<Ran> {
        let rules = self.claims.next();
        let Some(task) = self
            .store
            .claim_next(&self.owner, self.lease_ms(), rules)
            .await?
        else {
            return Ok(Ran::Idle);
        };
        let span = tracing::info_span!("task", task_id = %task.id, attempt = task.attempts);
        self.run_claimed(task, hard_stop).instrument(span).await
    }

    async fn run_claimed(
        &self,
        task: ClaimedTask,
        hard_stop: &CancellationToken,
    ) -> StoreResult<Ran> {
        tracing::info!("task claimed");
        if let Some(term) = self.policy.violation(&task.prompt) {
            let outcome = Outcome::Failed {
                error: format!(
                    "content policy violation: the prompt contains the blocked term \"{term}\""
                ),
            };
            return self.record(&task, &outcome, None).await;
        }
        // The task stays `starting` (waiting, with its place in line) until a backend takes
        // it: the reporter then marks it `processing`.
        let progress = Progress::default();
        let lost = CancellationToken::new();
        let previews = Blobs::new_folder(&task.id);
        let hooks = self.progress_sender(&task).await.map(Arc::new);
        let heartbeat = tokio::spawn(
            reporter::Reporter {
                store: self.store.clone(),
                blobs: self.blobs.clone(),
                config: self.config.clone(),
                seq: task.seq,
                attempt: task.attempts,
                account_id: task.account_id.as_str().into(),
                progress: progress.clone(),
                lost: lost.clone(),
                preview_folder: previews.clone(),
                hooks: hooks.clone(),
            }
            .run()
            .in_current_span(),
        );
        let generate = self.produce(&task, &progress);
        tokio::pin!(generate);
        let produced = tokio::select! {
            produced = &mut generate => Some(produced),
            _ = lost.cancelled() => None,
            _ = hard_stop.cancelled() => {
                heartbeat.abort();
                let _ = heartbeat.await;
                finish_hooks(hooks).await;
                self.blobs.remove_folder(&previews).await;
                self.store.release_task(task.seq, task.attempts).await?;
                tracing::info!("task released for another worker (shutdown)");
                return Ok(Ran::Released);
            }
        };
        heartbeat.abort();
        let _ = heartbeat.await;
        // No progress delivery may follow the final one, which the end's commit queues.
        finish_hooks(hooks).await;
        match produced {
            None => {
                self.blobs.remove_folder(&previews).await;
                // Canceled, or another worker holds the task now: stop the job on its backend
                // (which takes it off the server) and drop whatever it still made.
                progress.stop();
                match tokio::time::timeout(STOP_GRACE, generate).await {
                    Ok(Produced::Done(_, Some(folder), _)) => {
                        self.blobs.remove_folder(&folder).await
                    }
                    Ok(_) => {}
                    Err(_) => tracing::warn!("the stopped generation did not end in time"),
                }
                if self.was_canceled(&task).await {
                    tracing::info!("task canceled; its generation was stopped, nothing recorded");
                } else {
                    tracing::warn!(
                        "lease lost during generation; its generation was stopped and the \
                         result discarded"
                    );
                }
                Ok(Ran::LostLease)
            }
            Some(Produced::Done(outcome, folder, grid)) => {
                // Held from before the commit, so that a request for the grid that follows it
                // waits for this worker instead of making it too.
                let making = match &grid {
                    Some(grid) => Some(grids::making(&grid.key).await),
                    None => None,
                };
                let ran = self.record(&task, &outcome, folder).await?;
                if let (Some(grid), Some(making), Ran::Completed) = (grid, making, &ran) {
                    grids::make_after(&self.blobs, *grid, making).await;
                }
                Ok(ran)
            }
            Some(Produced::StorageUnavailable(e)) => {
                self.blobs.health().failing(&e);
                self.blobs.remove_folder(&previews).await;
                let released = self
                    .persist(|| self.store.release_task(task.seq, task.attempts))
                    .await?;
                if released {
                    tracing::info!(error = %e, "image store unavailable; task back in the queue");
                    Ok(Ran::Requeued)
                } else {
                    Ok(Ran::LostLease)
                }
            }
        }
    }

    /// The progress deliveries of `task`, when it asks for them and has a webhook.
    async fn progress_sender(&self, task: &ClaimedTask) -> Option<ProgressSender> {
        if !WebhookEvents::wants(task.extras.webhook_events, WebhookEvent::Progress) {
            return None;
        }
        let target = match self.store.webhook_target(task.seq).await {
            Ok(target) => target?,
            Err(e) => {
                tracing::warn!(error = %e, "could not read the task's webhook; no progress deliveries");
                return None;
            }
        };
        Some(self.progress_hooks.task(ProgressTarget {
            task_id: task.id.clone(),
            task_type: task.task_type.as_str().to_string(),
            url: target.url,
            webhook_secret: target.webhook_secret,
            signing_secret: target.signing_secret,
            metadata: task.extras.metadata.clone(),
        }))
    }

    /// Whether the claim on `task` ended because the task was canceled (rather than because its
    /// lease passed to another worker), for the log line that says which.
    async fn was_canceled(&self, task: &ClaimedTask) -> bool {
        let Ok(id) = uuid::Uuid::try_parse(&task.id) else {
            return false;
        };
        match self.store.tasks_by_id(&[id]).await {
            Ok(found) => found
                .iter()
                .any(|t| t.status == crate::domain::TaskStatus::Canceled),
            Err(_) => false,
        }
    }

    /// Run a store write again while the store is unavailable (a database restarting, or out of
    /// space), for up to `lease`: a worker that gave up at once would leave its task to the
    /// reaper, and the task would lose an attempt to the store's trouble.
    async fn persist<T, F, Fut>(&self, write: F) -> StoreResult<T>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = StoreResult<T>>,
    {
        let deadline = tokio::time::Instant::now() + self.config.worker.lease;
        let mut wait = Duration::from_millis(50);
        let mut logged = false;
        loop {
            match write().await {
                Err(StoreError::Unavailable(e))
                    if tokio::time::Instant::now() + wait < deadline =>
                {
                    if !logged {
                        tracing::warn!(error = %e, "store unavailable; writing again shortly");
                        logged = true;
                    }
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_secs(2));
                }
                written => return written,
            }
        }
    }

    /// Resolve the inputs, generate (holding one of the `workers` permits), then store. Returns
    /// the outcome and the folder it wrote, or the storage failure that sends the task back to
    /// the queue. Input images are fetched before the permit is taken: a slow caller's server
    /// must not hold a generation slot.
    async fn produce(&self, task: &ClaimedTask, progress: &Progress) -> Produced {
        let operation = match &task.operation {
            Ok(op) => op.clone(),
            Err(e) => {
                tracing::error!(error = %e, "unreadable task parameters");
                return Produced::Done(
                    internal_failure("the task's parameters cannot be read"),
                    None,
                    None,
                );
            }
        };
        let resolved = self
            .inputs
            .resolve(&self.blobs, &operation, &task.extras)
            .await;
        let (inputs, mask, reservation) = match resolved {
            Ok(resolved) => resolved,
            Err(Refused::Task(error)) => {
                tracing::info!(error, "an input image could not be used");
                return Produced::Done(Outcome::Failed { error }, None, None);
            }
            Err(Refused::Storage(e)) => return Produced::StorageUnavailable(e),
        };
        progress.report(10);
        let job = Job {
            operation,
            prompt: prompt_text(&task.prompt).to_string(),
            seed: task.seed as u64,
            aspect: task.aspect_ratio,
            image_size: self.config.worker.image_size,
            inputs: inputs.into(),
            mask: mask.map(Arc::new),
            reservation: reservation.map(Arc::new),
            extras: task.extras.clone(),
        };
        let permit = self
            .generating
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        let product = match self.generator.run(&job, progress).await {
            Ok(product) => product,
            Err(e) => {
                tracing::info!(error = %e, "generation failed");
                return Produced::Done(
                    Outcome::Failed {
                        error: e.to_string(),
                    },
                    None,
                    None,
                );
            }
        };
        // The decoded inputs go with the job, and their share of the decode budget with them.
        drop(job);
        // The rest is storage I/O: let the next task generate meanwhile.
        drop(permit);
        progress.report(90);
        let folder = Blobs::new_folder(&task.id);
        let mut pending = None;
        let (files, output) = match product {
            Product::Grid {
                images,
                grid,
                width,
                height,
            } => {
                // Named by format: a backend's JPEG is stored as it came (`0.jpg`).
                let image_keys: Vec<String> = images
                    .iter()
                    .enumerate()
                    .map(|(i, image)| format!("{folder}/{i}.{}", image.format.extension()))
                    .collect();
                let format = match &grid {
                    Some(grid) => grid.format,
                    None => grid::format_for(images.iter().map(|i| i.format)),
                };
                let grid_key = format!("{folder}/grid.{}", format.extension());
                let images: [Bytes; 4] = images.map(|image| Bytes::from(image.bytes));
                let grid = match grid {
                    Some(grid) => Some(Bytes::from(grid.bytes)),
                    // easel answers a request for it until it is there: the task need not
                    // wait for it.
                    None if self.blobs.urls_are_easels() => {
                        pending = Some(Box::new(PendingGrid {
                            key: grid_key.clone(),
                            files: images.clone(),
                            format,
                        }));
                        None
                    }
                    None => match grids::compose(images.clone(), format).await {
                        Ok(grid) => {
                            crate::metrics::grid_made("before_task");
                            Some(Bytes::from(grid.bytes))
                        }
                        Err(error) => {
                            crate::metrics::grid_made("failed");
                            tracing::info!(error, "the backend's images do not decode");
                            let error = format!("generation failed: the backend's {error}");
                            return Produced::Done(Outcome::Failed { error }, None, None);
                        }
                    },
                };
                let files: Vec<(String, Bytes)> = image_keys
                    .iter()
                    .cloned()
                    .zip(images)
                    .chain(grid.map(|grid| (grid_key.clone(), grid)))
                    .collect();
                let output = Output::Grid {
                    grid_key,
                    image_keys,
                    width,
                    height,
                };
                (files, output)
            }
            Product::Single {
                image,
                width,
                height,
            } => {
                let image_key = format!("{folder}/0.{}", image.format.extension());
                let output = Output::Single {
                    image_key: image_key.clone(),
                    width,
                    height,
                };
                (vec![(image_key, Bytes::from(image.bytes))], output)
            }
            Product::Text(content) => {
                return Produced::Done(Outcome::Finished(Output::Text { content }), None, None)
            }
            Product::Seed(seed) => {
                return Produced::Done(Outcome::Finished(Output::Seed { seed }), None, None)
            }
        };
        let bytes: u64 = files.iter().map(|(_, png)| png.len() as u64).sum();
        // Every write ends before the outcome is judged, so that a failure's clean-up finds all
        // that was written.
        if let Err(e) = self.blobs.put_new_folder(&folder, files).await {
            self.blobs.remove_folder(&folder).await;
            if e.is_transient() {
                return Produced::StorageUnavailable(e);
            }
            tracing::error!(error = %e, "could not store the images");
            return Produced::Done(internal_failure("could not store the images"), None, None);
        }
        self.blobs.health().wrote(bytes);
        Produced::Done(Outcome::Finished(output), Some(folder), pending)
    }

    async fn record(
        &self,
        task: &ClaimedTask,
        outcome: &Outcome,
        folder: Option<String>,
    ) -> StoreResult<Ran> {
        let url = |key: &str| self.blobs.url(key);
        let mut head = task.payload_head();
        // The seed's payloads stay as they were for callers who asked for nothing new.
        if let (Outcome::Finished(output), Some(_)) = (outcome, &task.extras.metadata) {
            head.actions = Offer {
                task_id: &task.id,
                kind: task.task_type,
                output,
                can_run: &|kind| self.generator.supports(kind),
                max_side: FOLLOW_UP_MAX_SIDE,
            }
            .actions();
        }
        let ending = Ending::new(outcome.clone(), &head, &url);
        let written = self
            .persist(|| self.store.complete_task(task.seq, task.attempts, &ending))
            .await;
        match written {
            Ok(true) => {
                self.blobs
                    .remove_stale_attempts(&task.id, folder.as_deref())
                    .await;
                let operation = task
                    .operation
                    .as_ref()
                    .map_or("unknown", |op| op.kind().as_str());
                match outcome {
                    Outcome::Finished(_) => {
                        crate::metrics::task_ended(operation, TaskStatus::Finished.as_str());
                        tracing::info!("task finished")
                    }
                    Outcome::Failed { error } => {
                        crate::metrics::task_ended(operation, TaskStatus::Failed.as_str());
                        tracing::info!(error, "task failed")
                    }
                    Outcome::Canceled => {
                        crate::metrics::task_ended(operation, TaskStatus::Canceled.as_str());
                        tracing::info!("task canceled")
                    }
                }
                Ok(Ran::Completed)
            }
            Ok(false) => {
                tracing::warn!("lease lost before the result was recorded; result discarded");
                if let Some(folder) = folder {
                    self.blobs.remove_folder(&folder).await;
                }
                Ok(Ran::LostLease)
            }
            // Counted by the worker loop, which sees every store error of a task's run.
            Err(e) => Err(e),
        }
    }
}

/// Stop a task's progress deliveries, once its reporter (the other holder) has stopped.
async fn finish_hooks(hooks: Option<Arc<ProgressSender>>) {
    if let Some(sender) = hooks.and_then(Arc::into_inner) {
        sender.finish().await;
    }
}

fn internal_failure(what: &str) -> Outcome {
    Outcome::Failed {
        error: format!("internal error: {what}"),
    }
}

/// How long a stopped generation may take to take its job off the backend and end.
const STOP_GRACE: Duration = Duration::from_secs(15);

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
        let idle = match ctx.run_one_task(&hard_stop).await {
            Ok(Ran::Idle) => true,
            Ok(_) => false,
            Err(e) => {
                crate::metrics::store_error("worker", e.kind());
                tracing::error!(error = %e, "worker could not reach the store");
                true
            }
        };
        if idle {
            tokio::select! {
                _ = ctx.store.wakeups().queue.notified() => {}
                _ = tokio::time::sleep(ctx.config.worker.poll_interval) => {}
                _ = shutdown.cancelled() => {}
            }
        }
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
