//! How a running generation talks to the worker that runs it: its place in the node's line for a
//! backend, how far it is (0..=100), the latest preview of its image, the moment a backend took
//! it, a backend that failed and is being tried again, and the signal to stop. The generator
//! writes, the worker's reporter reads: a change wakes the reporter at once, which passes it on
//! to the task's subscribers and, at most once a second, to the store.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::domain::Retrying;
use crate::images::preview::PreviewImage;

/// A backend's slot while a job holds it. The pool's own type is erased here so that the job's
/// types need not know the pool: all the holder does with it is drop it, which frees the slot.
pub(crate) type Held = Arc<Mutex<Option<Box<dyn Send>>>>;

/// Progress of one generation, written by the generator and read by the worker; and, while the
/// pool runs the job on a backend, that backend's slot, which the generator gives back as soon
/// as the backend has answered ([`Progress::backend_done`]).
#[derive(Clone)]
pub struct Progress {
    shared: Arc<Shared>,
    /// What the job holds on its backend (the pool's slot), released by `backend_done`.
    slot: Option<Held>,
    /// Cancelled when the task's result is no longer wanted (it was canceled, or another worker
    /// holds it now): backends take the job off the server and answer `GenerateError::Canceled`.
    stop: CancellationToken,
}

struct Shared {
    /// Where the job stands in the node's line for a backend slot: when its task was claimed
    /// (the claims' order is the fair order of turns). The pool hands a freed slot to the job
    /// that has stood longest among those that can use it.
    place: Instant,
    /// Dropped once a backend has taken the job (or with the progress): what the worker holds
    /// for a claimed task until then (its room among the claims).
    until_started: Mutex<Option<Box<dyn Send>>>,
    /// Dropped once the job stands in the line for a slot, or a backend has taken it (or with
    /// the progress): the node's turn to claim, so that the next claim's job arrives after this
    /// one's and the line's order is the claims'.
    until_in_line: Mutex<Option<Box<dyn Send>>>,
    /// The backend attempt that failed last and is being tried again, with its error; cleared
    /// when a backend takes the job again.
    retrying: Mutex<Option<Retrying>>,
    percent: AtomicI64,
    /// The latest preview not yet taken by the reporter; a newer one replaces it.
    preview: Mutex<Option<PreviewImage>>,
    /// Woken on every change of `percent` or `preview`.
    changed: Notify,
    /// Cancelled once a backend has taken the job (the pool gave it a slot).
    started: CancellationToken,
    /// The backend that took the job last (its name), for the task's `usage`.
    backend: Mutex<Option<String>>,
    /// How long the job has held backend slots, in microseconds: each from the slot taken to
    /// its release (the answer read, or the attempt's end), summed over attempts.
    held_us: AtomicU64,
}

/// A slot as the job holds it: its holding time is added to the job's when it is released.
struct Timed {
    slot: Option<Box<dyn Send>>,
    since: Instant,
    shared: Arc<Shared>,
}

impl Drop for Timed {
    fn drop(&mut self) {
        // The slot first, so that the time counted ends when the backend is free again.
        drop(self.slot.take());
        let held = u64::try_from(self.since.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.shared.held_us.fetch_add(held, Ordering::Relaxed);
    }
}

/// The value in `mutex`, even after a panic while it was held: each of the progress's values is
/// only ever replaced or taken whole, so a panic elsewhere leaves nothing half-written.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl Default for Progress {
    fn default() -> Self {
        Progress::in_line_since(Instant::now())
    }
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Progress").field(&self.get()).finish()
    }
}

impl Progress {
    /// The progress of a job whose task took its place in line at `place` (when it was claimed).
    pub fn in_line_since(place: Instant) -> Progress {
        Progress {
            shared: Arc::new(Shared {
                place,
                until_started: Mutex::new(None),
                until_in_line: Mutex::new(None),
                retrying: Mutex::new(None),
                percent: AtomicI64::new(0),
                preview: Mutex::new(None),
                changed: Notify::new(),
                started: CancellationToken::new(),
                backend: Mutex::new(None),
                held_us: AtomicU64::new(0),
            }),
            slot: None,
            stop: CancellationToken::new(),
        }
    }

    /// Where the job stands in line: when its task was claimed.
    pub fn place(&self) -> Instant {
        self.shared.place
    }

    /// Keep `held` until a backend takes the job (or the progress is dropped).
    pub fn hold_until_started(&self, held: impl Send + 'static) {
        *lock(&self.shared.until_started) = Some(Box::new(held));
    }

    /// Keep `held` until the job stands in line for a slot or a backend takes it.
    pub fn hold_until_in_line(&self, held: impl Send + 'static) {
        *lock(&self.shared.until_in_line) = Some(Box::new(held));
    }

    /// The job stands in line for a slot now (the pool's line says so).
    pub fn entered_line(&self) {
        let held = lock(&self.shared.until_in_line).take();
        drop(held);
    }

    /// The backend attempt `attempt` failed with `error` and the job waits to be tried again.
    pub fn retrying(&self, attempt: u32, error: &str) {
        *lock(&self.shared.retrying) = Some(Retrying::new(attempt, error));
        self.shared.changed.notify_one();
    }

    /// The failed attempt the job waits to retry, if it does.
    pub fn retry_state(&self) -> Option<Retrying> {
        lock(&self.shared.retrying).clone()
    }

