//! Whether images can be written now: one state per process that every worker consults before
//! it claims a task. Storage that fails (a full disk, an object store that does not answer) or
//! a data directory below `min_free_space` pauses the workers instead of failing task after
//! task: the first worker to find the trouble pauses them all, one of them probes with backoff
//! (a test write of a task's size, or the free space again) while the others wait, and the
//! probe that succeeds lets them all claim again. The log says so once when the pause starts
//! and once when it ends; `/readyz` names the cause meanwhile.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::{BlobError, Blobs};
use crate::config::FreeSpace;

/// The first probe's delay after a pause starts; each failed probe doubles it up to
/// `LONGEST_PROBE`.
const FIRST_PROBE: Duration = Duration::from_millis(200);
const LONGEST_PROBE: Duration = Duration::from_secs(5);
/// A probe writes as much as the largest task has written so far, within these bounds: a tiny
/// write can succeed on a disk where a task's images will not fit.
const PROBE_MIN: u64 = 4 << 10;
const PROBE_MAX: u64 = 16 << 20;

/// The shared state. Cheap to clone.
#[derive(Clone, Debug)]
pub struct StorageHealth {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    state: Mutex<State>,
    /// Woken when a pause ends.
    resumed: Notify,
    /// Held by the one worker that probes.
    probing: tokio::sync::Mutex<()>,
    floor: Option<Floor>,
}

/// `min_free_space` on the filesystem that holds `path`.
#[derive(Debug)]
struct Floor {
    path: PathBuf,
    min: FreeSpace,
}

#[derive(Debug, Default)]
struct State {
    pause: Option<Pause>,
    /// The most bytes one task has written, which a probe writes again.
    largest_task: u64,
}

#[derive(Debug)]
struct Pause {
    why: Why,
    since: Instant,
    next_probe: Duration,
}

#[derive(Clone, Debug, PartialEq)]
enum Why {
    /// The data directory is below `min_free_space`: nothing failed yet, but images must wait.
    LowSpace(String),
    /// A write or read of the blob store failed in a way that may pass.
    Failing(String),
}

impl Why {
    fn text(&self) -> String {
        match self {
            Why::LowSpace(text) => text.clone(),
            Why::Failing(text) => format!("the image store is failing: {text}"),
        }
    }
}

