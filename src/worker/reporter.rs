//! The reporter: one per running task, beside its generation. It renews the task's lease, moves
//! it to `processing` when a backend takes it, passes the generator's progress on to the task's
//! listeners at once (every node's, through the store), stores the progress at most once a
//! second and the latest preview as a small JPEG at most once a second, and notices at once
//! when the task is canceled or no longer this worker's.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::blobs::Blobs;
use crate::config::Config;
use crate::domain::Retrying;
use crate::generate::Progress;
use crate::images::preview;
use crate::store::SharedStore;
use crate::store::{Happened, Heard, Listener, StoredProgress, TaskEvent};
use crate::webhooks::progress::ProgressSender;

/// The most often a task's progress is stored, and its preview written.
const STORE_EVERY: Duration = Duration::from_secs(1);
/// The longest a preview's write may take before it is given up (the next one may do better).
const PREVIEW_WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Stop the reporter running as `task`: at its next wait, so that a preview being written is
/// written (or given up) before the attempt's leftovers are removed; aborted should that take
/// longer than a preview's write may.
pub(super) async fn stop(mut task: tokio::task::JoinHandle<()>, token: &CancellationToken) {
    token.cancel();
    let limit = PREVIEW_WRITE_TIMEOUT + Duration::from_secs(5);
    if tokio::time::timeout(limit, &mut task).await.is_err() {
        task.abort();
        let _ = task.await;
    }
}

/// What the reporter of one task works with.
pub(super) struct Reporter {
    pub store: SharedStore,
    pub blobs: Blobs,
    pub config: std::sync::Arc<Config>,
    pub seq: i64,
    pub attempt: i64,
    pub account_id: std::sync::Arc<str>,
    pub progress: Progress,
    /// Cancelled when the task turns out to be canceled or someone else's.
    pub lost: CancellationToken,
    /// Where this attempt's previews go (removed with the attempt's other leftovers).
    pub preview_folder: String,
    /// The task's progress deliveries, when it asks for them.
    pub hooks: Option<std::sync::Arc<ProgressSender>>,
    /// Cancelled when the generation is over: the reporter returns at its next wait, never in
    /// the middle of a preview's write (a write cut off by an abort could land after the
    /// attempt's leftovers were removed, and stay).
    pub stop: CancellationToken,
}

/// What storing the progress came to.
enum Stored {
    /// Stored, and the lease renewed with it.
    Now,
    /// Changed, but stored less than [`STORE_EVERY`] ago: due then.
    Later(Instant),
    Unchanged,
    /// The claim is no longer ours.
    Lost,
}

/// What the keeper and the teller of one task share.
struct Shared {
    /// The task's stored version, as last heard.
    version: AtomicI64,
    /// The preview written last, told with live progress.
    preview_key: Mutex<Option<String>>,
    /// Cancelled once the task is marked processing: live progress is told from then on.
    processing: CancellationToken,
    /// Held while progress is told, and while it is read and stored: what is stored is never
    /// behind what was told before it, and is told before what comes after.
    telling: tokio::sync::Mutex<()>,
    /// Woken when the progress may have changed: the keeper stores it when it is due.
    to_store: Notify,
    /// Cancelled when the keeper has returned: the teller returns at its next wait.
    over: CancellationToken,
}

impl Shared {
    fn preview_key(&self) -> Option<String> {
        self.preview_key
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Put `key` as the preview to tell, giving back the one before.
    fn replace_preview_key(&self, key: String) -> Option<String> {
        self.preview_key
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(key)
    }
}

/// What the keeper last stored.
#[derive(Default)]
struct Kept {
    processing: bool,
    stored: Option<StoredProgress>,
    stored_at: Option<Instant>,
    previews: u32,
}

/// What the teller last told.
#[derive(Default)]
struct Told {
    percentage: i64,
    /// The failed backend attempt last told (None: none, or it was taken again).
    retrying: Option<Retrying>,
}

impl Reporter {
    /// Two halves, in this one task: the keeper renews the lease, marks the task processing and
    /// stores its progress and previews; the teller tells the progress the moment the generator
    /// reports it. Apart, so that a preview being shrunk and written, or a slow store, does not
    /// hold up the progress every subscriber waits for.
    pub(super) async fn run(self) {
        // Listening before the first heartbeat: a cancel from then on is heard at once.
        let listener = self
            .store
            .wakeups()
            .events
            .listen_task(self.seq, Some(&self.account_id));
        let shared = Shared {
            version: AtomicI64::new(self.seq),
            preview_key: Mutex::new(None),
            processing: CancellationToken::new(),
            telling: tokio::sync::Mutex::new(()),
            to_store: Notify::new(),
            over: CancellationToken::new(),
        };
        let keep = async {
            self.keep(listener, &shared).await;
            shared.over.cancel();
        };
        tokio::join!(keep, self.tell(&shared));
    }

