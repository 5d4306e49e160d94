//! Where waiting tasks stand in line: `queue_position` in their records and event streams. One
//! read of the queue's order serves every record and stream on this node for a second, and is
//! made only while someone asks.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::store::{SharedStore, Task};

/// How old a position may be.
pub const LINE_MAX_AGE: Duration = Duration::from_secs(1);
/// The most tasks of the line that are counted; a task further back has no `queue_position`.
pub const LINE_COUNTED: u32 = 100_000;

/// The positions of the waiting tasks, by `seq`.
pub type Positions = Arc<HashMap<i64, u32>>;

/// The queue's order as last read.
pub struct QueueLine {
    store: SharedStore,
    read: Mutex<Option<(Instant, Positions)>>,
}

impl QueueLine {
    pub fn new(store: SharedStore) -> QueueLine {
        QueueLine {
            store,
            read: Mutex::new(None),
        }
    }

    /// The positions of the waiting tasks, by `seq`, at most [`LINE_MAX_AGE`] old. Callers
    /// asking together share one read; a read that fails gives the last one (or none).
    pub async fn positions(&self) -> Positions {
        let mut read = self.read.lock().await;
        if let Some((at, positions)) = read.as_ref() {
            if at.elapsed() < LINE_MAX_AGE {
                return positions.clone();
            }
        }
        match self.store.queue_order(LINE_COUNTED).await {
            Ok(order) => {
                let positions: HashMap<i64, u32> = order.into_iter().zip(0u32..).collect();
                let positions = Arc::new(positions);
                *read = Some((Instant::now(), positions.clone()));
                positions
            }
            Err(e) => {
                tracing::debug!(error = %e, "could not read the queue's order");
                read.as_ref().map(|(_, p)| p.clone()).unwrap_or_default()
            }
        }
    }

    /// The position of `task` if it waits and is counted.
    pub async fn position(&self, task: &Task) -> Option<u32> {
        if !waits(task) {
            return None;
        }
        self.positions().await.get(&task.seq).copied()
    }
}

/// Whether `task` is waiting for a backend (queued, or claimed by a worker that waits for one).
pub fn waits(task: &Task) -> bool {
    matches!(
        task.status,
        crate::domain::TaskStatus::Pending | crate::domain::TaskStatus::Starting
    )
}
