//! The pool: every configured backend behind one [`Generator`]. A job goes to a healthy backend
//! that runs its operation, the least loaded first (jobs in flight over its `concurrency`), and
//! never more jobs at once than a backend's `concurrency`. Jobs that find no free slot wait in a
//! line ordered by their place (when their task was claimed, which is the fair order of turns):
//! a freed slot goes to the first in line that can run on it, never to whichever waiter wakes
//! first ([`line`]). A transient failure is tried again,
//! with backoff, on this or another backend, until the pool's time budget for the job runs out.
//! A backend that fails `DOWN_AFTER` times in a row is taken out; a probe brings it back.
//! Because easel keeps every image itself, a follow-up runs on any capable backend, not only on
//! the one that made its parent. A task made on a model (`[[models]]`, or a backend's own) goes
//! only to the backends that serve that model.

mod line;
mod member;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;

use line::{Granted, Line};
use member::Member;
pub use member::{BackendHealth, DOWN_AFTER};

use super::job::{GenerateError, Generator, Job, Openings, Product, Progress};
use crate::config::{Catalogue, Live};
use crate::domain::OpKind;

/// How often a backend that is out is probed.
const PROBE_DOWN_EVERY: Duration = Duration::from_secs(5);
/// How often a backend that is in is probed (so one that died idle is found before a job is
/// sent to it).
const PROBE_UP_EVERY: Duration = Duration::from_secs(30);
/// The first and the longest wait before trying a job again after a transient failure.
const BACKOFF_FIRST: Duration = Duration::from_millis(250);
const BACKOFF_MOST: Duration = Duration::from_secs(10);

/// A job's place on a backend: its concurrency permit and its count in flight, given back when
/// dropped (by the adapter's `Progress::backend_done`, or when the job ends).
pub struct Slot {
    member: Arc<Member>,
    permit: Option<OwnedSemaphorePermit>,
    line: Arc<Line>,
    /// When the job took it.
    taken: Instant,
}

impl Slot {
    fn take(member: Arc<Member>, permit: OwnedSemaphorePermit, line: Arc<Line>) -> Slot {
        let taken = Instant::now();
        member.in_flight.fetch_add(1, Ordering::Relaxed);
        member.timing.lock().expect("not poisoned").took(taken);
        Slot {
            member,
            permit: Some(permit),
            line,
            taken,
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.member
            .timing
            .lock()
            .expect("not poisoned")
            .gave_back(self.taken, Instant::now());
        // The permit first: the line hands the freed slot to the first job waiting for it.
        drop(self.permit.take());
        self.member.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.line.dispatch();
    }
}

/// Every backend, as one generator.
pub struct Pool {
    /// The backends and models now; a reload replaces them (see [`Pool::replace`]).
    lineup: Live<Lineup>,
    /// How long one job may keep trying, over every backend, before it fails.
    budget: Duration,
    /// The jobs waiting for a slot, in the order of their places: one line for the pool's
    /// life, whatever the reloads.
    line: Arc<Line>,
}

/// The backends and the models, as one version of the settings gives them.
struct Lineup {
    members: Vec<Arc<Member>>,
    /// The models, and which backends serve each.
    catalogue: Arc<Catalogue>,
}

/// What a reload changed in the pool: the backends added and removed, by name.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Replaced {
    pub added: Vec<String>,
    pub removed: Vec<String>,
}

impl Pool {
    /// A pool of `backends`, each with its concurrency; `budget` bounds the retries of one job.
    pub fn new(backends: Vec<(Arc<dyn Generator>, usize)>, budget: Duration) -> Pool {
        let members: Vec<Arc<Member>> = backends
            .into_iter()
            .map(|(generator, concurrency)| {
                Arc::new(Member::new(
                    generator,
                    concurrency,
                    None,
                    false,
                    String::new(),
                ))
            })
            .collect();
        Pool::of(members, Arc::new(Catalogue::default()), budget)
    }

    fn of(members: Vec<Arc<Member>>, catalogue: Arc<Catalogue>, budget: Duration) -> Pool {
        Pool {
            line: Arc::new(Line::new(members.clone())),
            lineup: Live::new(Lineup { members, catalogue }),
            budget,
        }
    }

    /// The pool with each backend serving the models `catalogue` gives it (by its name).
    pub fn with_catalogue(self, catalogue: Catalogue) -> Pool {
        let members: Vec<Arc<Member>> = self
            .lineup
            .get()
            .members
            .iter()
            .map(|member| {
                let models = catalogue.served_by(member.generator.name());
                Arc::new(member.remade(Some(models), member.fingerprint.clone()))
            })
            .collect();
        Pool::of(members, Arc::new(catalogue), self.budget)
    }

    /// The pool with each backend, in order, marked with what it was built from (its settings),
    /// so that a reload keeps a backend whose settings did not change, its slots, jobs in
    /// flight and health with it.
    pub fn with_fingerprints(self, prints: Vec<String>) -> Pool {
        let lineup = self.lineup.get();
        let members: Vec<Arc<Member>> = lineup
            .members
            .iter()
            .zip(prints.into_iter().map(Some).chain(std::iter::repeat(None)))
            .map(|(member, print)| {
                Arc::new(member.remade(member.models.clone(), print.unwrap_or_default()))
            })
            .collect();
        Pool::of(members, lineup.catalogue.clone(), self.budget)
    }

