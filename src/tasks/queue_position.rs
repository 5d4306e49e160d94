//! Where waiting tasks stand in line: `queue_position` in their records and event streams. One
//! read of the queue's order serves every record and stream on this node for a second, and is
//! made only while someone asks.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt, Shared};
use tokio::time::Instant;

use crate::domain::wire::WaitingFor;
use crate::store::{ClaimRules, SharedStore, StoreResult, Task, Waiting};

/// How old a position may be.
pub const LINE_MAX_AGE: Duration = Duration::from_secs(1);
/// The most tasks of the line that are counted; a task further back has no `queue_position`.
pub const LINE_COUNTED: u32 = 100_000;

/// The waiting tasks' places, as last read.
pub type Positions = Arc<Line>;

/// Where each waiting task stands. A task's position counts the tasks that will start before
/// it: a task whose account is at its running limit (held) is not counted for those behind
/// it, since claims pass over it; its own position counts every task ahead of it.
#[derive(Debug, Default)]
pub struct Line {
    positions: HashMap<i64, u32>,
    held: HashSet<i64>,
}

impl Line {
    fn of(order: &[Waiting]) -> Line {
        let mut line = Line::default();
        let (mut ahead, mut going) = (0u32, 0u32);
        for w in order {
            if w.held && !w.claimed {
                line.positions.insert(w.seq, ahead);
                line.held.insert(w.seq);
            } else {
                line.positions.insert(w.seq, going);
                going += 1;
            }
            ahead += 1;
        }
        line
    }

    /// The position of the task stored at `seq`, if it waits and is counted.
    pub fn get(&self, seq: &i64) -> Option<&u32> {
        self.positions.get(seq)
    }

    /// Whether the task waits for its account's running tasks rather than for its turn.
    pub fn held(&self, seq: i64) -> bool {
        self.held.contains(&seq)
    }
}

/// The queue's order as last read.
pub struct QueueLine {
    store: SharedStore,
    /// The plans' running limits (a reload replaces them).
    rules: crate::config::Live<ClaimRules>,
    read: Latest<Positions>,
}

impl QueueLine {
    pub fn new(store: SharedStore, rules: ClaimRules) -> QueueLine {
        QueueLine {
            store,
            rules: crate::config::Live::new(rules),
            read: Latest::default(),
        }
    }

    /// Take the running limits of reloaded plans (from the next read of the queue's order).
    pub fn reload(&self, rules: ClaimRules) {
        self.rules.set(rules);
    }

    /// The positions of the waiting tasks, by `seq`, at most [`LINE_MAX_AGE`] old. Callers
    /// asking together share one read; a read that fails gives the last one (or none).
    pub async fn positions(&self) -> Positions {
        let read = self
            .read
            .get(LINE_MAX_AGE, || {
                // Taken only when a read begins: a fresh answer costs no clone.
                let (store, rules) = (self.store.clone(), self.rules.get());
                async move {
                    let order = store.queue_order(LINE_COUNTED, &rules).await?;
                    Ok(Arc::new(Line::of(&order)))
                }
            })
            .await;
        match read {
            Ok(positions) => positions,
            Err(e) => {
                tracing::debug!(error = %e, "could not read the queue's order");
                self.read.last().unwrap_or_default()
            }
        }
    }

    /// The position of `task` if it waits and is counted, and what it waits for (`up`: whether
    /// a backend that runs it is up now, asked only of a waiting task).
    pub async fn place(
        &self,
        task: &Task,
        up: impl FnOnce() -> bool,
    ) -> (Option<u32>, Option<WaitingFor>) {
        if !waits(task) {
            return (None, None);
        }
        let line = self.positions().await;
        (
            line.get(&task.seq).copied(),
            Some(waiting_for(task, &line, up())),
        )
    }
}

/// What a waiting task waits for, in its record (`up` as in [`QueueLine::place`]).
pub fn waiting_for(task: &Task, line: &Line, up: bool) -> WaitingFor {
    waiting_for_at(task.status, line.held(task.seq), up)
}

/// What a task of `status` waits for: `held` when its account is at its running limit, `up`
/// when a backend that runs it is up. A claimed task waits for a backend; so does a queued one
/// while every backend that could run it is out, whatever its place (it goes nowhere until one
/// comes back, and its place says nothing of when).
pub fn waiting_for_at(status: crate::domain::TaskStatus, held: bool, up: bool) -> WaitingFor {
    if status == crate::domain::TaskStatus::Starting || !up {
        WaitingFor::Backend
    } else if held {
        WaitingFor::RunningLimit
    } else {
        WaitingFor::Turn
    }
}

