//! The line for backend slots. A job that finds no free slot for its operation and model waits
//! here under its place (when its task was claimed: the claims follow the fair order of turns,
//! so this is that order), and every freed slot, backend brought back or newcomer makes the line
//! hand out what is free to the waiters in the order of their places. A waiter that cannot use
//! any free slot (its model's backends are busy) does not hold back one behind it that can.
//! Waking every waiter and letting them race, as a `Notify` would, gave slots to whichever
//! woke first (issue 52: six tasks sent in order reached one backend as 1,3,5,2,6,4).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, OwnedSemaphorePermit};

use super::member::Member;
use crate::config::Live;
use crate::domain::OpKind;
use crate::generate::{GenerateError, Progress};

/// How often a waiter looks again without being handed anything: a backend resting after a
/// `Retry-After` comes back with no signal.
const LOOK_AGAIN: Duration = Duration::from_secs(1);

/// A slot handed to a waiter: the backend and its concurrency permit.
pub(super) struct Granted {
    pub member: Arc<Member>,
    pub permit: OwnedSemaphorePermit,
}

struct Waiter {
    kind: OpKind,
    model: Option<String>,
    grant: oneshot::Sender<Granted>,
}

/// Places compare by claim time, then by arrival among equal times.
type Key = (Instant, u64);

pub(super) struct Line {
    /// The backends now (a reload replaces them; waiters keep their places).
    members: Live<Vec<Arc<Member>>>,
    waiting: Mutex<BTreeMap<Key, Waiter>>,
    arrivals: AtomicU64,
}

impl Line {
    pub fn new(members: Vec<Arc<Member>>) -> Line {
        Line {
            members: Live::new(members),
            waiting: Mutex::new(BTreeMap::new()),
            arrivals: AtomicU64::new(0),
        }
    }

    /// The backends after a reload.
    pub fn set_members(&self, members: Vec<Arc<Member>>) {
        self.members.set(members);
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<Key, Waiter>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wait in line for a slot of a backend that runs `kind` on `model`: `Some` once one is
    /// handed over, `None` when none was by `deadline`, `Err(Canceled)` when the job is stopped.
    pub async fn wait(
        &self,
        kind: OpKind,
        model: Option<&str>,
        progress: &Progress,
        deadline: Instant,
    ) -> Result<Option<Granted>, GenerateError> {
        let key = (
            progress.place(),
            self.arrivals.fetch_add(1, Ordering::Relaxed),
        );
        loop {
            let (grant, granted) = oneshot::channel();
            self.lock().insert(
                key,
                Waiter {
                    kind,
                    model: model.map(str::to_string),
                    grant,
                },
            );
            let mut standing = Standing {
                line: self,
                key,
                granted: Some(granted),
            };
            progress.entered_line();
            self.dispatch();
            let left = deadline.saturating_duration_since(Instant::now());
            let granted = standing.granted.as_mut().expect("set above");
            tokio::select! {
                answer = tokio::time::timeout(left.min(LOOK_AGAIN), granted) => {
                    if let Ok(Ok(granted)) = answer {
                        standing.granted = None;
                        return Ok(Some(granted));
                    }
                }
                _ = progress.stopped() => return Err(GenerateError::Canceled),
            }
            // Out of line (handing back anything granted meanwhile) before looking again.
            if let Some(granted) = standing.leave() {
                return Ok(Some(granted));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
        }
    }

    /// Hand what is free to the waiters, first places first: each gets the least loaded free
    /// slot that runs its operation and model; one that no free slot suits is passed over.
    pub fn dispatch(&self) {
        let mut waiting = self.lock();
        let now = Instant::now();
        let keys: Vec<Key> = waiting.keys().copied().collect();
        let members = self.members.get();
        for key in keys {
            if !members.iter().any(|m| m.slots.available_permits() > 0) {
                break;
            }
            let waiter = &waiting[&key];
            if waiter.grant.is_closed() {
                waiting.remove(&key);
                continue;
            }
            let Some(granted) = pick(&members, waiter.kind, waiter.model.as_deref(), now) else {
                continue;
            };
            let waiter = waiting.remove(&key).expect("read above");
            // A waiter gone meanwhile drops what it is sent: the permit comes back at once, for
            // the next in this loop.
            let _ = waiter.grant.send(granted);
        }
    }
}

/// The least loaded of `members` that runs `kind` on `model`, is in and has a free slot, with
/// its slot.
fn pick(
    members: &[Arc<Member>],
    kind: OpKind,
    model: Option<&str>,
    now: Instant,
) -> Option<Granted> {
    let mut candidates: Vec<&Arc<Member>> = members
        .iter()
        .filter(|m| m.runs(kind, model) && m.available(now))
        .collect();
    candidates.sort_by(|a, b| a.load().total_cmp(&b.load()));
    candidates.into_iter().find_map(|m| {
        let permit = m.slots.clone().try_acquire_owned().ok()?;
        Some(Granted {
            member: m.clone(),
            permit,
        })
    })
}

/// A waiter's place while it stands in line; leaving (or being dropped, when the job's future
/// is) takes it out, and a slot handed to it meanwhile goes back to the line.
struct Standing<'a> {
    line: &'a Line,
    key: Key,
    granted: Option<oneshot::Receiver<Granted>>,
}

impl Standing<'_> {
    /// Leave the line; the slot handed over meanwhile, if one was.
    fn leave(&mut self) -> Option<Granted> {
        self.line.lock().remove(&self.key);
        self.granted.take()?.try_recv().ok()
    }
}

impl Drop for Standing<'_> {
    fn drop(&mut self) {
        if self.granted.is_some() && self.leave().is_some() {
            // Its permit was just dropped: hand the slot to the next in line.
            self.line.dispatch();
        }
    }
}