    /// Take the backends and models of `new` (a pool built from reloaded settings): a backend
    /// whose settings are unchanged stays as it is (its slots, the jobs it runs, its health);
    /// one that is gone gets no new job, and the jobs it runs finish on it; one that is new is
    /// in line at once. Jobs waiting for a slot stay in line at their places.
    pub fn replace(&self, new: Pool) -> Replaced {
        let old = self.lineup.get();
        let incoming = new.lineup.get();
        let mut replaced = Replaced::default();
        let members: Vec<Arc<Member>> = incoming
            .members
            .iter()
            .map(
                |member| match old.members.iter().find(|o| o.same_as(member)) {
                    Some(kept) => kept.clone(),
                    None => {
                        if !member.bookkeeping {
                            replaced.added.push(member.generator.name().to_string());
                        }
                        member.clone()
                    }
                },
            )
            .collect();
        replaced.removed = old
            .members
            .iter()
            .filter(|o| !o.bookkeeping && !members.iter().any(|m| Arc::ptr_eq(m, o)))
            .map(|o| o.generator.name().to_string())
            .collect();
        self.line.set_members(members.clone());
        self.lineup.set(Lineup {
            members,
            catalogue: incoming.catalogue.clone(),
        });
        self.line.dispatch();
        replaced
    }

    /// The pool with a built-in member that makes `upscale-1x` (a crop: the parent's stored
    /// image, as it is) for every model none of whose backends makes it, so that U1..U4 work on
    /// a model served only by, say, ComfyUI. A model with a backend that makes `upscale-1x`
    /// keeps it there: the operator routed it. Its slots are not counted as free ones: a crop
    /// is never what the line waits for.
    pub fn with_crop(self, crop: Arc<dyn Generator>, concurrency: usize) -> Pool {
        let catalogue = self.catalogue();
        let lacking: Vec<String> = catalogue
            .models
            .iter()
            .filter(|m| !self.supports_on(OpKind::Upscale1x, Some(&m.name)))
            .map(|m| m.name.clone())
            .collect();
        if lacking.is_empty() && self.supports(OpKind::Upscale1x) {
            return self;
        }
        let mut members = self.lineup.get().members.clone();
        let fingerprint = format!("crop:{concurrency}");
        let crop = Member::new(crop, concurrency, Some(lacking), true, fingerprint);
        members.push(Arc::new(crop));
        Pool::of(members, catalogue, self.budget)
    }

    /// The slots of the backends that are in that are free now or expected to free within
    /// `within` (a job in flight that has held its slot about as long as the backend's jobs
    /// lately took), and the first later moment at which one more is expected to: how many jobs
    /// a node may claim for now so that each finds its slot ready and none waits long on this
    /// node, out of the other nodes' reach.
    pub fn openings(&self, within: Duration) -> Openings {
        let now = Instant::now();
        let mut openings = Openings::default();
        for member in self.lineup.get().members.iter() {
            if member.bookkeeping || !member.available(now) {
                continue;
            }
            let (soon, next) = member
                .timing
                .lock()
                .expect("not poisoned")
                .freeing(now, within);
            openings.now += member.slots.available_permits();
            openings.soon += soon;
            openings.next = match (openings.next, next) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        openings
    }

    /// The models callers may pick, as the settings give them now.
    pub fn catalogue(&self) -> Arc<Catalogue> {
        self.lineup.get().catalogue.clone()
    }

    /// Whether some backend serving `model` runs `kind` (whether up or not).
    pub fn supports_on(&self, kind: OpKind, model: Option<&str>) -> bool {
        self.lineup
            .get()
            .members
            .iter()
            .any(|m| m.runs(kind, model))
    }

    /// Whether some backend serving `model` is up now.
    pub fn model_up(&self, model: &str) -> bool {
        let now = Instant::now();
        self.lineup.get().members.iter().any(|m| {
            !m.bookkeeping
                && m.models
                    .as_ref()
                    .is_none_or(|served| served.iter().any(|s| s == model))
                && m.available(now)
        })
    }

    /// Whether some backend that is up now runs `kind` on `model`: while none is, a waiting
    /// task of that kind waits for a backend rather than for its turn.
    pub fn runs_now(&self, kind: OpKind, model: Option<&str>) -> bool {
        let now = Instant::now();
        self.lineup
            .get()
            .members
            .iter()
            .any(|m| m.runs(kind, model) && m.available(now))
    }

    /// Each backend's state (the built-in bookkeeping member is no backend).
    pub fn health(&self) -> Vec<BackendHealth> {
        self.lineup
            .get()
            .members
            .iter()
            .filter(|m| !m.bookkeeping)
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
        self.lineup
            .get()
            .members
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
            for member in self.lineup.get().members.iter() {
                let down = member.health.lock().expect("not poisoned").down;
                if !(down || probe_up) {
                    continue;
                }
                match member.generator.probe().await {
                    Ok(()) if down => {
                        member.succeeded();
                        self.line.dispatch();
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
            .lineup
            .get()
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
            // A job tried again comes back to the line at its place, after its backoff (a slot
            // freed meanwhile goes to the next in line rather than stay idle).
            let Granted { member, permit } =
                match self.line.wait(kind, model, progress, deadline).await {
                    Ok(Some(granted)) => granted,
                    Ok(None) => {
                        return Err(last.unwrap_or_else(|| {
                            GenerateError::transient(format!(
                                "no backend that runs {kind} was free within {}{}",
                                crate::net::failure::format_duration(self.budget),
                                self.why_out(kind, model)
                            ))
                        }))
                    }
                    Err(stopped) => return Err(stopped),
                };
            let (on_backend, held) = progress.holding(
                Slot::take(member.clone(), permit, self.line.clone()),
                member.generator.name(),
            );
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
                    progress.retrying(tries, &message);
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
                    let elsewhere = self.lineup.get().members.iter().any(|m| {
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
        self.lineup
            .get()
            .members
            .iter()
            .any(|m| m.generator.supports(kind))
    }

    fn openings(&self, within: Duration) -> Option<Openings> {
        Some(Pool::openings(self, within))
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
