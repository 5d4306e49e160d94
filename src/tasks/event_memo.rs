//! What every event stream says alike of one event, worked out once on this node: every stream
//! that hears an event holds the same `Arc<TaskEvent>` (`store::events` publishes one to all its
//! listeners), so the record read after a change, and the JSON of a progress event, are made by
//! the first stream that needs them and shared by the rest. Without it, a change heard by 2,000
//! streams of an account was 2,000 reads of the same task and 2,000 serializations of the same
//! record.
//!
//! A shared read is driven by whichever of its waiters is polled, not only by the stream that
//! began it: that stream may be left unpolled for as long as its client takes to read (its
//! connection writing a keep-alive comment to a client that reads nothing), and the others must
//! not wait on it.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::{BoxFuture, FutureExt, Shared};
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

/// An event's serialized text, set by the first stream that says it.
type Text = Arc<OnceCell<Arc<str>>>;

/// A read shared by the streams that wait for it.
type SharedRead<T> = Shared<BoxFuture<'static, StoreResult<T>>>;

struct Entry<C> {
    /// Held so that the event's address, the key, is not reused while the entry lives.
    _event: Option<Arc<TaskEvent>>,
    made: Instant,
    cell: C,
}

/// The shared results by key (an event's address, or a notice's number), each in a cell `C`.
struct Entries<K, C>(Mutex<HashMap<K, Entry<C>>>);

impl<K, C> Default for Entries<K, C> {
    fn default() -> Self {
        Entries(Mutex::new(HashMap::new()))
    }
}

/// The key of `event`'s entries: its address, which every stream that hears it shares (the entry
/// holds the event, so the address is not reused while the entry lives).
fn address(event: &Arc<TaskEvent>) -> usize {
    Arc::as_ptr(event) as usize
}

impl<C: Clone> Entries<usize, C> {
    /// The cell of `event`'s result, made by `make` if it has none.
    fn of_event(&self, event: &Arc<TaskEvent>, make: impl FnOnce() -> C) -> C {
        self.cell(address(event), Some(event), make)
    }
}

impl<K: std::hash::Hash + Eq, C: Clone> Entries<K, C> {
    /// The cell of `key`'s result, made by `make` if it has none (holding `event` while it lives).
    fn cell(&self, key: K, event: Option<&Arc<TaskEvent>>, make: impl FnOnce() -> C) -> C {
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
        let cell = make();
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

impl<K: std::hash::Hash + Eq + Copy, T: Clone> Entries<K, SharedRead<T>> {
    /// `key`'s shared read, begun with `read` if there is none; a failed one is forgotten, so
    /// that the next stream to ask reads again.
    async fn shared<Fut>(
        &self,
        key: K,
        event: Option<&Arc<TaskEvent>>,
        read: impl FnOnce() -> Fut,
    ) -> StoreResult<T>
    where
        Fut: Future<Output = StoreResult<T>> + Send + 'static,
    {
        let shared = self.cell(key, event, || read().boxed().shared());
        let result = shared.clone().await;
        if result.is_err() {
            let mut entries = self.0.lock().unwrap_or_else(|e| e.into_inner());
            if entries
                .get(&key)
                .is_some_and(|entry| entry.cell.ptr_eq(&shared))
            {
                entries.remove(&key);
            }
        }
        result
    }
}

/// The node's shared results of events, for its streams.
#[derive(Default)]
pub struct EventMemo {
    reads: Entries<usize, SharedRead<Option<Arc<Read>>>>,
    progress: Entries<usize, Text>,
    pages: Entries<u64, SharedRead<Arc<[Arc<Read>]>>>,
}

impl EventMemo {
    /// The task's state after the change `event`, read by `read` for the first stream that asks
    /// (the others wait for that read rather than making their own).
    pub async fn read<Fut>(
        &self,
        event: &Arc<TaskEvent>,
        read: impl FnOnce() -> Fut,
    ) -> StoreResult<Option<Arc<Read>>>
    where
        Fut: Future<Output = StoreResult<Option<Arc<Read>>>> + Send + 'static,
    {
        self.reads.shared(address(event), Some(event), read).await
    }

    /// The page of the account's changes that the notice of new tasks numbered `nth` announces,
    /// each with its record, read by `read` for the first stream that asks.
    pub async fn page<Fut>(
        &self,
        nth: u64,
        read: impl FnOnce() -> Fut,
    ) -> StoreResult<Arc<[Arc<Read>]>>
    where
        Fut: Future<Output = StoreResult<Arc<[Arc<Read>]>>> + Send + 'static,
    {
        self.pages.shared(nth, None, read).await
    }

    /// The JSON of the progress event `event`, made by `make` for the first stream that says it.
    pub fn progress(&self, event: &Arc<TaskEvent>, make: impl FnOnce() -> String) -> Arc<str> {
        let cell = self.progress.of_event(event, Text::default);
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
    use crate::store::{Happened, StoreError};
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
        let reads = Arc::new(AtomicUsize::new(0));
        let first = event(1);
        let read = || {
            let reads = reads.clone();
            async move {
                reads.fetch_add(1, Ordering::SeqCst);
                tokio::task::yield_now().await;
                Ok(None)
            }
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
        let reads = Arc::new(AtomicUsize::new(0));
        let read = || {
            let reads = reads.clone();
            async move {
                reads.fetch_add(1, Ordering::SeqCst);
                tokio::task::yield_now().await;
                Ok(Arc::from([]))
            }
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

    /// The stream that began a read may not be polled again for a long while (its connection
    /// writing to a client that reads nothing): the next stream to wait finishes the read.
    #[tokio::test]
    async fn a_read_whose_first_stream_is_left_unpolled_is_finished_by_the_next() {
        let memo = EventMemo::default();
        let e = event(5);
        let (next, first) = crate::tasks::shared_read_tests::left_unpolled_then_next(
            |gate| {
                memo.read(&e, || async move {
                    let _ = gate.await;
                    Ok(None)
                })
            },
            || {
                memo.read(&e, || async {
                    panic!("the read is shared, not made again")
                })
            },
        )
        .await;
        assert!(
            matches!(next, Some(Ok(None))),
            "the next stream finished the read the first began"
        );
        assert!(matches!(first.await, Ok(None)));
    }

    #[tokio::test]
    async fn a_failed_read_is_made_again_by_the_next_stream() {
        let memo = EventMemo::default();
        let e = event(6);
        let failed = memo
            .read(&e, || async { Err(StoreError::unavailable("down")) })
            .await;
        assert!(failed.is_err());
        let again = memo.read(&e, || async { Ok(None) }).await;
        assert!(matches!(again, Ok(None)), "the failure was not kept");
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
