//! How far ahead of its backends a node claims, and the generation permits handed out in line.
//!
//! A worker loop claims a task only when the node has room for it: fewer claimed tasks waiting
//! for a backend than there are slots free now or about to free ([`SOON`]: a job in flight that
//! has held its slot about as long as its backend's jobs lately took), so that a backend finds
//! its next job ready when it frees and no claimed task waits long for it. The rest of the queue
//! stays in the store, in its fair order, where every node claims from and `queue_position`
//! counts; tasks claimed early would wait on this node in the order they happened to be claimed,
//! ahead of other accounts' turns and out of other nodes' reach, for as long as a job takes.
//!
//! The permits go to the waiting tasks in the order of their places (when each was claimed), as
//! the backends' slots do (`generate::pool`): a task whose input images took longer to read
//! does not lose its turn to one claimed after it, nor take one claimed before it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, Notify};
use tokio_util::sync::CancellationToken;

use crate::generate::Openings;

/// How soon a slot must be expected to free for a task to be claimed for it: about a claim's
/// time (its commits and its input images), so that the job is ready when the slot frees.
pub const SOON: Duration = Duration::from_millis(50);
/// Tasks claimed beyond the free permits where the generator cannot say when its work ends:
/// one, so that a permit that frees has its next job waiting.
pub const CLAIMED_AHEAD: usize = 1;
/// How often a loop waiting for room looks again when nothing here signals it (a backend's
/// slot freed or a backend brought back, which the pool does not tell the workers).
const LOOK_AGAIN: Duration = Duration::from_millis(50);

/// Whether the node's last claim found nothing to take, and the turn to ask the store again
/// while it did: one worker loop at a time, on news of work (a wake-up of the queue) or once a
/// poll interval, instead of every idle loop asking (each once a poll interval, and all of them
/// at each wake-up: the store's work grew with the node's loops, twice its `workers`). A claim
/// that takes a task passes the turn on, since more may wait.
#[derive(Default)]
pub struct Turns {
    empty: AtomicBool,
    turn: Notify,
}

impl Turns {
    /// What the last claim found: a task, or nothing (or no answer from the store).
    pub fn found(&self, task: bool) {
        self.empty.store(!task, Ordering::Release);
        if task {
            self.turn.notify_one();
        }
    }

    /// News of work, or a poll interval gone by: one waiting loop asks the store.
    pub fn news(&self) {
        self.turn.notify_one();
    }

    /// Return at once while the last claim found a task; otherwise once it is this loop's turn
    /// to ask. `false` at `stop`.
    pub async fn wait(&self, stop: &CancellationToken) -> bool {
        if !self.empty.load(Ordering::Acquire) {
            return true;
        }
        tokio::select! {
            _ = self.turn.notified() => true,
            _ = stop.cancelled() => false,
        }
    }
}

/// The node's claimed tasks that no backend has taken yet.
#[derive(Default)]
pub struct Room {
    waiting: AtomicUsize,
    changed: Notify,
}

/// A claimed task's share of the room, until a backend takes it (the worker gives it to the
/// task's progress, which drops it then) or the task ends.
pub struct Seat {
    room: Arc<Room>,
}

impl Drop for Seat {
    fn drop(&mut self) {
        self.room.waiting.fetch_sub(1, Ordering::AcqRel);
        self.room.changed.notify_waiters();
    }
}

impl Room {
    /// A seat once fewer tasks wait than `openings()` counts; `None` at `stop`. It looks again
    /// when a seat or a permit is given back, at the moment the openings say one more slot will
    /// be about to free, and at least every [`LOOK_AGAIN`].
    pub async fn seat(
        self: &Arc<Self>,
        openings: impl Fn() -> Openings,
        stop: &CancellationToken,
    ) -> Option<Seat> {
        loop {
            let changed = self.changed.notified();
            let openings = openings();
            let (limit, next) = (openings.count(), openings.next);
            let now = self.waiting.load(Ordering::Acquire);
            if now < limit {
                if self
                    .waiting
                    .compare_exchange(now, now + 1, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    return Some(Seat { room: self.clone() });
                }
                continue;
            }
            let again = Instant::now() + LOOK_AGAIN;
            let wake = next.map_or(again, |next| next.min(again));
            tokio::select! {
                _ = changed => {}
                _ = tokio::time::sleep_until(wake.into()) => {}
                _ = stop.cancelled() => return None,
            }
        }
    }