/// Whether `task` is waiting for a backend (queued, or claimed by a worker that waits for one).
pub fn waits(task: &Task) -> bool {
    matches!(
        task.status,
        crate::domain::TaskStatus::Pending | crate::domain::TaskStatus::Starting
    )
}

/// A value read at most once per `max_age` for all who ask, the read shared while it runs.
/// The read is driven by whichever of its waiters is polled: an event stream that began it may
/// go unpolled while its connection writes to a client that reads nothing, and a lock held
/// across the read would make every other stream wait on that one.
struct Latest<T: Clone> {
    state: Mutex<LatestState<T>>,
}

struct LatestState<T: Clone> {
    last: Option<(Instant, T)>,
    running: Option<Shared<BoxFuture<'static, StoreResult<T>>>>,
}

impl<T: Clone> Default for Latest<T> {
    fn default() -> Self {
        Latest {
            state: Mutex::new(LatestState {
                last: None,
                running: None,
            }),
        }
    }
}

impl<T: Clone + Send + Sync + 'static> Latest<T> {
    /// The value, if read less than `max_age` ago; else the read under way, or one begun with
    /// `read`.
    async fn get<Fut>(&self, max_age: Duration, read: impl FnOnce() -> Fut) -> StoreResult<T>
    where
        Fut: Future<Output = StoreResult<T>> + Send + 'static,
    {
        let running = {
            let mut state = self.lock();
            if let Some((at, value)) = &state.last {
                if at.elapsed() < max_age {
                    return Ok(value.clone());
                }
            }
            state
                .running
                .get_or_insert_with(|| read().boxed().shared())
                .clone()
        };
        let result = running.clone().await;
        let mut state = self.lock();
        if state.running.as_ref().is_some_and(|r| r.ptr_eq(&running)) {
            state.running = None;
            if let Ok(value) = &result {
                state.last = Some((Instant::now(), value.clone()));
            }
        }
        result
    }

    /// The value last read, however old.
    fn last(&self) -> Option<T> {
        self.lock().last.as_ref().map(|(_, value)| value.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LatestState<T>> {
        // No holder leaves the state half-changed.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(seq: i64, claimed: bool, held: bool) -> Waiting {
        Waiting { seq, claimed, held }
    }

    #[test]
    fn a_held_task_is_not_counted_for_those_behind_it() {
        let line = Line::of(&[
            w(1, true, false),
            w(2, false, true),
            w(3, false, false),
            w(4, false, true),
            w(5, false, false),
        ]);
        let at = |seq| line.get(&seq).copied();
        assert_eq!([at(1), at(3), at(5)], [Some(0), Some(1), Some(2)]);
        assert_eq!([at(2), at(4)], [Some(1), Some(3)]);
        assert!(line.held(2) && line.held(4) && !line.held(3));
    }

    /// A stream that began the read may not be polled again for a long while: the next caller
    /// finishes it, and the callers after take what it read.
    #[tokio::test]
    async fn a_read_whose_first_caller_is_left_unpolled_is_finished_by_the_next() {
        let latest = Latest::<u32>::default();
        let (next, first) = crate::tasks::shared_read_tests::left_unpolled_then_next(
            |gate| {
                latest.get(LINE_MAX_AGE, || async move {
                    let _ = gate.await;
                    Ok(7)
                })
            },
            || {
                latest.get(LINE_MAX_AGE, || async {
                    panic!("the read is shared, not made again")
                })
            },
        )
        .await;
        assert!(
            matches!(next, Some(Ok(7))),
            "the next caller finished the read"
        );
        let fresh = latest.get(LINE_MAX_AGE, || async { panic!("fresh: not read again") });
        assert_eq!(fresh.await.unwrap(), 7);
        assert_eq!(first.await.unwrap(), 7);
    }

    #[tokio::test]
    async fn an_old_value_is_read_again_and_a_failed_read_keeps_the_last() {
        let latest = Latest::<u32>::default();
        assert_eq!(
            latest
                .get(Duration::ZERO, || async { Ok(1) })
                .await
                .unwrap(),
            1
        );
        assert_eq!(
            latest
                .get(Duration::ZERO, || async { Ok(2) })
                .await
                .unwrap(),
            2
        );
        let failed = latest
            .get(Duration::ZERO, || async {
                Err(crate::store::StoreError::unavailable("down"))
            })
            .await;
        assert!(failed.is_err());
        assert_eq!(latest.last(), Some(2));
        assert_eq!(
            latest
                .get(Duration::ZERO, || async { Ok(3) })
                .await
                .unwrap(),
            3,
            "read again after a failure"
        );
    }
}
