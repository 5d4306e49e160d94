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
#[derive(Clone, Debug, serde::Serialize)]
pub struct BackendHealth {
    pub name: String,
    pub up: bool,
    pub in_flight: usize,
    pub concurrency: usize,
    /// The models it serves.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
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
mod tests {
    use std::sync::atomic::AtomicBool;

    use super::*;
    use crate::domain::{AspectRatio, Operation};

    /// A backend in the test's hands: it takes `delay` per job, counts its jobs and the most it
    /// ran at once, fails transiently while `broken`, and answers probes while not `dead`.
    struct Fake {
        name: String,
        delay: Duration,
        broken: AtomicBool,
        dead: AtomicBool,
        jobs: AtomicUsize,
        running: AtomicUsize,
        most: AtomicUsize,
        kinds: Vec<OpKind>,
        /// Time spent after `backend_done` (decoding, as an adapter does), and the jobs in it.
        after: Duration,
        after_running: AtomicUsize,
        /// Whether a job started on the backend while another was still in its `after` time.
        overlapped: AtomicBool,
    }

    impl Fake {
        fn new(name: &str, delay_ms: u64) -> Arc<Fake> {
            Arc::new(Fake {
                name: name.into(),
                delay: Duration::from_millis(delay_ms),
                broken: AtomicBool::new(false),
                dead: AtomicBool::new(false),
                jobs: AtomicUsize::new(0),
                running: AtomicUsize::new(0),
                most: AtomicUsize::new(0),
                kinds: vec![OpKind::Imagine, OpKind::Shorten],
                after: Duration::ZERO,
                after_running: AtomicUsize::new(0),
                overlapped: AtomicBool::new(false),
            })
        }
    }