    /// Tell the loops waiting for room that it may have changed (a permit was given back).
    pub fn changed(&self) {
        self.changed.notify_waiters();
    }

    /// How many claimed tasks wait for a backend.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Acquire)
    }
}

/// The `workers` permits, handed to the waiting tasks in the order of their places.
pub struct Permits {
    state: Mutex<PermitState>,
    arrivals: AtomicU64,
    room: Arc<Room>,
}

struct PermitState {
    free: usize,
    waiting: BTreeMap<(Instant, u64), oneshot::Sender<()>>,
}

/// One generation's permit; given back (to the first task in line) when dropped.
pub struct Permit<'a> {
    permits: &'a Permits,
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        let mut state = self.permits.lock();
        state.free += 1;
        Permits::hand_out(&mut state);
        drop(state);
        self.permits.room.changed();
    }
}

impl Permits {
    pub fn new(n: usize, room: Arc<Room>) -> Permits {
        Permits {
            state: Mutex::new(PermitState {
                free: n,
                waiting: BTreeMap::new(),
            }),
            arrivals: AtomicU64::new(0),
            room,
        }
    }

    fn lock(&self) -> MutexGuard<'_, PermitState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many permits are free now.
    pub fn free(&self) -> usize {
        self.lock().free
    }

    /// A permit, once every task placed before `place` that waits for one has had its own;
    /// `queued` is called once the task stands in this line.
    pub async fn acquire(&self, place: Instant, queued: impl FnOnce()) -> Permit<'_> {
        let key = (place, self.arrivals.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = oneshot::channel();
        {
            let mut state = self.lock();
            state.waiting.insert(key, tx);
            Permits::hand_out(&mut state);
        }
        queued();
        let mut waiting = Waiting {
            permits: self,
            key,
            granted: Some(rx),
        };
        let granted = waiting.granted.as_mut().expect("set above");
        // The sender lives in the map until it is used: an error means it was used and the
        // permit counted, or (never) dropped with the map.
        let _ = granted.await;
        waiting.granted = None;
        Permit { permits: self }
    }

    /// Give free permits to the first waiters in line.
    fn hand_out(state: &mut PermitState) {
        while state.free > 0 {
            let Some((_, grant)) = state.waiting.pop_first() else {
                return;
            };
            if grant.send(()).is_ok() {
                state.free -= 1;
            }
        }
    }
}

