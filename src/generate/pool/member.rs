//! One backend in the pool: its generator, its slots, the jobs it has in flight, and whether it
//! is in (with its last error and any rest a `Retry-After` asked for).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

use crate::domain::OpKind;
use crate::generate::Generator;

/// Consecutive transient failures that take a backend out until a probe succeeds.
pub const DOWN_AFTER: u32 = 3;

/// One backend in the pool.
pub(super) struct Member {
    pub generator: Arc<dyn Generator>,
    pub concurrency: usize,
    pub slots: Arc<Semaphore>,
    pub in_flight: AtomicUsize,
    pub health: Mutex<Health>,
    /// The models it serves; `None` (a pool built without a catalogue): every model.
    pub models: Option<Vec<String>>,
    /// A built-in member for bookkeeping work (the crop of `upscale-1x`), not a backend: its
    /// slots are not counted among the free ones that claims wait for.
    pub bookkeeping: bool,
    /// What it was built from (its settings), when known: a reload keeps the member whose
    /// settings are the same.
    pub fingerprint: String,
    /// When its slots in use were taken and how long its jobs held one lately: when a slot is
    /// likely to free. Shared, as the slots are, with the member a reload keeps.
    pub timing: Arc<Mutex<Timing>>,
}

/// How much a new job's time on a slot moves the typical one (a smoothed average).
const TYPICAL_WEIGHT: f64 = 0.2;

/// A backend's slots in use, and its jobs' typical time on a slot.
#[derive(Debug, Default)]
pub(super) struct Timing {
    /// When each slot in use was taken.
    taken: Vec<Instant>,
    /// The jobs' time on a slot, smoothed; `None` until a job has given its slot back.
    typical: Option<Duration>,
}

impl Timing {
    /// A slot taken at `at`.
    pub fn took(&mut self, at: Instant) {
        self.taken.push(at);
    }

    /// The slot taken at `taken` given back at `now`; its time counts toward the typical one.
    pub fn gave_back(&mut self, taken: Instant, now: Instant) {
        if let Some(i) = self.taken.iter().position(|t| *t == taken) {
            self.taken.swap_remove(i);
        }
        let held = now.saturating_duration_since(taken);
        self.typical = Some(match self.typical {
            None => held,
            Some(typical) => typical.mul_f64(1.0 - TYPICAL_WEIGHT) + held.mul_f64(TYPICAL_WEIGHT),
        });
    }

    /// Of the slots in use, how many are expected to be given back by `now + within` (taken a
    /// typical job's time before that, or longer ago), and the first later moment at which one
    /// more will be. Nothing is expected before a job has given a slot back.
    pub fn freeing(&self, now: Instant, within: Duration) -> (usize, Option<Instant>) {
        let Some(typical) = self.typical else {
            return (0, None);
        };
        let by = now + within;
        let mut soon = 0;
        let mut next: Option<Instant> = None;
        for taken in &self.taken {
            let expected = *taken + typical;
            if expected <= by {
                soon += 1;
            } else {
                let at = expected - within;
                next = Some(next.map_or(at, |n| n.min(at)));
            }
        }
        (soon, next)
    }
}

#[derive(Clone, Debug, Default)]
pub(super) struct Health {
    pub down: bool,
    pub failures: u32,
    pub last_error: Option<String>,
    /// Not before this (a `Retry-After` the backend asked for).
    pub resting_until: Option<Instant>,
}

/// A backend's state, as `/readyz` and the logs show it.
#[derive(Clone, Debug, serde::Serialize, utoipa::ToSchema)]
pub struct BackendHealth {
    pub name: String,
    pub up: bool,
    pub in_flight: usize,
    pub concurrency: usize,
    /// The models it serves.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub last_error: Option<String>,
}

impl Member {
    /// A backend with `concurrency` slots of its own (at least one), nothing in flight, and in.
    pub fn new(
        generator: Arc<dyn Generator>,
        concurrency: usize,
        models: Option<Vec<String>>,
        bookkeeping: bool,
        fingerprint: String,
    ) -> Member {
        let concurrency = concurrency.max(1);
        Member {
            generator,
            concurrency,
            slots: Arc::new(Semaphore::new(concurrency)),
            in_flight: AtomicUsize::new(0),
            health: Mutex::new(Health::default()),
            models,
            bookkeeping,
            fingerprint,
            timing: Arc::default(),
        }
    }

    /// This backend serving `models`, marked `fingerprint`: its generator and its slots (so that
    /// the jobs it has running still hold them), a count and health of its own.
    pub fn remade(&self, models: Option<Vec<String>>, fingerprint: String) -> Member {
        Member {
            generator: self.generator.clone(),
            concurrency: self.concurrency,
            slots: self.slots.clone(),
            in_flight: AtomicUsize::new(0),
            health: Mutex::new(Health::default()),
            models,
            bookkeeping: self.bookkeeping,
            fingerprint,
            timing: self.timing.clone(),
        }
    }

    /// Whether `other`, built from reloaded settings, is this backend unchanged.
    pub fn same_as(&self, other: &Member) -> bool {
        !self.fingerprint.is_empty()
            && self.fingerprint == other.fingerprint
            && self.generator.name() == other.generator.name()
            && self.concurrency == other.concurrency
            && self.models == other.models
            && self.bookkeeping == other.bookkeeping
    }

    pub fn load(&self) -> f64 {
        self.in_flight.load(Ordering::Relaxed) as f64 / self.concurrency as f64
    }

    /// Whether it is to run `kind` on `model` (a task without a model runs anywhere).
    pub fn runs(&self, kind: OpKind, model: Option<&str>) -> bool {
        self.generator.supports(kind)
            && match (model, &self.models) {
                (Some(model), Some(served)) => served.iter().any(|m| m == model),
                _ => true,
            }
    }

    pub fn available(&self, now: Instant) -> bool {
        let health = self.health.lock().expect("not poisoned");
        !health.down && health.resting_until.is_none_or(|t| t <= now)
    }

    pub fn succeeded(&self) {
        let mut health = self.health.lock().expect("not poisoned");
        if health.down {
            tracing::info!(backend = self.generator.name(), "backend is back");
        }
        *health = Health::default();
    }

    /// Note a transient failure; whether the backend is now out.
    pub fn failed(&self, error: &str, retry_after: Option<Duration>) -> bool {
        let mut health = self.health.lock().expect("not poisoned");
        health.failures += 1;
        health.last_error = Some(error.to_string());
        health.resting_until = retry_after.map(|d| Instant::now() + d);
        if health.failures >= DOWN_AFTER && !health.down {
            health.down = true;
            tracing::warn!(
                backend = self.generator.name(),
                error,
                "backend taken out after {DOWN_AFTER} failures in a row; probing it"
            );
        }
        health.down
    }
}
