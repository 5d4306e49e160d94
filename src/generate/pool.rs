//! The pool: every configured backend behind one [`Generator`]. A job goes to a healthy backend
//! that runs its operation, the least loaded first (jobs in flight over its `concurrency`), and
//! never more jobs at once than a backend's `concurrency`. A transient failure is tried again,
//! with backoff, on this or another backend, until the pool's time budget for the job runs out.
//! A backend that fails `DOWN_AFTER` times in a row is taken out; a probe brings it back.
//! Because easel keeps every image itself, a follow-up runs on any capable backend, not only on
//! the one that made its parent. A task made on a model (`[[models]]`, or a backend's own) goes
//! only to the backends that serve that model.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use super::job::{GenerateError, Generator, Job, Product, Progress};
use crate::config::Catalogue;
use crate::domain::OpKind;

/// Consecutive transient failures that take a backend out until a probe succeeds.
pub const DOWN_AFTER: u32 = 3;
/// How often a backend that is out is probed.
const PROBE_DOWN_EVERY: Duration = Duration::from_secs(5);
/// How often a backend that is in is probed (so one that died idle is found before a job is
/// sent to it).
const PROBE_UP_EVERY: Duration = Duration::from_secs(30);
/// The first and the longest wait before trying a job again after a transient failure.
const BACKOFF_FIRST: Duration = Duration::from_millis(250);
const BACKOFF_MOST: Duration = Duration::from_secs(10);

/// One backend in the pool.
struct Member {
    generator: Arc<dyn Generator>,
    concurrency: usize,
    slots: Arc<Semaphore>,
    in_flight: AtomicUsize,
    health: Mutex<Health>,
    /// The models it serves; `None` (a pool built without a catalogue): every model.
    models: Option<Vec<String>>,
}

#[derive(Clone, Debug, Default)]
struct Health {
    down: bool,
    failures: u32,
    last_error: Option<String>,
    /// Not before this (a `Retry-After` the backend asked for).
    resting_until: Option<Instant>,
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
    fn load(&self) -> f64 {
        self.in_flight.load(Ordering::Relaxed) as f64 / self.concurrency as f64
    }

    /// Whether it is to run `kind` on `model` (a task without a model runs anywhere).
    fn runs(&self, kind: OpKind, model: Option<&str>) -> bool {
        self.generator.supports(kind)
            && match (model, &self.models) {
                (Some(model), Some(served)) => served.iter().any(|m| m == model),
                _ => true,
            }
    }

    fn available(&self, now: Instant) -> bool {
        let health = self.health.lock().expect("not poisoned");
        !health.down && health.resting_until.is_none_or(|t| t <= now)
    }

    fn succeeded(&self) {
        let mut health = self.health.lock().expect("not poisoned");
        if health.down {
            tracing::info!(backend = self.generator.name(), "backend is back");
        }
        *health = Health::default();
    }

    /// Note a transient failure; whether the backend is now out.
    fn failed(&self, error: &str, retry_after: Option<Duration>) -> bool {
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

/// A job's place on a backend: its concurrency permit and its count in flight, given back when
/// dropped (by the adapter's `Progress::backend_done`, or when the job ends).
pub struct Slot {
    member: Arc<Member>,
    permit: Option<OwnedSemaphorePermit>,
    changed: Arc<Notify>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        // The permit first: a job woken by the signal must find the slot free.
        drop(self.permit.take());
        self.member.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.changed.notify_waiters();
    }
}

/// Every backend, as one generator.
pub struct Pool {
    members: Vec<Arc<Member>>,
    /// How long one job may keep trying, over every backend, before it fails.
    budget: Duration,
    /// Signalled when a slot frees up or a backend comes back.
    changed: Arc<Notify>,
    /// The models, and which backends serve each.
    catalogue: Arc<Catalogue>,
}

impl Pool {
    /// A pool of `backends`, each with its concurrency; `budget` bounds the retries of one job.
    pub fn new(backends: Vec<(Arc<dyn Generator>, usize)>, budget: Duration) -> Pool {
        let members = backends
            .into_iter()
            .map(|(generator, concurrency)| {
                let concurrency = concurrency.max(1);
                Arc::new(Member {
                    generator,
                    concurrency,
                    slots: Arc::new(Semaphore::new(concurrency)),
                    in_flight: AtomicUsize::new(0),
                    health: Mutex::new(Health::default()),
                    models: None,
                })
            })
            .collect();
        Pool {
            members,
            budget,
            changed: Arc::new(Notify::new()),
            catalogue: Arc::new(Catalogue::default()),
        }
    }

