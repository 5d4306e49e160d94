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

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::blobs::Blobs;
use crate::config::Config;
use base64::Engine;

use crate::domain::operation::ImageInput;
use crate::domain::{prompt_text, AspectRatio, ContentPolicy, Operation, Outcome, Output};
use crate::generate::inputs::{decode, ImageFetcher, InputLimits};
use crate::generate::raster::{decode_png, RgbaImage};
use crate::generate::{Generator, Job, Product, Progress};
use crate::store::{ClaimedTask, Ending, SharedStore, StoreResult};

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
}

/// Callers' input images: the client that fetches them and the limits on each.
#[derive(Clone)]
pub struct Inputs {
    pub fetcher: ImageFetcher,
    pub limits: InputLimits,
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
}

impl WorkerContext {
    fn lease_ms(&self) -> i64 {
        self.config.lease.as_millis() as i64
    }

    /// Claim the next task, if any, and run it to the end. `hard_stop` interrupts a running task
    /// and gives it back to the queue (used when a graceful shutdown runs out of time).
    pub async fn run_one_task(&self, hard_stop: &CancellationToken) -> StoreResult<Ran> {
        let Some(task) = self.store.claim_task(&self.owner, self.lease_ms()).await? else {
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
        if !self
            .store
            .mark_processing(task.seq, task.attempts, self.lease_ms())
            .await?
        {
            tracing::warn!("lease lost before processing started");
            return Ok(Ran::LostLease);
        }

        let progress = Progress::default();
        let lost = CancellationToken::new();
        let heartbeat = tokio::spawn(
            heartbeat(
                self.clone(),
                task.seq,
                task.attempts,
                progress.clone(),
                lost.clone(),
            )
            .in_current_span(),
        );
        let generate = self.produce(&task, &progress);
        let produced = tokio::select! {
            produced = generate => Some(produced),
            _ = lost.cancelled() => None,
            _ = hard_stop.cancelled() => {
                heartbeat.abort();
                self.store.release_task(task.seq, task.attempts).await?;
                tracing::info!("task released for another worker (shutdown)");
                return Ok(Ran::Released);
            }
        };
        heartbeat.abort();
        match produced {
            None => {
                tracing::warn!("lease lost during generation; result discarded");
                Ok(Ran::LostLease)
            }
            Some((outcome, folder)) => self.record(&task, &outcome, folder).await,
        }
    }

    /// Resolve the inputs, generate (holding one of the `workers` permits), then store. Returns
    /// the outcome and the folder it wrote. Input images are fetched before the permit is taken:
    /// a slow caller's server must not hold a generation slot.
    async fn produce(&self, task: &ClaimedTask, progress: &Progress) -> (Outcome, Option<String>) {
        let operation = match &task.operation {
            Ok(op) => op.clone(),
            Err(e) => {
                tracing::error!(error = %e, "unreadable task parameters");
                return (
                    internal_failure("the task's parameters cannot be read"),
                    None,
                );
            }
        };
        let (inputs, mask) = match self.inputs(&operation).await {
            Ok(resolved) => resolved,
            Err(error) => {
                tracing::info!(error, "an input image could not be used");
                return (Outcome::Failed { error }, None);
            }
        };
        progress.report(10);
        let job = Job {
            operation,
            prompt: prompt_text(&task.prompt).to_string(),
            seed: task.seed as u64,
            aspect: task.aspect_ratio.parse().unwrap_or(AspectRatio::SQUARE),
            image_size: self.config.image_size,
            inputs,
            mask,
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
                return (
                    Outcome::Failed {
                        error: e.to_string(),
                    },
                    None,
                );
            }
        };
        drop(job);
        // The rest is storage I/O: let the next task generate meanwhile.
        drop(permit);
        progress.report(90);
        let folder = Blobs::new_folder(&task.id);
        let (files, output) = match product {
            Product::Grid {
                images,
                grid,
                width,
                height,
            } => {
                let image_keys: Vec<String> = (0..images.len())
                    .map(|i| format!("{folder}/{i}.png"))
                    .collect();
                let grid_key = format!("{folder}/grid.png");
                let files: Vec<(String, Vec<u8>)> = image_keys
                    .iter()
                    .cloned()
                    .zip(images)
                    .chain([(grid_key.clone(), grid)])
                    .collect();
                let output = Output::Grid {
                    grid_key,
                    image_keys,
                    width,
                    height,
                };
                (files, output)
            }
            Product::Single { png, width, height } => {
                let image_key = format!("{folder}/0.png");
                let output = Output::Single {
                    image_key: image_key.clone(),
                    width,
                    height,
                };
                (vec![(image_key, png)], output)
            }
            Product::Text(content) => return (Outcome::Finished(Output::Text { content }), None),
            Product::Seed(seed) => return (Outcome::Finished(Output::Seed { seed }), None),
        };
        // Written side by side, so that their fsyncs overlap.
        let writes = files
            .into_iter()
            .map(|(key, bytes)| async move { self.blobs.put(&key, bytes).await });
        // Durable only once their folder is synced too (a file's fsync does not persist its name).
        let stored = async {
            futures::future::try_join_all(writes).await?;
            self.blobs.sync_folder(&folder).await
        };
        if let Err(e) = stored.await {
            tracing::error!(error = %e, "could not store the images");
            self.blobs.remove_folder(&folder).await;
            return (internal_failure("could not store the images"), None);
        }
        (Outcome::Finished(output), Some(folder))
    }