    /// The generation is `percent` done. Progress never goes back: a lower value is ignored.
    pub fn report(&self, percent: i64) {
        let percent = percent.clamp(0, 100);
        if self.shared.percent.fetch_max(percent, Ordering::Relaxed) < percent {
            self.shared.changed.notify_one();
        }
    }

    pub fn get(&self) -> i64 {
        self.shared.percent.load(Ordering::Relaxed)
    }

    /// The work so far looks like `image`. Cheap for the generator: the image is only kept (a
    /// newer one replaces it); the reporter shrinks and stores it, at most once a second.
    pub fn preview(&self, image: PreviewImage) {
        *lock(&self.shared.preview) = Some(image);
        self.shared.changed.notify_one();
    }

    /// Whether a preview waits to be taken.
    pub fn has_preview(&self) -> bool {
        lock(&self.shared.preview).is_some()
    }

    /// The latest preview given since the last call, if any.
    pub fn take_preview(&self) -> Option<PreviewImage> {
        lock(&self.shared.preview).take()
    }

    /// Completes at the next change of the percentage or the preview after the last one that
    /// was waited for (a change while nobody waits is kept for the next wait).
    pub async fn changed(&self) {
        self.shared.changed.notified().await
    }

    /// Completes once a backend has taken the job (at once if it has already).
    pub async fn started(&self) {
        self.shared.started.cancelled().await
    }

    /// A backend took the job: the task is `processing` from the caller's point of view, and no
    /// longer waits for a retry.
    pub fn start(&self) {
        self.shared.started.cancel();
        self.entered_line();
        let held = lock(&self.shared.until_started).take();
        drop(held);
        if lock(&self.shared.retrying).take().is_some() {
            self.shared.changed.notify_one();
        }
    }

    pub fn is_started(&self) -> bool {
        self.shared.started.is_cancelled()
    }

    /// The same progress, carrying `slot` of `backend` until the generator calls
    /// `backend_done` (or the holder takes it back). Taking a slot starts the job, and the time
    /// until it is given back counts as the job's backend time.
    pub(crate) fn holding(&self, slot: impl Send + 'static, backend: &str) -> (Progress, Held) {
        *lock(&self.shared.backend) = Some(backend.to_string());
        let timed = Timed {
            slot: Some(Box::new(slot)),
            since: Instant::now(),
            shared: self.shared.clone(),
        };
        let held: Held = Arc::new(Mutex::new(Some(Box::new(timed))));
        let progress = Progress {
            shared: self.shared.clone(),
            slot: Some(held.clone()),
            stop: self.stop.clone(),
        };
        self.start();
        (progress, held)
    }

    /// The backend that took the job last, if one did.
    pub fn backend(&self) -> Option<String> {
        lock(&self.shared.backend).clone()
    }

    /// How long the job held backend slots (those given back so far), summed over attempts.
    pub fn backend_time(&self) -> Duration {
        Duration::from_micros(self.shared.held_us.load(Ordering::Relaxed))
    }

    /// Ask the generation to stop: its result is no longer wanted.
    pub fn stop(&self) {
        self.stop.cancel();
    }

    /// Completes once the generation has been asked to stop.
    pub async fn stopped(&self) {
        self.stop.cancelled().await
    }

    pub fn is_stopped(&self) -> bool {
        self.stop.is_cancelled()
    }

    /// The backend has sent everything this job needs from it: its slot goes to the next job
    /// while the answer is decoded, encoded and stored here, so that the backend does not wait
    /// for easel.
    pub fn backend_done(&self) {
        if let Some(slot) = &self.slot {
            let freed = lock(slot).take();
            drop(freed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_change_wakes_the_reader_and_progress_never_goes_back() {
        let progress = Progress::default();
        let waiting = tokio::spawn({
            let progress = progress.clone();
            async move { progress.changed().await }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        progress.report(40);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("woken by the change")
            .unwrap();
        progress.report(30);
        assert_eq!(progress.get(), 40);
        // No change, no wake-up.
        let idle = tokio::time::timeout(Duration::from_millis(50), progress.changed()).await;
        assert!(idle.is_err(), "a lower value is no change");
    }

    #[tokio::test]
    async fn the_latest_preview_replaces_one_not_taken_and_a_slot_starts_the_job() {
        let progress = Progress::default();
        assert!(!progress.is_started());
        progress.preview(PreviewImage::Encoded(vec![1]));
        progress.preview(PreviewImage::Encoded(vec![2]));
        match progress.take_preview() {
            Some(PreviewImage::Encoded(bytes)) => assert_eq!(bytes, vec![2]),
            other => panic!("the latest preview, got {other:?}"),
        }
        assert!(progress.take_preview().is_none());
        let (_on_backend, held) = progress.holding((), "b1");
        assert!(progress.is_started());
        tokio::time::timeout(Duration::from_secs(1), progress.started())
            .await
            .expect("started at once");
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(
            progress.backend_time(),
            Duration::ZERO,
            "counted once given back"
        );
        let slot = held.lock().unwrap().take();
        drop(slot);
        assert_eq!(progress.backend().as_deref(), Some("b1"));
        assert!(progress.backend_time() >= Duration::from_millis(20));
    }
}