    /// The pool with each backend serving the models `catalogue` gives it (by its name).
    pub fn with_catalogue(mut self, catalogue: Catalogue) -> Pool {
        for member in &mut self.members {
            let served = catalogue.served_by(member.generator.name());
            Arc::get_mut(member)
                .expect("members are not shared before the pool is")
                .models = Some(served);
        }
        self.catalogue = Arc::new(catalogue);
        self
    }

    /// The models callers may pick.
    pub fn catalogue(&self) -> &Catalogue {
        &self.catalogue
    }

    /// Whether some backend serving `model` runs `kind` (whether up or not).
    pub fn supports_on(&self, kind: OpKind, model: Option<&str>) -> bool {
        self.members.iter().any(|m| m.runs(kind, model))
    }

    /// Whether some backend serving `model` is up now.
    pub fn model_up(&self, model: &str) -> bool {
        let now = Instant::now();
        self.members.iter().any(|m| {
            m.models
                .as_ref()
                .is_none_or(|served| served.iter().any(|s| s == model))
                && m.available(now)
        })
    }

    /// Each backend's state.
    pub fn health(&self) -> Vec<BackendHealth> {
        self.members
            .iter()
            .map(|m| {
                let health = m.health.lock().expect("not poisoned").clone();
                BackendHealth {
                    name: m.generator.name().to_string(),
                    up: !health.down,
                    in_flight: m.in_flight.load(Ordering::Relaxed),
                    concurrency: m.concurrency,
                    models: m.models.clone().unwrap_or_default(),
                    last_error: health.last_error,
                }
            })
            .collect()
    }

    /// Whether some backend that is in can run `kind`.
    pub fn can_run_now(&self, kind: OpKind) -> bool {
        let now = Instant::now();
        self.members
            .iter()
            .any(|m| m.generator.supports(kind) && m.available(now))
    }