    async fn keep(&self, mut listener: Listener, shared: &Shared) {
        let mut tick = tokio::time::interval(self.config.worker.heartbeat);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        let mut kept = Kept::default();
        // When stored progress or a preview is due next (None: nothing waits).
        let mut due: Option<Instant> = None;
        loop {
            let wait_due = async {
                match due {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            let beat = tokio::select! {
                _ = self.stop.cancelled() => return,
                _ = tick.tick() => true,
                heard = listener.next() => match heard {
                    Heard::Event(event) => {
                        shared.version.fetch_max(event.version, Ordering::Relaxed);
                        // Its end (a cancel, on any node): the heartbeat finds the claim gone.
                        event.ended()
                    }
                    Heard::Resync => true,
                    Heard::NewTasks { .. } => false,
                },
                _ = self.progress.started(), if !kept.processing => {
                    kept.processing = true;
                    let lease_ms = self.config.worker.lease.as_millis() as i64;
                    // What the job reached while it found a backend (its inputs read) goes in
                    // the same write as the state: no second write of it right after.
                    let percentage = self.percentage();
                    let marked = self
                        .store
                        .mark_processing(self.seq, self.attempt, lease_ms, percentage)
                        .await;
                    match marked {
                        // Known before any progress is told: a preview whose write hangs keeps
                        // this loop from hearing the change, and progress told under an older
                        // version is dropped by every stream that has said this one.
                        Ok(Some(version)) => {
                            shared.version.fetch_max(version, Ordering::Relaxed);
                            // The claim cleared the preview and any failed attempt. A store,
                            // so the next is a second away, as any store's next is; a preview
                            // already drawn goes out at once, as the first store took it.
                            kept.stored = Some(StoredProgress {
                                percentage,
                                preview_key: None,
                                retrying: None,
                            });
                            kept.stored_at =
                                (!self.progress.has_preview()).then(Instant::now);
                        }
                        Ok(None) => {
                            tracing::warn!("claim gone before processing started (canceled, or lease lost)");
                            self.lost.cancel();
                            return;
                        }
                        Err(e) => {
                            crate::metrics::store_error("worker", e.kind());
                            tracing::warn!(error = %e, "could not mark the task processing");
                        }
                    }
                    // Progress reported while a backend was being found goes out now.
                    shared.processing.cancel();
                    false
                }
                _ = shared.to_store.notified() => false,
                _ = wait_due => false,
            };
            // Store what changed (at most once a second), with a new preview when one is due.
            due = None;
            let mut renewed = false;
            if kept.processing {
                match self.store_progress(&mut kept, shared).await {
                    Stored::Now => renewed = true,
                    Stored::Later(at) => due = Some(at),
                    Stored::Unchanged => {}
                    Stored::Lost => return,
                }
            }
            if beat && !renewed && !self.heartbeat(shared, None).await {
                return;
            }
        }
    }

    /// Once the task is processing: tell its listeners of the progress as it moves, and the
    /// keeper that there may be progress to store.
    async fn tell(&self, shared: &Shared) {
        tokio::select! {
            _ = shared.over.cancelled() => return,
            _ = shared.processing.cancelled() => {}
        }
        let mut told = Told::default();
        loop {
            {
                let _telling = shared.telling.lock().await;
                self.tell_live(shared, &mut told).await;
            }
            shared.to_store.notify_one();
            tokio::select! {
                _ = shared.over.cancelled() => return,
                _ = self.progress.changed() => {}
            }
        }
    }

    /// The generator's percentage as a running task reports it: 100 is for its end alone.
    fn percentage(&self) -> i64 {
        self.progress.get().min(99)
    }

    /// Tell the task's listeners of the generator's percentage, if it moved, and of a backend
    /// attempt that failed (or of the job taken again after one).
    async fn tell_live(&self, shared: &Shared, told: &mut Told) {
        let percentage = self.percentage();
        let retrying = self.progress.retry_state();
        let moved = percentage > told.percentage;
        if !moved && retrying == told.retrying {
            return;
        }
        told.percentage = told.percentage.max(percentage);
        told.retrying = retrying.clone();
        let preview_key = shared.preview_key();
        let event = TaskEvent {
            seq: self.seq,
            account_id: self.account_id.clone(),
            version: shared.version.load(Ordering::Relaxed),
            what: Happened::Progress {
                percentage: told.percentage,
                preview_key: preview_key.clone(),
                retrying,
                live: true,
            },
        };
        // Progress deliveries say the percentage only (their payload is fixed by the contract).
        if moved {
            self.offer(percentage, preview_key.as_deref());
        }
        if let Err(e) = self.store.publish_progress(event).await {
            tracing::debug!(error = %e, "could not tell the task's listeners of its progress");
        }
    }

    /// Store the progress and a new preview if they changed and the last store was at least
    /// [`STORE_EVERY`] ago.
    async fn store_progress(&self, kept: &mut Kept, shared: &Shared) -> Stored {
        let now = Instant::now();
        let changed = self.progress.has_preview()
            || kept.stored.as_ref().map(|s| (s.percentage, &s.retrying))
                != Some((self.percentage(), &self.progress.retry_state()));
        if !changed {
            return Stored::Unchanged;
        }
        if let Some(next) = kept.stored_at.map(|at| at + STORE_EVERY) {
            if next > now {
                return Stored::Later(next);
            }
        }
        let preview_key = match self.progress.take_preview() {
            Some(image) => self.write_preview(image, &mut kept.previews, shared).await,
            None => shared.preview_key(),
        };
        // Read under the teller's lock, and stored before it tells again.
        let _telling = shared.telling.lock().await;
        let percentage = self.percentage();
        let retrying = self.progress.retry_state();
        let progress = StoredProgress {
            percentage,
            preview_key,
            retrying,
        };
        if kept.stored.as_ref() == Some(&progress) {
            return Stored::Unchanged;
        }
        if !self.heartbeat(shared, Some(&progress)).await {
            return Stored::Lost;
        }
        if progress.preview_key != kept.stored.as_ref().and_then(|s| s.preview_key.clone()) {
            self.offer(percentage, progress.preview_key.as_deref());
        }
        kept.stored = Some(progress);
        kept.stored_at = Some(now);
        Stored::Now
    }

    /// Shrink `image` and write it beside the previous preview, which is removed once the new
    /// one is stored; the key of the preview to show.
    async fn write_preview(
        &self,
        image: crate::images::PreviewImage,
        previews: &mut u32,
        shared: &Shared,
    ) -> Option<String> {
        // Never larger than the task's images: a backend may draw its previews at its own
        // size (ComfyUI's at 512 px) when the image it makes is smaller.
        let max_px = self
            .config
            .worker
            .preview_max_px
            .min(self.config.worker.image_size);
        if max_px == 0 {
            return None;
        }
        let shrunk = tokio::task::spawn_blocking(move || preview::shrink(image, max_px)).await;
        let jpeg = match shrunk {
            Ok(Ok(jpeg)) => jpeg,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "a preview could not be read; skipped");
                return shared.preview_key();
            }
            Err(_) => return shared.preview_key(),
        };
        *previews += 1;
        let key = format!("{}/preview-{}.jpg", self.preview_folder, previews);
        let written = tokio::time::timeout(PREVIEW_WRITE_TIMEOUT, self.blobs.put(&key, jpeg)).await;
        match written {
            Ok(Ok(())) => {
                crate::metrics::preview_written();
                if let Some(old) = shared.replace_preview_key(key.clone()) {
                    let blobs = self.blobs.clone();
                    tokio::spawn(async move { blobs.delete_keys(vec![old]).await });
                }
                Some(key)
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "a preview could not be written; skipped");
                shared.preview_key()
            }
            Err(_) => {
                tracing::debug!("a preview's write timed out; skipped");
                shared.preview_key()
            }
        }
    }