/// A task waiting for a permit; dropped before it has one (its task stopped), it leaves the
/// line, and a permit sent to it meanwhile goes to the next.
struct Waiting<'a> {
    permits: &'a Permits,
    key: (Instant, u64),
    granted: Option<oneshot::Receiver<()>>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let Some(mut granted) = self.granted.take() else {
            return;
        };
        let mut state = self.permits.lock();
        state.waiting.remove(&self.key);
        if granted.try_recv().is_ok() {
            state.free += 1;
            Permits::hand_out(&mut state);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn permits_go_to_the_earliest_place_not_the_first_to_ask() {
        let room = Arc::new(Room::default());
        let permits = Arc::new(Permits::new(1, room));
        let base = Instant::now();
        let held = permits.acquire(base, || {}).await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut waiters = Vec::new();
        // Asked in the order 3, 1, 2; placed in the order 1, 2, 3.
        for n in [3u64, 1, 2] {
            let (permits, order) = (permits.clone(), order.clone());
            waiters.push(tokio::spawn(async move {
                let permit = permits
                    .acquire(base + Duration::from_millis(n), || {})
                    .await;
                order.lock().unwrap().push(n);
                tokio::time::sleep(Duration::from_millis(5)).await;
                drop(permit);
            }));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        drop(held);
        for w in waiters {
            w.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![1, 2, 3]);
        assert_eq!(permits.free(), 1);
    }

    #[tokio::test]
    async fn a_waiter_that_stops_leaves_the_line_and_its_permit_goes_on() {
        let permits = Arc::new(Permits::new(1, Arc::new(Room::default())));
        let base = Instant::now();
        let held = permits.acquire(base, || {}).await;
        let gone = tokio::spawn({
            let permits = permits.clone();
            async move {
                let _ = permits
                    .acquire(base + Duration::from_millis(1), || {})
                    .await;
            }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        gone.abort();
        let _ = gone.await;
        drop(held);
        let next = tokio::time::timeout(
            Duration::from_secs(1),
            permits.acquire(base + Duration::from_millis(2), || {}),
        )
        .await
        .expect("the stopped waiter holds nothing");
        drop(next);
        assert_eq!(permits.free(), 1);
    }

    #[tokio::test]
    async fn after_an_empty_claim_one_loop_asks_again_per_news_and_a_found_task_passes_the_turn() {
        let turns = Arc::new(Turns::default());
        let stop = CancellationToken::new();
        assert!(turns.wait(&stop).await, "no empty claim yet: ask at once");
        turns.found(false);
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let (turns, stop) = (turns.clone(), stop.clone());
                tokio::spawn(async move { turns.wait(&stop).await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            waiters.iter().all(|w| !w.is_finished()),
            "all wait for news"
        );
        turns.news();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let done = waiters.iter().filter(|w| w.is_finished()).count();
        assert_eq!(done, 1, "one news, one loop asks");
        // It found a task: the next loop asks too, and the one after it.
        turns.found(true);
        tokio::time::sleep(Duration::from_millis(50)).await;
        let done = waiters.iter().filter(|w| w.is_finished()).count();
        assert_eq!(done, 2, "the turn passed on");
        turns.found(true);
        for w in waiters {
            assert!(w.await.unwrap());
        }
        assert!(turns.wait(&stop).await, "a task found last: ask at once");
        turns.found(false);
        stop.cancel();
        assert!(!turns.wait(&stop).await, "stopping");
    }

    #[tokio::test]
    async fn a_claim_waits_until_a_slot_is_about_to_free() {
        let room = Arc::new(Room::default());
        let stop = CancellationToken::new();
        let started = Instant::now();
        let at = started + Duration::from_millis(300);
        // Nothing free or about to free until `at`, when a running job will be.
        let openings = move || {
            let soon = usize::from(Instant::now() >= at);
            Openings {
                now: 0,
                soon,
                next: (soon == 0).then_some(at),
            }
        };
        let seat = room.seat(openings, &stop).await.expect("a seat at `at`");
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(300), "{waited:?}");
        assert!(waited < Duration::from_millis(1000), "{waited:?}");
        drop(seat);
    }

    #[tokio::test]
    async fn claims_wait_for_room_and_a_seat_given_back_makes_room() {
        let room = Arc::new(Room::default());
        let stop = CancellationToken::new();
        // No free slot, one about to free: room for one claim.
        let one_soon = || Openings {
            now: 0,
            soon: 1,
            next: None,
        };
        let first = room.seat(one_soon, &stop).await.expect("one for the slot");
        assert_eq!(room.waiting(), 1);
        let second = tokio::spawn({
            let (room, stop) = (room.clone(), stop.clone());
            async move { room.seat(one_soon, &stop).await.is_some() }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!second.is_finished(), "no room for a second claim");
        drop(first);
        assert!(tokio::time::timeout(Duration::from_secs(1), second)
            .await
            .expect("room once the first seat is given back")
            .unwrap());
        let held = room.seat(one_soon, &stop).await.expect("room again");
        stop.cancel();
        assert!(
            room.seat(one_soon, &stop).await.is_none(),
            "no room, and a stopping node waits no more"
        );
        drop(held);
    }
}
