//! One claimed task, from `processing` to its recorded end: the content policy, its progress
//! reporter and webhooks, the generation under a permit, storing its images, and recording the
//! outcome fenced by its attempt (then the grid that follows it).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::OwnedMutexGuard;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::inputs::Refused;
use super::room::Seat;
use super::{reporter, Ran, WorkerContext, STOP_GRACE};
use crate::blobs::{BlobError, Blobs};
use crate::domain::actions::Offer;
use crate::domain::operation::FOLLOW_UP_MAX_SIDE;
use crate::domain::webhook_events::{WebhookEvent, WebhookEvents};
use crate::domain::{prompt_text, Outcome, Output, TaskStatus};
use crate::generate::{Job, Product, Progress};
use crate::images::grid;
use crate::images::grid::follow::{self as grids, PendingGrid};
use crate::store::{ClaimedTask, Ending, StoreError, StoreResult, Used};
use crate::webhooks::progress::{ProgressSender, ProgressTarget};

/// What generating and storing a task's images came to.
enum Produced {
    /// The task's outcome, the folder its images were written to, and the grid to make once
    /// the outcome is recorded.
    Done(Outcome, Option<String>, Option<Box<PendingGrid>>),
    /// The image store failed in a way that may pass; nothing written is left.
    StorageUnavailable(BlobError),
}

impl WorkerContext {
    pub(super) async fn run_claimed(
        &self,
        task: ClaimedTask,
        place: Instant,
        (seat, claim_turn): (Option<Seat>, Option<OwnedMutexGuard<()>>),
        hard_stop: &CancellationToken,
    ) -> StoreResult<Ran> {
        tracing::info!("task claimed");
        // Its place in line for a permit and a backend slot: when it was claimed, as claims
        // come in the fair order of turns.
        let progress = Progress::in_line_since(place);
        if let Some(seat) = seat {
            progress.hold_until_started(seat);
        }
        if let Some(turn) = claim_turn {
            progress.hold_until_in_line(turn);
        }
        if let Some(term) = self.policy.violation(&task.prompt) {
            let outcome = Outcome::Failed {
                error: format!(
                    "content policy violation: the prompt contains the blocked term \"{term}\""
                ),
            };
            return self
                .record(&task, &outcome, None, used_by(&task, None))
                .await;
        }
        // The task stays `starting` (waiting, with its place in line) until a backend takes
        // it: the reporter then marks it `processing`.
        let lost = CancellationToken::new();
        let previews = Blobs::new_folder(&task.id);
        let hooks = self.progress_sender(&task).await.map(Arc::new);
        let stop_reporter = CancellationToken::new();
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
                stop: stop_reporter.clone(),
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
                reporter::stop(heartbeat, &stop_reporter).await;
                finish_hooks(hooks).await;
                self.blobs.remove_folder(&previews).await;
                self.store.release_task(task.seq, task.attempts).await?;
                tracing::info!("task released for another worker (shutdown)");
                return Ok(Ran::Released);
            }
        };
        reporter::stop(heartbeat, &stop_reporter).await;
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
                // A failed task keeps no preview, and a caller who reads its end must find none
                // (a flagged image's preview least of all): removed before the end is committed,
                // not after with the attempt's other leftovers.
                if matches!(outcome, Outcome::Failed { .. }) {
                    self.blobs.remove_folder(&previews).await;
                }
                // Held from before the commit, so that a request for the grid that follows it
                // waits for this worker instead of making it too.
                let making = match &grid {
                    Some(grid) => Some(grids::making(&grid.key).await),
                    None => None,
                };
                let ran = self
                    .record(&task, &outcome, folder, used_by(&task, Some(&progress)))
                    .await?;
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
        let (mut inputs, mask, reservation) = match resolved {
            Ok(resolved) => resolved,
            Err(Refused::Task(error)) => {
                tracing::info!(error, "an input image could not be used");
                return Produced::Done(Outcome::Failed { error }, None, None);
            }
            Err(Refused::Storage(e)) => return Produced::StorageUnavailable(e),
        };
        progress.report(10);
        // The reference images come last: they are not the operation's inputs.
        let references =
            inputs.split_off(inputs.len().saturating_sub(task.extras.references.len()));
        let job = Job {
            operation,
            prompt: prompt_text(&task.prompt).to_string(),
            seed: task.seed as u64,
            aspect: task.aspect_ratio,
            image_size: self.config.worker.image_size,
            inputs: inputs.into(),
            mask: mask.map(Arc::new),
            references: references.into(),
            reservation: reservation.map(Arc::new),
            extras: task.extras.clone(),
        };
        let permit = self
            .generating
            .acquire(progress.place(), || progress.entered_line())
            .await;
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
        if let Some(refused) = self.screen(&files).await {
            return Produced::Done(refused, None, None);
        }
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
        used: Used,
    ) -> StoreResult<Ran> {
        let url = |key: &str| self.blobs.url(key);
        let mut head = task.payload_head();
        // As `actions`: cost and usage only for callers who sent `metadata`.
        if task.extras.metadata.is_some() {
            head.usage = used.usage(outcome);
            if let (Outcome::Finished(_), Some(_)) = (outcome, &head.usage) {
                head.cost = Some(self.charged(task).await);
            }
        }
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
        let ending = Ending::new(outcome.clone(), &head, &url).using(used);
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

impl WorkerContext {
    /// The credits `task` was charged at submit (what a finished task costs), for its payload.
    async fn charged(&self, task: &ClaimedTask) -> i64 {
        let Ok(id) = uuid::Uuid::try_parse(&task.id) else {
            return 0;
        };
        match self.store.tasks_by_id(&[id]).await {
            Ok(found) => found.first().map_or(0, |t| t.cost),
            Err(e) => {
                tracing::warn!(error = %e, "could not read the task's cost for its webhook");
                0
            }
        }
    }
}

/// What `task` used of the backends: the backend that took it last and how long it held
/// slots, as its `progress` says (none when it never reached a backend), and its model.
fn used_by(task: &ClaimedTask, progress: Option<&Progress>) -> Used {
    Used {
        backend: progress.and_then(Progress::backend),
        model: task.extras.settings.model.clone(),
        backend_ms: progress.map_or(0, |p| {
            i64::try_from(p.backend_time().as_millis()).unwrap_or(i64::MAX)
        }),
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