    /// The operation's input images and mask, decoded; or the error that fails the task, naming
    /// the input.
    async fn inputs(
        &self,
        operation: &Operation,
    ) -> Result<(Vec<RgbaImage>, Option<RgbaImage>), String> {
        let limits = self.inputs.limits;
        let reads = operation
            .inputs()
            .into_iter()
            .map(|(name, input)| async move {
                let bytes = match &input {
                    ImageInput::Stored(image) => match self.blobs.get(&image.key).await {
                        Ok(Some(bytes)) => bytes,
                        Ok(None) => return Err(format!("{name}: the image is no longer stored")),
                        Err(e) => {
                            tracing::error!(error = %e, key = image.key, "could not read an input");
                            return Err(format!(
                                "{name}: internal error: could not read the image"
                            ));
                        }
                    },
                    ImageInput::Url { url } => self
                        .inputs
                        .fetcher
                        .fetch(url)
                        .await
                        .map_err(|e| format!("{name}: {e}"))?,
                };
                tokio::task::spawn_blocking(move || decode(&bytes, &limits))
                    .await
                    .map_err(|e| format!("{name}: the decoder crashed: {e}"))?
                    .map_err(|e| format!("{name}: {e}"))
            });
        let images = futures::future::try_join_all(reads).await?;
        let mask = match operation {
            Operation::Inpaint { mask, .. } => {
                let png = base64::engine::general_purpose::STANDARD
                    .decode(mask)
                    .map_err(|e| format!("mask: {e}"))?;
                let mask = tokio::task::spawn_blocking(move || decode_png(&png))
                    .await
                    .map_err(|e| format!("mask: the decoder crashed: {e}"))?
                    .map_err(|e| format!("mask: {e}"))?;
                Some(mask)
            }
            _ => None,
        };
        Ok((images, mask))
    }

    async fn record(
        &self,
        task: &ClaimedTask,
        outcome: &Outcome,
        folder: Option<String>,
    ) -> StoreResult<Ran> {
        let url = |key: &str| self.blobs.url(key);
        let ending = Ending::new(outcome.clone(), &task.payload_head(), &url);
        let written = self
            .store
            .complete_task(task.seq, task.attempts, &ending)
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
                        crate::metrics::task_ended(operation, "finished");
                        tracing::info!("task finished")
                    }
                    Outcome::Failed { error } => {
                        crate::metrics::task_ended(operation, "failed");
                        tracing::info!(error, "task failed")
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

fn internal_failure(what: &str) -> Outcome {
    Outcome::Failed {
        error: format!("internal error: {what}"),
    }
}

/// Renew the lease and record progress every `heartbeat` until aborted; cancel `lost` when the
/// task turns out to belong to someone else.
async fn heartbeat(
    ctx: WorkerContext,
    seq: i64,
    attempt: i64,
    progress: Progress,
    lost: CancellationToken,
) {
    let mut tick = tokio::time::interval(ctx.config.heartbeat);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        match ctx
            .store
            .heartbeat(seq, attempt, progress.get(), ctx.lease_ms())
            .await
        {
            Ok(true) => {}
            Ok(false) => {
                lost.cancel();
                return;
            }
            Err(e) => {
                crate::metrics::store_error("worker", &e);
                tracing::warn!(error = %e, "heartbeat failed; retrying")
            }
        }
    }
}

/// Run `workers` worker loops and the lease reaper until `shutdown`; then let running tasks finish
/// for up to `shutdown_timeout`, after which they are released to the queue.
pub async fn run_pool(ctx: WorkerContext, shutdown: CancellationToken) {
    let hard_stop = CancellationToken::new();
    let mut set = JoinSet::new();
    for i in 0..ctx.config.workers * 2 {
        let ctx = ctx.clone();
        let shutdown = shutdown.clone();
        let hard_stop = hard_stop.clone();
        set.spawn(
            async move { worker_loop(ctx, shutdown, hard_stop).await }
                .instrument(tracing::info_span!("worker", worker = i)),
        );
    }
    set.spawn(reaper_loop(ctx.clone(), shutdown.clone()));

    shutdown.cancelled().await;
    let drained = tokio::time::timeout(ctx.config.shutdown_timeout, async {
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
        let idle = match ctx.run_one_task(&hard_stop).await {
            Ok(Ran::Idle) => true,
            Ok(_) => false,
            Err(e) => {
                crate::metrics::store_error("worker", &e);
                tracing::error!(error = %e, "worker could not reach the store");
                true
            }
        };
        if idle {
            tokio::select! {
                _ = ctx.store.wakeups().queue.notified() => {}
                _ = tokio::time::sleep(ctx.config.poll_interval) => {}
                _ = shutdown.cancelled() => {}
            }
        }
    }
}

async fn reaper_loop(ctx: WorkerContext, shutdown: CancellationToken) {
    let every = ctx
        .config
        .poll_interval
        .min(ctx.config.lease / 2)
        .max(Duration::from_millis(50));
    loop {
        match ctx.store.recover_expired(ctx.config.max_attempts).await {
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
                crate::metrics::store_error("worker", &e);
                tracing::error!(error = %e, "lease reaper could not reach the store")
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = shutdown.cancelled() => return,
        }
    }
}