    /// Probe the backends until `stop`: those that are out every few seconds (bringing them back
    /// when they answer), those that are in now and then (taking out one that stopped answering).
    pub async fn run_probes(self: Arc<Self>, stop: CancellationToken) {
        // Everyone is probed at once at start, so that a backend that is down from the start is
        // out before a task is sent to it.
        let mut last_up_probe = Instant::now()
            .checked_sub(PROBE_UP_EVERY)
            .unwrap_or_else(Instant::now);
        loop {
            let probe_up = last_up_probe.elapsed() >= PROBE_UP_EVERY;
            if probe_up {
                last_up_probe = Instant::now();
            }
            for member in &self.members {
                let down = member.health.lock().expect("not poisoned").down;
                if !(down || probe_up) {
                    continue;
                }
                match member.generator.probe().await {
                    Ok(()) if down => {
                        member.succeeded();
                        self.changed.notify_waiters();
                    }
                    Ok(()) => {}
                    Err(e) if !down => {
                        let mut health = member.health.lock().expect("not poisoned");
                        health.down = true;
                        health.last_error = Some(e.clone());
                        tracing::warn!(
                            backend = member.generator.name(),
                            error = e,
                            "backend does not answer its probe; taken out"
                        );
                    }
                    Err(e) => {
                        member.health.lock().expect("not poisoned").last_error = Some(e);
                    }
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(PROBE_DOWN_EVERY) => {}
                _ = stop.cancelled() => return,
            }
        }
    }

    /// Why the backends that run `kind` and are out are out (their last errors), as
    /// ` (name: error; ...)`, or nothing when none is out.
    fn why_out(&self, kind: OpKind, model: Option<&str>) -> String {
        let out: Vec<String> = self
            .members
            .iter()
            .filter(|m| m.runs(kind, model))
            .filter_map(|m| {
                let health = m.health.lock().expect("not poisoned");
                health.down.then(|| {
                    format!(
                        "{}: {}",
                        m.generator.name(),
                        health.last_error.as_deref().unwrap_or("down")
                    )
                })
            })
            .collect();
        if out.is_empty() {
            String::new()
        } else {
            format!(" ({})", out.join("; "))
        }
    }

    /// The least loaded backend that runs `kind` on `model`, is in and has a free slot, with its
    /// slot.
    fn pick(
        &self,
        kind: OpKind,
        model: Option<&str>,
    ) -> Option<(Arc<Member>, OwnedSemaphorePermit)> {
        let now = Instant::now();
        let mut candidates: Vec<&Arc<Member>> = self
            .members
            .iter()
            .filter(|m| m.runs(kind, model) && m.available(now))
            .collect();
        candidates.sort_by(|a, b| a.load().total_cmp(&b.load()));
        candidates.into_iter().find_map(|m| {
            let permit = m.slots.clone().try_acquire_owned().ok()?;
            Some((m.clone(), permit))
        })
    }

    async fn run_job(&self, job: &Job, progress: &Progress) -> Result<Product, GenerateError> {
        let kind = job.operation.kind();
        let model = job.extras.settings.model.as_deref();
        if !self.supports_on(kind, model) {
            return Err(GenerateError::Failed(match model {
                Some(model) if self.supports_on(kind, None) => {
                    format!("no configured backend serves the model {model} for {kind}")
                }
                _ => format!("no configured backend can run {kind}"),
            }));
        }
        let deadline = Instant::now() + self.budget;
        let mut tries: u32 = 0;
        let mut last: Option<GenerateError> = None;
        loop {
            // Registered before looking, so that a slot freed meanwhile is not missed.
            let changed = self.changed.notified();
            let Some((member, permit)) = self.pick(kind, model) else {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(last.unwrap_or_else(|| {
                        GenerateError::transient(format!(
                            "no backend that runs {kind} was free within {}{}",
                            crate::net::failure::format_duration(self.budget),
                            self.why_out(kind, model)
                        ))
                    }));
                }
                // A backend resting after a Retry-After comes back without a signal: look again
                // at least every second.
                tokio::select! {
                    _ = tokio::time::timeout(left.min(Duration::from_secs(1)), changed) => {}
                    _ = progress.stopped() => return Err(GenerateError::Canceled),
                }
                continue;
            };
            member.in_flight.fetch_add(1, Ordering::Relaxed);
            let (on_backend, held) = progress.holding(Slot {
                member: member.clone(),
                permit: Some(permit),
                changed: self.changed.clone(),
            });
            let started = Instant::now();
            let result = member.generator.run(job, &on_backend).await;
            let outcome = match &result {
                Ok(_) => "ok",
                Err(GenerateError::Transient { .. }) if !progress.is_stopped() => "retry",
                Err(GenerateError::Transient { .. } | GenerateError::Canceled) => "canceled",
                Err(_) => "error",
            };
            crate::metrics::generation_done(member.generator.name(), outcome, started.elapsed());
            // Given back here if the adapter did not give it back earlier.
            let slot = held.lock().unwrap_or_else(|e| e.into_inner()).take();
            drop(slot);
            match result {
                Ok(product) => {
                    member.succeeded();
                    return Ok(product);
                }
                // A stopped job is not tried again, and says nothing about the backend.
                Err(GenerateError::Canceled) => return Err(GenerateError::Canceled),
                Err(GenerateError::Transient { .. }) if progress.is_stopped() => {
                    return Err(GenerateError::Canceled)
                }
                Err(GenerateError::Transient {
                    message,
                    retry_after,
                }) => {
                    tries += 1;
                    tracing::warn!(
                        backend = member.generator.name(),
                        error = message,
                        tries,
                        "backend failed; trying again"
                    );
                    member.failed(&message, retry_after);
                    let wait = BACKOFF_FIRST
                        .saturating_mul(1 << (tries - 1).min(6))
                        .min(BACKOFF_MOST);
                    last = Some(GenerateError::Transient {
                        message: format!("{} (backend {})", message, member.generator.name()),
                        retry_after,
                    });
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(last.expect("set above"));
                    }
                    // Another backend that is free need not wait for this one's backoff.
                    let elsewhere = self.members.iter().any(|m| {
                        !Arc::ptr_eq(m, &member)
                            && m.runs(kind, model)
                            && m.available(Instant::now())
                    });
                    if !elsewhere {
                        tokio::time::sleep(wait.min(left)).await;
                    }
                }
                Err(other) => {
                    member.succeeded();
                    return Err(other);
                }
            }
        }
    }
}

impl Generator for Pool {
    fn name(&self) -> &str {
        "pool"
    }

    fn supports(&self, kind: OpKind) -> bool {
        self.members.iter().any(|m| m.generator.supports(kind))
    }

    fn run<'a>(
        &'a self,
        job: &'a Job,
        progress: &'a Progress,
    ) -> BoxFuture<'a, Result<Product, GenerateError>> {
        Box::pin(self.run_job(job, progress))
    }
}

#[cfg(test)]
mod tests;
