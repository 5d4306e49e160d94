//! Who is waiting for which task to end: requests held by `Prefer: wait`, and the worker running a
//! task (which stops at once when the task is canceled). The store calls [`TaskEnds::ended`] once
//! per task that reaches a final state (PostgreSQL: from its listener, for every node's task
//! ends), which wakes only the watchers of that task. Nothing polls: a thousand waiting requests
//! cost a map entry each and one wake-up per task end.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::futures::Notified;
use tokio::sync::Notify;

/// The watchers of each task, by its `seq`.
#[derive(Default)]
pub struct TaskEnds {
    watched: Mutex<HashMap<i64, Watched>>,
}

struct Watched {
    notify: Arc<Notify>,
    watchers: usize,
}

impl TaskEnds {
    /// Watch the task stored at `seq` until the watch is dropped. Take the watch (and enable its
    /// [`TaskWatch::notified`]) before reading the task's state, so that an end between the read
    /// and the wait is not missed.
    pub fn watch(self: &Arc<Self>, seq: i64) -> TaskWatch {
        let mut watched = self.lock();
        let entry = watched.entry(seq).or_insert_with(|| Watched {
            notify: Arc::new(Notify::new()),
            watchers: 0,
        });
        entry.watchers += 1;
        TaskWatch {
            ends: self.clone(),
            seq,
            notify: entry.notify.clone(),
        }
    }

    /// The task stored at `seq` reached a final state: wake its watchers, if any.
    pub fn ended(&self, seq: i64) {
        let notify = self.lock().get(&seq).map(|w| w.notify.clone());
        if let Some(notify) = notify {
            notify.notify_waiters();
        }
    }

    /// Ends may have been missed (PostgreSQL's listener reconnected): every watcher looks again.
    pub fn wake_all(&self) {
        for watched in self.lock().values() {
            watched.notify.notify_waiters();
        }
    }

    /// How many tasks are watched now.
    pub fn watched(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Watched>> {
        // The map is left consistent by every holder: a panic elsewhere cannot poison it usefully.
        self.watched.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A watch on one task; unregisters itself when dropped.
pub struct TaskWatch {
    ends: Arc<TaskEnds>,
    seq: i64,
    notify: Arc<Notify>,
}

impl TaskWatch {
    /// Completes at the task's end (or a [`TaskEnds::wake_all`]) after this call. Enable it
    /// (`Notified::enable`) before reading the state it guards.
    pub fn notified(&self) -> Notified<'_> {
        self.notify.notified()
    }
}

impl Drop for TaskWatch {
    fn drop(&mut self) {
        let mut watched = self.ends.lock();
        if let Some(entry) = watched.get_mut(&self.seq) {
            entry.watchers -= 1;
            if entry.watchers == 0 {
                watched.remove(&self.seq);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_end_wakes_only_its_own_watchers_and_the_last_watch_leaves_no_entry() {
        let ends = Arc::new(TaskEnds::default());
        let a = ends.watch(1);
        let a2 = ends.watch(1);
        let b = ends.watch(2);
        assert_eq!(ends.watched(), 2);
        {
            let mut woken_a = std::pin::pin!(a.notified());
            woken_a.as_mut().enable();
            let mut woken_a2 = std::pin::pin!(a2.notified());
            woken_a2.as_mut().enable();
            let mut woken_b = std::pin::pin!(b.notified());
            woken_b.as_mut().enable();
            ends.ended(1);
            woken_a.await;
            woken_a2.await;
            let idle =
                tokio::time::timeout(std::time::Duration::from_millis(50), &mut woken_b).await;
            assert!(idle.is_err(), "task 2 has not ended");
            ends.wake_all();
            woken_b.await;
        }
        drop(a);
        assert_eq!(ends.watched(), 2);
        drop(a2);
        drop(b);
        assert_eq!(ends.watched(), 0);
        // An end nobody watches is nothing.
        ends.ended(3);
    }
}