    /// Hand the state to the task's progress deliveries, if it has them.
    fn offer(&self, percentage: i64, preview_key: Option<&str>) {
        if let Some(hooks) = &self.hooks {
            hooks.offer(percentage, preview_key.map(|k| self.blobs.url(k)));
        }
    }

    /// Renew the lease (storing `progress` with it); false, with `lost` cancelled, when the claim
    /// is no longer ours.
    async fn heartbeat(&self, shared: &Shared, progress: Option<&StoredProgress>) -> bool {
        match self
            .store
            .heartbeat(
                self.seq,
                self.attempt,
                self.config.worker.lease.as_millis() as i64,
                progress,
            )
            .await
        {
            Ok(Some(version)) => {
                shared.version.fetch_max(version, Ordering::Relaxed);
                true
            }
            Ok(None) => {
                self.lost.cancel();
                false
            }
            Err(e) => {
                crate::metrics::store_error("worker", e.kind());
                tracing::warn!(error = %e, "heartbeat failed; retrying");
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::images::{PreviewImage, RgbaImage};
    use crate::store::{NewTask, Submitted};

    /// A preview drawn before a backend takes the job is written at once, right after the
    /// processing state is stored, and here its write hangs (an object store that takes the
    /// connection and never answers): the keeper hears no change until it gives up. The
    /// progress told meanwhile still carries the version of the processing state: a stream
    /// that has said that state drops anything older.
    #[tokio::test]
    async fn progress_told_while_the_first_preview_hangs_carries_the_processing_version() {
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", silent.local_addr().unwrap());
        let _silent = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((connection, _)) = silent.accept().await {
                held.push(connection);
            }
        });
        // Credentials of no one: the requests go to the silent listener above.
        static CREDENTIALS: std::sync::Once = std::sync::Once::new();
        CREDENTIALS.call_once(|| {
            if std::env::var_os("AWS_ACCESS_KEY_ID").is_none() {
                std::env::set_var("AWS_ACCESS_KEY_ID", "easel-test");
                std::env::set_var("AWS_SECRET_ACCESS_KEY", "easel-test");
            }
        });
        let dir = tempfile::tempdir().unwrap();
        let blobs = Blobs::open(
            &crate::config::Blobs {
                store: crate::config::BlobStoreKind::S3,
                s3_bucket: Some("previews-never-land".into()),
                s3_endpoint: Some(endpoint),
                s3_path_style: true,
                ..Default::default()
            },
            dir.path(),
            crate::config::SqliteSynchronous::Normal,
            "http://127.0.0.1",
        )
        .await
        .unwrap();
        let url = format!("sqlite://{}", dir.path().join("easel.db").display());
        let store: SharedStore = std::sync::Arc::new(
            crate::store::sqlite::SqliteStore::open(&url, false)
                .await
                .unwrap(),
        );
        let account = store
            .ensure_account("reporter@example.com", "whsec_test")
            .await
            .unwrap();
        let key = crate::auth::create_key(store.as_ref(), &account.id, "test")
            .await
            .unwrap();
        let task = NewTask {
            operation: crate::domain::Operation::Imagine,
            prompt: "a kite over dunes".into(),
            aspect_ratio: crate::domain::AspectRatio::SQUARE,
            process_mode: crate::domain::ProcessMode::Fast,
            priority: 1,
            seed: 7,
            parent_seq: None,
            webhook_url: None,
            webhook_secret: None,
            cost: 0,
            idempotency: None,
            extras: Default::default(),
        };
        let submitted = store
            .submit(&task, &crate::auth::hash_key(&key), &100.into())
            .await
            .unwrap();
        assert!(
            matches!(submitted, Submitted::Queued { .. }),
            "{submitted:?}"
        );
        let claimed = store.claim_task("w", 60_000).await.unwrap().unwrap();

        // The first image drawn and a step reported before the backend is said to take the job.
        let progress = Progress::in_line_since(std::time::Instant::now());
        progress.preview(PreviewImage::Pixels(RgbaImage::new(64, 64)));
        progress.report(20);
        let mut listener = store
            .wakeups()
            .events
            .listen_task(claimed.seq, Some(&claimed.account_id));
        let stop = CancellationToken::new();
        let reporter = tokio::spawn(
            Reporter {
                store: store.clone(),
                blobs,
                config: std::sync::Arc::new(Config::default()),
                seq: claimed.seq,
                attempt: claimed.attempts,
                account_id: claimed.account_id.as_str().into(),
                progress: progress.clone(),
                lost: CancellationToken::new(),
                preview_folder: Blobs::new_folder(&claimed.id),
                hooks: None,
                stop: stop.clone(),
            }
            .run(),
        );
        progress.start();

        let told = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                if let Heard::Event(event) = listener.next().await {
                    if let Happened::Progress { live: true, .. } = event.what {
                        return event;
                    }
                }
            }
        })
        .await
        .expect("the progress is told while the preview's write hangs");
        let id = store.task_id(claimed.seq);
        let record = store
            .task_for_account(&claimed.account_id, &id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(record.status, crate::domain::TaskStatus::Processing);
        assert!(
            told.version >= record.version,
            "told at version {} where the processing state is at {}",
            told.version,
            record.version
        );
        reporter.abort();
    }
}
