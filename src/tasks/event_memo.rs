//! What every event stream says alike of one event, worked out once on this node: every stream
//! that hears an event holds the same `Arc<TaskEvent>` (`store::events` publishes one to all its
//! listeners), so the record read after a change, and the JSON of a progress event, are made by
//! the first stream that needs them and shared by the rest. Without it, a change heard by 2,000
//! streams of an account was 2,000 reads of the same task and 2,000 serializations of the same
//! record.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::OnceCell;

use crate::domain::wire::Record;
use crate::store::{StoreResult, Task, TaskEvent};

/// Events remembered at once; past it, those older than [`KEPT`] are forgotten (and if that is
/// not enough, all): a stream that comes late reads and serializes for itself, as before.
const ENTRIES_MAX: usize = 1024;
/// How long an event's shared result is kept once made: the streams that hear it take it
/// within milliseconds of each other.
const KEPT: Duration = Duration::from_secs(10);

/// A task's state as read after a change, with its record and the record's JSON.
pub struct Read {
    pub task: Task,
    pub record: Record,
    pub json: Arc<str>,
}

/// An event's shared result: `Some` once made (`None` inside: the task was not found).
type Cell<T> = Arc<OnceCell<T>>;

struct Entry<T> {
    /// Held so that the event's address, the key, is not reused while the entry lives.
    _event: Option<Arc<TaskEvent>>,
    made: Instant,
    cell: Cell<T>,
}

/// The shared results by key: an event's address, or a notice's number.
struct Entries<K, T>(Mutex<HashMap<K, Entry<T>>>);

impl<K, T> Default for Entries<K, T> {
    fn default() -> Self {
        Entries(Mutex::new(HashMap::new()))
    }
}

impl<T> Entries<usize, T> {
    /// The cell of `event`'s result, made empty if it has none.
    fn of_event(&self, event: &Arc<TaskEvent>) -> Cell<T> {
        self.cell(Arc::as_ptr(event) as usize, Some(event))
    }
}

impl<K: std::hash::Hash + Eq, T> Entries<K, T> {
    /// The cell of `key`'s result, made empty if it has none (holding `event` while it lives).
    fn cell(&self, key: K, event: Option<&Arc<TaskEvent>>) -> Cell<T> {
        // No holder leaves the map half-changed.
        let mut entries = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = entries.get(&key) {
            return entry.cell.clone();
        }
        if entries.len() >= ENTRIES_MAX {
            entries.retain(|_, e| e.made.elapsed() < KEPT);
            if entries.len() >= ENTRIES_MAX {
                entries.clear();
            }
        }
        let cell: Cell<T> = Arc::default();
        entries.insert(
            key,
            Entry {
                _event: event.cloned(),
                made: Instant::now(),
                cell: cell.clone(),
            },
        );
        cell
    }
}

/// The node's shared results of events, for its streams.
#[derive(Default)]
pub struct EventMemo {
    reads: Entries<usize, Option<Arc<Read>>>,
    progress: Entries<usize, Arc<str>>,
    pages: Entries<u64, Vec<Arc<Read>>>,
}

impl EventMemo {
    /// The task's state after the change `event`, read by `read` for the first stream that asks
    /// (the others wait for that read rather than making their own).
    pub async fn read<F, Fut>(
        &self,
        event: &Arc<TaskEvent>,
        read: F,
    ) -> StoreResult<Option<Arc<Read>>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = StoreResult<Option<Arc<Read>>>>,
    {
        let cell = self.reads.of_event(event);
        cell.get_or_try_init(read).await.cloned()
    }

    /// The page of the account's changes that the notice of new tasks numbered `nth` announces,
    /// each with its record, read by `read` for the first stream that asks.
    pub async fn page<F, Fut>(&self, nth: u64, read: F) -> StoreResult<Vec<Arc<Read>>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = StoreResult<Vec<Arc<Read>>>>,
    {
        let cell = self.pages.cell(nth, None);
        cell.get_or_try_init(read).await.cloned()
    }

    /// The JSON of the progress event `event`, made by `make` for the first stream that says it.
    pub fn progress(&self, event: &Arc<TaskEvent>, make: impl FnOnce() -> String) -> Arc<str> {
        let cell = self.progress.of_event(event);
        if let Some(json) = cell.get() {
            return json.clone();
        }
        let json: Arc<str> = Arc::from(make());
        // Two streams that made it at once both say the same text; the first one set is kept.
        let _ = cell.set(json.clone());
        json
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::TaskStatus;
    use crate::store::Happened;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn event(seq: i64) -> Arc<TaskEvent> {
        Arc::new(TaskEvent {
            seq,
            account_id: "a".into(),
            version: seq,
            what: Happened::Changed {
                status: TaskStatus::Finished,
            },
        })
    }

    #[tokio::test]
    async fn many_streams_of_one_event_read_once_and_another_event_reads_again() {
        let memo = EventMemo::default();
        let reads = AtomicUsize::new(0);
        let first = event(1);
        let read = || async {
            reads.fetch_add(1, Ordering::SeqCst);
            tokio::task::yield_now().await;
            Ok(None)
        };
        let all = futures::future::join_all((0..50).map(|_| memo.read(&first, read))).await;
        assert!(all.iter().all(|r| matches!(r, Ok(None))));
        assert_eq!(reads.load(Ordering::SeqCst), 1, "one read for 50 streams");
        memo.read(&event(2), read).await.unwrap();
        assert_eq!(reads.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_notice_of_new_tasks_is_read_once_for_every_stream_that_heard_it() {
        let memo = EventMemo::default();
        let reads = AtomicUsize::new(0);
        let read = || async {
            reads.fetch_add(1, Ordering::SeqCst);
            tokio::task::yield_now().await;
            Ok(Vec::new())
        };
        let all = futures::future::join_all((0..50).map(|_| memo.page(3, read))).await;
        assert!(all.iter().all(|page| matches!(page, Ok(p) if p.is_empty())));
        assert_eq!(reads.load(Ordering::SeqCst), 1, "one read for 50 streams");
        memo.page(4, read).await.unwrap();
        assert_eq!(
            reads.load(Ordering::SeqCst),
            2,
            "another notice reads again"
        );
    }

    #[test]
    fn progress_is_serialized_once_per_event_and_the_memo_stays_bounded() {
        let memo = EventMemo::default();
        let made = AtomicUsize::new(0);
        let e = event(7);
        for _ in 0..10 {
            let json = memo.progress(&e, || {
                made.fetch_add(1, Ordering::SeqCst);
                "{}".into()
            });
            assert_eq!(&*json, "{}");
        }
        assert_eq!(made.load(Ordering::SeqCst), 1);
        for seq in 0..(ENTRIES_MAX as i64 * 3) {
            memo.progress(&event(seq), || "{}".into());
        }
        let held = memo.progress.0.lock().unwrap().len();
        assert!(held <= ENTRIES_MAX, "{held} entries");
    }
}