    impl Generator for Fake {
        fn name(&self) -> &str {
            &self.name
        }
        fn supports(&self, kind: OpKind) -> bool {
            self.kinds.contains(&kind)
        }
        fn run<'a>(
            &'a self,
            _job: &'a Job,
            progress: &'a Progress,
        ) -> BoxFuture<'a, Result<Product, GenerateError>> {
            Box::pin(async move {
                let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
                self.most.fetch_max(now, Ordering::SeqCst);
                if self.after_running.load(Ordering::SeqCst) > 0 {
                    self.overlapped.store(true, Ordering::SeqCst);
                }
                tokio::time::sleep(self.delay).await;
                self.running.fetch_sub(1, Ordering::SeqCst);
                if self.broken.load(Ordering::SeqCst) {
                    return Err(GenerateError::transient("connection refused"));
                }
                if !self.after.is_zero() {
                    self.after_running.fetch_add(1, Ordering::SeqCst);
                    progress.backend_done();
                    tokio::time::sleep(self.after).await;
                    self.after_running.fetch_sub(1, Ordering::SeqCst);
                }
                self.jobs.fetch_add(1, Ordering::SeqCst);
                Ok(Product::Text(vec![self.name.clone()]))
            })
        }
        fn probe(&self) -> BoxFuture<'_, Result<(), String>> {
            let dead = self.dead.load(Ordering::SeqCst);
            Box::pin(async move {
                if dead {
                    Err("connection refused".into())
                } else {
                    Ok(())
                }
            })
        }
    }

    fn job(operation: Operation) -> Job {
        Job {
            operation,
            prompt: "a test".into(),
            seed: 1,
            aspect: AspectRatio::SQUARE,
            image_size: 64,
            inputs: Vec::new().into(),
            mask: None,
            reservation: None,
            extras: Default::default(),
        }
    }

    fn pool(members: &[(&Arc<Fake>, usize)]) -> Arc<Pool> {
        let members = members
            .iter()
            .map(|(f, n)| ((*f).clone() as Arc<dyn Generator>, *n))
            .collect();
        Arc::new(Pool::new(members, Duration::from_secs(20)))
    }

    async fn run_many(pool: &Arc<Pool>, n: usize, op: Operation) -> Vec<String> {
        let runs: Vec<_> = (0..n)
            .map(|_| {
                let pool = pool.clone();
                let job = job(op.clone());
                tokio::spawn(async move {
                    match pool.run(&job, &Progress::default()).await {
                        Ok(Product::Text(names)) => names[0].clone(),
                        other => panic!("{other:?}"),
                    }
                })
            })
            .collect();
        let mut names = Vec::new();
        for run in runs {
            names.push(run.await.unwrap());
        }
        names
    }

    #[tokio::test]
    async fn concurrency_is_never_exceeded_and_the_faster_backend_takes_more() {
        let fast = Fake::new("fast", 10);
        let slow = Fake::new("slow", 60);
        let pool = pool(&[(&fast, 2), (&slow, 1)]);
        let names = run_many(&pool, 30, Operation::Imagine).await;
        assert_eq!(names.len(), 30);
        assert!(fast.most.load(Ordering::SeqCst) <= 2);
        assert_eq!(slow.most.load(Ordering::SeqCst), 1);
        let (f, s) = (
            fast.jobs.load(Ordering::SeqCst),
            slow.jobs.load(Ordering::SeqCst),
        );
        assert!(f > s * 3, "fast {f}, slow {s}");
        assert!(s > 0, "the slow one works too");
    }

    #[tokio::test]
    async fn a_backend_that_has_answered_takes_the_next_job_while_the_answer_is_decoded() {
        let mut fake = Fake::new("one", 30);
        Arc::get_mut(&mut fake).unwrap().after = Duration::from_millis(300);
        let pool = pool(&[(&fake, 1)]);
        let names = run_many(&pool, 3, Operation::Imagine).await;
        assert_eq!(names.len(), 3);
        assert_eq!(
            fake.most.load(Ordering::SeqCst),
            1,
            "one job at a time on it"
        );
        assert!(
            fake.overlapped.load(Ordering::SeqCst),
            "a job ran on it while another's answer was decoded"
        );
        assert_eq!(pool.health()[0].in_flight, 0);
    }

    #[tokio::test]
    async fn a_failing_backend_is_taken_out_its_jobs_go_elsewhere_and_a_probe_brings_it_back() {
        let good = Fake::new("good", 5);
        let bad = Fake::new("bad", 5);
        bad.broken.store(true, Ordering::SeqCst);
        bad.dead.store(true, Ordering::SeqCst);
        let pool = pool(&[(&bad, 4), (&good, 1)]);
        let names = run_many(&pool, 12, Operation::Imagine).await;
        assert!(names.iter().all(|n| n == "good"), "{names:?}");
        let health = pool.health();
        assert!(!health[0].up, "{health:?}");
        assert_eq!(health[0].last_error.as_deref(), Some("connection refused"));
        // Back up: the probe finds it and jobs reach it again.
        bad.broken.store(false, Ordering::SeqCst);
        bad.dead.store(false, Ordering::SeqCst);
        let stop = CancellationToken::new();
        tokio::spawn(pool.clone().run_probes(stop.clone()));
        let back = async {
            while !pool.health()[0].up {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), back)
            .await
            .expect("the probe brings it back");
        stop.cancel();
        let names = run_many(&pool, 8, Operation::Imagine).await;
        assert!(names.iter().any(|n| n == "bad"), "{names:?}");
    }

    #[tokio::test]
    async fn only_a_backend_that_runs_the_operation_gets_it_and_none_is_a_clear_failure() {
        let mut only_text = Fake::new("text", 1);
        Arc::get_mut(&mut only_text).unwrap().kinds = vec![OpKind::Shorten];
        let images = Fake::new("images", 1);
        let pool = pool(&[(&only_text, 4), (&images, 4)]);
        let names = run_many(&pool, 6, Operation::Imagine).await;
        assert!(names.iter().all(|n| n == "images"), "{names:?}");
        let err = pool
            .run(&job(Operation::Seed), &Progress::default())
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "generation failed: no configured backend can run seed"
        );
    }

    #[tokio::test]
    async fn a_job_fails_transiently_once_its_budget_is_spent() {
        let bad = Fake::new("bad", 1);
        bad.broken.store(true, Ordering::SeqCst);
        let members = vec![(bad.clone() as Arc<dyn Generator>, 1)];
        let pool = Pool::new(members, Duration::from_millis(600));
        let err = pool
            .run(&job(Operation::Imagine), &Progress::default())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, GenerateError::Transient { message, .. } if message.contains("backend bad")),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn a_stopped_job_ends_at_once_as_canceled_and_gives_its_slot_back() {
        // A procedural job paced to take a minute, on the pool's only slot.
        let slow: Arc<dyn Generator> =
            Arc::new(crate::generate::Procedural::new(Duration::from_secs(60)));
        let pool = Arc::new(Pool::new(vec![(slow, 1)], Duration::from_secs(120)));
        let progress = Progress::default();
        let running = {
            let (pool, progress) = (pool.clone(), progress.clone());
            tokio::spawn(async move { pool.run(&job(Operation::Imagine), &progress).await })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            pool.pick(OpKind::Imagine, None).is_none(),
            "the slot is taken"
        );
        progress.stop();
        let stopped = tokio::time::timeout(Duration::from_secs(10), running)
            .await
            .expect("a stopped job ends long before its minute")
            .unwrap();
        assert!(
            matches!(stopped, Err(GenerateError::Canceled)),
            "{stopped:?}"
        );
        assert!(
            pool.pick(OpKind::Imagine, None).is_some(),
            "the slot is free again"
        );
    }
}
