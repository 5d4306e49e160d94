//! What happens to tasks, as it happens, for whoever listens on this node: the Server-Sent
//! Events streams, requests held by `Prefer: wait`, and the worker running a task (which stops at
//! once when the task is canceled). The store publishes every change of a task's stored state
//! after it commits (PostgreSQL: from its listener, for every node's changes), and the worker
//! publishes its task's live progress. Each task and each account has a channel only while
//! someone listens: a change nobody listens to costs two map lookups.
//!
//! Every stored change of a task gives it a new *version*, from one counter with task `seq`s (a
//! task never changed since its submit is at version `seq`): a stream's `Last-Event-ID` is a
//! version, and what changed since is what has a higher one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::broadcast;

use crate::domain::{Retrying, TaskStatus};

/// Events kept for a task's listeners that have not read them yet; a listener further behind
/// has lagged (and reads the stored state again, or is dropped).
const TASK_CHANNEL: usize = 32;
/// The same for an account's listeners, who hear of all its tasks.
const ACCOUNT_CHANNEL: usize = 256;

/// One thing that happened to a task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskEvent {
    pub seq: i64,
    pub account_id: Arc<str>,
    /// The task's stored version after it (for live progress: the stored version it follows).
    pub version: i64,
    pub what: Happened,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Happened {
    /// Its stored state changed: it is now `status` (read it again for the rest).
    Changed { status: TaskStatus },
    /// Its worker reports progress (`live`: not stored yet), or stored it (with the preview, when
    /// there is one, at `preview_key`, and the failed backend attempt it waits to retry, if it
    /// does).
    Progress {
        percentage: i64,
        preview_key: Option<String>,
        retrying: Option<Retrying>,
        live: bool,
    },
}

impl TaskEvent {
    /// Whether the task has ended with it.
    pub fn ended(&self) -> bool {
        matches!(self.what, Happened::Changed { status } if status.is_final())
    }
}

/// What a listener hears.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Heard {
    Event(Arc<TaskEvent>),
    /// New tasks of the account, at versions from `from` on: read them from the store. `nth`
    /// tells this notice from every other of the node, so that the streams that hear it can share
    /// the one read of what it announces (`tasks::event_memo`).
    NewTasks {
        from: i64,
        nth: u64,
    },
    /// Events may have been missed (the listener of another node's changes reconnected, or this
    /// listener fell behind): read the stored state again.
    Resync,
}

type Sender = broadcast::Sender<Heard>;

/// The channels of the tasks and accounts someone listens to.
#[derive(Default)]
pub struct TaskEvents {
    tasks: Mutex<HashMap<i64, Sender>>,
    accounts: Mutex<HashMap<Arc<str>, Sender>>,
    /// The notices of new tasks given so far.
    new_tasks: std::sync::atomic::AtomicU64,
}

impl TaskEvents {
    /// Listen to the task stored at `seq` until the listener is dropped. Listen before reading
    /// the task's state, so that a change between the read and the wait is not missed. With
    /// `account_id`, events of another account's task at the same `seq` are not heard (databases
    /// that share a PostgreSQL server share its notification channels: another easel's tasks
    /// have the same `seq`s).
    pub fn listen_task(self: &Arc<Self>, seq: i64, account_id: Option<&str>) -> Listener {
        let receiver = subscribe(&self.tasks, seq, TASK_CHANNEL);
        Listener {
            receiver,
            events: self.clone(),
            of: Of::Task(seq),
            account: account_id.map(Arc::from),
        }
    }

    /// Listen to every task of `account_id`.
    pub fn listen_account(self: &Arc<Self>, account_id: &str) -> Listener {
        let key: Arc<str> = Arc::from(account_id);
        let receiver = subscribe(&self.accounts, key.clone(), ACCOUNT_CHANNEL);
        Listener {
            receiver,
            events: self.clone(),
            of: Of::Account(key),
            account: None,
        }
    }

    /// Tell the task's and its account's listeners.
    pub fn publish(&self, event: TaskEvent) {
        let task = lock(&self.tasks).get(&event.seq).cloned();
        let account = lock(&self.accounts).get(&event.account_id).cloned();
        if task.is_none() && account.is_none() {
            return;
        }
        let heard = Heard::Event(Arc::new(event));
        if let Some(task) = task {
            let _ = task.send(heard.clone());
        }
        if let Some(account) = account {
            let _ = account.send(heard);
        }
    }

    /// The account has new tasks, at versions from `from` on.
    pub fn new_tasks(&self, account_id: &str, from: i64) {
        if let Some(account) = lock(&self.accounts).get(account_id) {
            let nth = self
                .new_tasks
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let _ = account.send(Heard::NewTasks { from, nth });
        }
    }

    /// Events may have been missed: every listener reads the stored state again.
    pub fn resync(&self) {
        for sender in lock(&self.tasks).values() {
            let _ = sender.send(Heard::Resync);
        }
        for sender in lock(&self.accounts).values() {
            let _ = sender.send(Heard::Resync);
        }
    }