impl StorageHealth {
    /// Healthy, with `min_free_space` enforced on the filesystem of `path` unless `min` is off.
    pub(super) fn new(floor: Option<(PathBuf, FreeSpace)>) -> StorageHealth {
        let floor = floor
            .filter(|(_, min)| !min.is_off())
            .map(|(path, min)| Floor { path, min });
        StorageHealth {
            inner: Arc::new(Inner {
                state: Mutex::new(State::default()),
                resumed: Notify::new(),
                probing: tokio::sync::Mutex::new(()),
                floor,
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Why workers are paused, or None while images can be written.
    pub fn paused(&self) -> Option<String> {
        self.state().pause.as_ref().map(|p| p.why.text())
    }

    /// A task stored `bytes` of images: what a probe should be able to write.
    pub fn wrote(&self, bytes: u64) {
        let mut state = self.state();
        state.largest_task = state.largest_task.max(bytes);
    }

    /// A blob operation failed in a way that may pass: pause the workers (if they are not
    /// already).
    pub fn failing(&self, error: &BlobError) {
        self.pause(Why::Failing(error.to_string()));
    }

    fn pause(&self, why: Why) {
        let mut state = self.state();
        match &mut state.pause {
            Some(pause) => pause.why = why,
            None => {
                tracing::warn!(
                    cause = why.text(),
                    "image storage unavailable: workers take no tasks until it recovers"
                );
                state.pause = Some(Pause {
                    why,
                    since: Instant::now(),
                    next_probe: FIRST_PROBE,
                });
            }
        }
    }

    fn resume(&self) {
        let ended = self.state().pause.take();
        if let Some(pause) = ended {
            tracing::info!(
                paused_ms = pause.since.elapsed().as_millis() as u64,
                "image storage available again: workers resume"
            );
        }
        self.inner.resumed.notify_waiters();
    }

    /// Return once images may be written: at once while storage is healthy and the data
    /// directory above its floor; else after a probe succeeds (this worker's or another's).
    /// False when `stop` comes first.
    pub async fn wait_writable(&self, blobs: &Blobs, stop: &CancellationToken) -> bool {
        loop {
            if stop.is_cancelled() {
                return false;
            }
            // Registered before the state is read, so that a resume in between is not missed.
            let resumed = self.inner.resumed.notified();
            tokio::pin!(resumed);
            resumed.as_mut().enable();
            let paused = self.state().pause.is_some();
            if !paused {
                match self.below_floor() {
                    None => return true,
                    Some(why) => {
                        self.pause(Why::LowSpace(why));
                        continue;
                    }
                }
            }
            match self.inner.probing.try_lock() {
                Ok(_probing) => {
                    let wait = {
                        let mut state = self.state();
                        match &mut state.pause {
                            Some(pause) => {
                                let wait = pause.next_probe;
                                pause.next_probe = (wait * 2).min(LONGEST_PROBE);
                                wait
                            }
                            None => continue,
                        }
                    };
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = stop.cancelled() => return false,
                    }
                    match self.probe(blobs).await {
                        Ok(()) => self.resume(),
                        Err(why) => {
                            tracing::debug!(cause = why.text(), "image storage probe failed");
                            self.pause(why);
                        }
                    }
                }
                Err(_) => {
                    tokio::select! {
                        _ = resumed => {}
                        // The prober may have stopped; look again now and then.
                        _ = tokio::time::sleep(LONGEST_PROBE) => {}
                        _ = stop.cancelled() => return false,
                    }
                }
            }
        }
    }

    /// Whether storage works again: the floor holds and, when a write failed, a test write of
    /// a task's size succeeds.
    async fn probe(&self, blobs: &Blobs) -> Result<(), Why> {
        if let Some(why) = self.below_floor() {
            return Err(Why::LowSpace(why));
        }
        let failing = matches!(
            self.state().pause.as_ref().map(|p| &p.why),
            Some(Why::Failing(_))
        );
        if failing {
            let bytes = self.state().largest_task.clamp(PROBE_MIN, PROBE_MAX);
            blobs
                .probe(bytes as usize)
                .await
                .map_err(|e| Why::Failing(e.to_string()))?;
        }
        Ok(())
    }

    /// Why the data directory is below `min_free_space`, or None when it is not (or cannot be
    /// measured: a floor that cannot be read does not stop the workers).
    fn below_floor(&self) -> Option<String> {
        let floor = self.inner.floor.as_ref()?;
        let (free, total) = match free_space(&floor.path) {
            Ok(space) => space,
            Err(e) => {
                tracing::debug!(path = %floor.path.display(), error = %e, "cannot measure free space");
                return None;
            }
        };
        let min = floor.min.bytes_of(total);
        (free < min).then(|| {
            format!(
                "{} free on {}, below min_free_space ({}): workers stop writing images until \
                 space is freed",
                size(free),
                floor.path.display(),
                size(min)
            )
        })
    }
}

/// Bytes available to the process on the filesystem holding `path`, and the filesystem's size.
fn free_space(path: &std::path::Path) -> nix::Result<(u64, u64)> {
    let stats = nix::sys::statvfs::statvfs(path)?;
    let unit = stats.fragment_size() as u64;
    Ok((
        stats.blocks_available() as u64 * unit,
        stats.blocks() as u64 * unit,
    ))
}

/// `bytes` for people: `1.50 MiB`.
fn size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.2} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(size(512), "512 B");
        assert_eq!(size(3 << 19), "1.50 MiB");
        assert_eq!(size(1 << 30), "1.00 GiB");
    }

    #[test]
    fn a_floor_above_the_filesystem_pauses_and_one_below_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let (free, _) = free_space(dir.path()).unwrap();
        let high = StorageHealth::new(Some((
            dir.path().to_path_buf(),
            FreeSpace::Bytes(free.saturating_mul(4).max(1 << 40)),
        )));
        let why = high.below_floor().expect("below a floor above the disk");
        assert!(why.contains("min_free_space"), "{why}");
        let low = StorageHealth::new(Some((dir.path().to_path_buf(), FreeSpace::Bytes(1))));
        assert_eq!(low.below_floor(), None);
        let off = StorageHealth::new(Some((dir.path().to_path_buf(), FreeSpace::Bytes(0))));
        assert!(off.inner.floor.is_none());
    }
}