    /// How many tasks and accounts are listened to now.
    pub fn listened(&self) -> (usize, usize) {
        (lock(&self.tasks).len(), lock(&self.accounts).len())
    }
}

fn lock<K, V>(map: &Mutex<HashMap<K, V>>) -> std::sync::MutexGuard<'_, HashMap<K, V>> {
    // Each holder leaves the map consistent: a panic elsewhere cannot poison it usefully.
    map.lock().unwrap_or_else(|e| e.into_inner())
}

fn subscribe<K: std::hash::Hash + Eq>(
    map: &Mutex<HashMap<K, Sender>>,
    key: K,
    capacity: usize,
) -> broadcast::Receiver<Heard> {
    lock(map)
        .entry(key)
        .or_insert_with(|| broadcast::channel(capacity).0)
        .subscribe()
}

enum Of {
    Task(i64),
    Account(Arc<str>),
}

/// One listener of a task or an account; its channel goes when the last listener does.
pub struct Listener {
    receiver: broadcast::Receiver<Heard>,
    events: Arc<TaskEvents>,
    of: Of,
    /// Only this account's events are heard (a task's listener).
    account: Option<Arc<str>>,
}

impl Listener {
    /// The next thing heard. A listener that fell behind hears `Resync` (what it missed is in
    /// the store), then what comes after.
    pub async fn next(&mut self) -> Heard {
        loop {
            match self.receiver.recv().await {
                Ok(Heard::Event(event))
                    if self
                        .account
                        .as_ref()
                        .is_some_and(|a| *a != event.account_id) => {}
                Ok(heard) => return heard,
                Err(broadcast::error::RecvError::Lagged(_)) => return Heard::Resync,
                // The sender lives in the map for as long as this receiver does.
                Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
            }
        }
    }

    /// Completes when the task may have ended: at its end, or when events may have been missed.
    /// For a task's listener (the account's hear of other tasks too).
    pub async fn ended(&mut self) {
        loop {
            match self.next().await {
                Heard::Event(event) if !event.ended() => {}
                Heard::NewTasks { .. } => {}
                _ => return,
            }
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        // Under the map's lock, so that no listener subscribes between the count and the removal.
        fn leave<K: std::hash::Hash + Eq>(map: &Mutex<HashMap<K, Sender>>, key: &K) {
            let mut map = lock(map);
            if map.get(key).is_some_and(|s| s.receiver_count() <= 1) {
                map.remove(key);
            }
        }
        match &self.of {
            Of::Task(seq) => leave(&self.events.tasks, seq),
            Of::Account(account) => leave(&self.events.accounts, account),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn event(seq: i64, account: &str, status: TaskStatus) -> TaskEvent {
        TaskEvent {
            seq,
            account_id: Arc::from(account),
            version: seq,
            what: Happened::Changed { status },
        }
    }

    #[tokio::test]
    async fn an_event_reaches_its_task_and_account_listeners_only() {
        let events = Arc::new(TaskEvents::default());
        let mut task = events.listen_task(1, None);
        let mut other = events.listen_task(2, None);
        let mut account = events.listen_account("a");
        events.publish(event(1, "a", TaskStatus::Processing));
        assert!(matches!(task.next().await, Heard::Event(e) if e.seq == 1));
        assert!(matches!(account.next().await, Heard::Event(e) if e.seq == 1));
        let idle = tokio::time::timeout(Duration::from_millis(50), other.next()).await;
        assert!(idle.is_err(), "task 2 heard nothing");
        events.new_tasks("a", 7);
        assert!(matches!(
            account.next().await,
            Heard::NewTasks { from: 7, .. }
        ));
        events.publish(event(1, "a", TaskStatus::Finished));
        tokio::time::timeout(Duration::from_secs(1), task.ended())
            .await
            .expect("the end is heard");
    }

    #[tokio::test]
    async fn the_last_listener_takes_its_channel_and_a_laggard_resyncs() {
        let events = Arc::new(TaskEvents::default());
        let a = events.listen_task(1, None);
        let mut b = events.listen_task(1, Some("x"));
        let c = events.listen_account("x");
        assert_eq!(events.listened(), (1, 1));
        drop(a);
        assert_eq!(events.listened(), (1, 1));
        for _ in 0..TASK_CHANNEL + 1 {
            events.publish(event(1, "x", TaskStatus::Processing));
        }
        assert_eq!(b.next().await, Heard::Resync);
        drop(b);
        // Another account's task at the same seq is not this listener's.
        let mut d = events.listen_task(1, Some("x"));
        events.publish(event(1, "elsewhere", TaskStatus::Failed));
        events.publish(event(1, "x", TaskStatus::Finished));
        assert!(matches!(d.next().await, Heard::Event(e) if e.account_id.as_ref() == "x"));
        drop(d);
        drop(c);
        assert_eq!(events.listened(), (0, 0));
        // Nobody listens: nothing is kept.
        events.publish(event(3, "y", TaskStatus::Finished));
        assert_eq!(events.listened(), (0, 0));
    }
}
