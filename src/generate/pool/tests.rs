//! The pool with fake backends: load spreading, concurrency, failing over, probes, stops and
//! the models each backend serves.

use std::sync::atomic::{AtomicBool, AtomicUsize};

use super::*;
use crate::domain::Operation;
use crate::generate::Generation;

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
    /// The prompts of the jobs it took, in the order it took them.
    took: std::sync::Mutex<Vec<String>>,
}

impl Fake {
    fn new(name: &str, delay_ms: u64) -> Arc<Fake> {
        Fake::running(name, delay_ms, vec![OpKind::Imagine, OpKind::Shorten])
    }

    fn running(name: &str, delay_ms: u64, kinds: Vec<OpKind>) -> Arc<Fake> {
        Arc::new(Fake {
            name: name.into(),
            delay: Duration::from_millis(delay_ms),
            broken: AtomicBool::new(false),
            dead: AtomicBool::new(false),
            jobs: AtomicUsize::new(0),
            running: AtomicUsize::new(0),
            most: AtomicUsize::new(0),
            kinds,
            after: Duration::ZERO,
            after_running: AtomicUsize::new(0),
            overlapped: AtomicBool::new(false),
            took: Default::default(),
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
    fn run<'a>(&'a self, job: &'a Job, progress: &'a Progress) -> Generation<'a> {
        Box::pin(async move {
            self.took.lock().unwrap().push(job.prompt.clone());
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
    Job::for_tests(operation, "a test", 1)
}

/// The pool's members: each fake with its slots.
fn members(fakes: &[(&Arc<Fake>, usize)]) -> Vec<(Arc<dyn Generator>, usize)> {
    fakes
        .iter()
        .map(|(f, n)| ((*f).clone() as Arc<dyn Generator>, *n))
        .collect()
}

fn pool(fakes: &[(&Arc<Fake>, usize)]) -> Arc<Pool> {
    Arc::new(Pool::new(members(fakes), Duration::from_secs(20)))
}

/// The catalogue of `models`, each `(model, backend)` served by its one backend (procedural, as
/// configured; the pool's members are the fakes of those names).
fn catalogue(models: &[(&str, &str)]) -> Catalogue {
    let backends: Vec<crate::config::BackendConfig> = models
        .iter()
        .map(|(_, b)| serde_json::from_value(serde_json::json!({"name": b, "kind": "procedural"})))
        .collect::<Result<_, _>>()
        .unwrap();
    let models: Vec<crate::config::ModelConfig> = models
        .iter()
        .map(|(m, b)| serde_json::from_value(serde_json::json!({"name": m, "backends": [b]})))
        .collect::<Result<_, _>>()
        .unwrap();
    Catalogue::build(&models, &backends).unwrap()
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
async fn a_models_jobs_go_only_to_its_backends() {
    let (a, b) = (Fake::new("a", 1), Fake::new("b", 1));
    let catalogue = catalogue(&[("one", "a"), ("two", "b")]);
    let pool =
        Pool::new(members(&[(&a, 4), (&b, 4)]), Duration::from_secs(5)).with_catalogue(catalogue);
    assert_eq!(pool.health()[1].models, ["two"]);
    for (model, backend) in [("one", "a"), ("two", "b")] {
        let mut job = job(Operation::Imagine);
        job.extras.settings.model = Some(model.into());
        for _ in 0..6 {
            match pool.run(&job, &Progress::default()).await {
                Ok(Product::Text(names)) => assert_eq!(names[0], backend, "{model}"),
                other => panic!("{other:?}"),
            }
        }
    }
    let mut job = job(Operation::Imagine);
    job.extras.settings.model = Some("gone".into());
    let err = pool.run(&job, &Progress::default()).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "generation failed: no configured backend serves the model gone for imagine"
    );
    assert!(pool.model_up("one") && !pool.model_up("gone"));
}

#[tokio::test]
async fn a_job_fails_transiently_once_its_budget_is_spent() {
    let bad = Fake::new("bad", 1);
    bad.broken.store(true, Ordering::SeqCst);
    let members = members(&[(&bad, 1)]);
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
    assert_eq!(pool.openings(Duration::ZERO).now, 0, "the slot is taken");
    progress.stop();
    let stopped = tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .expect("a stopped job ends long before its minute")
        .unwrap();
    assert!(
        matches!(stopped, Err(GenerateError::Canceled)),
        "{stopped:?}"
    );
    assert_eq!(
        pool.openings(Duration::ZERO).now,
        1,
        "the slot is free again"
    );
}

/// Run a job named `prompt` placed in line at `place`.
fn spawn_placed(
    pool: &Arc<Pool>,
    prompt: &str,
    place: std::time::Instant,
) -> tokio::task::JoinHandle<Result<Product, GenerateError>> {
    let pool = pool.clone();
    let mut job = job(Operation::Imagine);
    job.prompt = prompt.into();
    tokio::spawn(async move { pool.run(&job, &Progress::in_line_since(place)).await })
}

#[tokio::test]
async fn a_freed_slot_goes_to_the_first_place_in_line_not_the_first_to_ask() {
    let one = Fake::new("one", 30);
    let pool = pool(&[(&one, 1)]);
    let base = std::time::Instant::now();
    let first = spawn_placed(&pool, "0", base);
    tokio::time::sleep(Duration::from_millis(10)).await;
    // They ask in this order, but were placed 1 to 6.
    let mut waiting = Vec::new();
    for n in [3u64, 1, 5, 2, 6, 4] {
        waiting.push(spawn_placed(
            &pool,
            &n.to_string(),
            base + Duration::from_millis(n),
        ));
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    first.await.unwrap().unwrap();
    for w in waiting {
        w.await.unwrap().unwrap();
    }
    assert_eq!(
        *one.took.lock().unwrap(),
        ["0", "1", "2", "3", "4", "5", "6"]
    );
    assert_eq!(pool.openings(Duration::ZERO).now, 1);
}

#[tokio::test]
async fn a_waiter_no_free_slot_suits_does_not_hold_back_one_behind_it() {
    let busy = Fake::new("busy", 200);
    // `busy` runs imagine and shorten, `free` only shorten: an imagine waiting for `busy`
    // must not stop a shorten placed after it from taking `free`.
    let free = Fake::running("free", 10, vec![OpKind::Shorten]);
    let pool = pool(&[(&busy, 1), (&free, 1)]);
    let base = std::time::Instant::now();
    let holding = spawn_placed(&pool, "holding", base);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let waiting = spawn_placed(&pool, "waiting", base + Duration::from_millis(1));
    let shorten = {
        let pool = pool.clone();
        let mut job = job(Operation::Shorten);
        job.prompt = "behind".into();
        let progress = Progress::in_line_since(base + Duration::from_millis(2));
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            pool.run(&job, &progress).await.unwrap();
            started.elapsed()
        })
    };
    let took = shorten.await.unwrap();
    assert!(
        took < Duration::from_millis(150),
        "the shorten ran at once on its free backend, took {took:?}"
    );
    holding.await.unwrap().unwrap();
    waiting.await.unwrap().unwrap();
    assert_eq!(*busy.took.lock().unwrap(), ["holding", "waiting"]);
}

#[tokio::test]
async fn a_job_tried_again_says_it_is_retrying_until_a_backend_takes_it_again() {
    let flaky = Fake::new("flaky", 20);
    flaky.broken.store(true, Ordering::SeqCst);
    let pool = pool(&[(&flaky, 1)]);
    let progress = Progress::in_line_since(std::time::Instant::now());
    let run = {
        let (pool, progress) = (pool.clone(), progress.clone());
        tokio::spawn(async move { pool.run(&job(Operation::Imagine), &progress).await })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while progress.retry_state().is_none() {
        assert!(std::time::Instant::now() < deadline, "no retry reported");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let retrying = progress.retry_state().unwrap();
    assert_eq!(retrying.attempt, 1);
    assert!(
        retrying.error.contains("connection refused"),
        "{retrying:?}"
    );
    flaky.broken.store(false, Ordering::SeqCst);
    run.await.unwrap().unwrap();
    assert!(
        progress.retry_state().is_none(),
        "cleared once a backend took it again"
    );
}

#[tokio::test]
async fn upscale_1x_is_a_crop_on_a_model_whose_backends_do_not_make_it() {
    let comfy = Fake::running("comfy", 1, vec![OpKind::Imagine]);
    let routed = Fake::running("routed", 1, vec![OpKind::Imagine, OpKind::Upscale1x]);
    let catalogue = catalogue(&[("only-comfy", "comfy"), ("has-its-own", "routed")]);
    let members = members(&[(&comfy, 1), (&routed, 1)]);
    let crop = Fake::running("crop", 1, vec![OpKind::Upscale1x]);
    let pool = Pool::new(members, Duration::from_secs(5))
        .with_catalogue(catalogue)
        .with_crop(crop.clone(), 2);
    assert!(pool.supports_on(OpKind::Upscale1x, Some("only-comfy")));
    assert!(!pool.supports_on(OpKind::Variations, Some("only-comfy")));
    // The crop is no backend: not listed, and its slots are not free ones.
    assert_eq!(pool.health().len(), 2);
    assert_eq!(pool.openings(Duration::ZERO).now, 2);
    let source = crate::domain::operation::StoredImage {
        key: "t/f/0.png".into(),
        width: 8,
        height: 8,
    };
    for (model, backend) in [("only-comfy", "crop"), ("has-its-own", "routed")] {
        let mut job = job(Operation::Upscale1x {
            index: 1,
            source: source.clone(),
        });
        job.extras.settings.model = Some(model.into());
        match pool.run(&job, &Progress::default()).await {
            Ok(Product::Text(names)) => assert_eq!(names[0], backend, "{model}"),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn a_slot_is_expected_to_free_a_typical_jobs_time_after_it_was_taken() {
    let mut timing = member::Timing::default();
    let t0 = Instant::now();
    timing.took(t0);
    // No job has ended yet: nothing is expected.
    assert_eq!(
        timing.freeing(t0 + Duration::from_secs(10), Duration::ZERO),
        (0, None)
    );
    timing.gave_back(t0, t0 + Duration::from_secs(4));
    let t1 = t0 + Duration::from_secs(5);
    timing.took(t1);
    let within = Duration::from_millis(50);
    // Four seconds is typical now: the slot taken at t1 is expected back at t1 + 4 s, about to
    // free from 50 ms before.
    assert_eq!(
        timing.freeing(t1 + Duration::from_secs(1), within),
        (0, Some(t1 + Duration::from_millis(3950)))
    );
    assert_eq!(
        timing.freeing(t1 + Duration::from_millis(3960), within),
        (1, None)
    );
    // A job that runs past its time stays expected at any moment.
    assert_eq!(
        timing.freeing(t1 + Duration::from_secs(9), within),
        (1, None)
    );
    // Later jobs move the typical time a fifth of the way to theirs.
    timing.gave_back(t1, t1 + Duration::from_secs(9));
    let t2 = t1 + Duration::from_secs(10);
    timing.took(t2);
    assert_eq!(
        timing.freeing(t2, Duration::ZERO),
        (0, Some(t2 + Duration::from_secs(5)))
    );
}

#[tokio::test]
async fn openings_count_the_free_slots_and_those_about_to_free() {
    let fake = Fake::new("gpu", 300);
    let pool = pool(&[(&fake, 2)]);
    assert_eq!(
        pool.openings(Duration::from_millis(50)),
        Openings {
            now: 2,
            soon: 0,
            next: None
        }
    );
    // One job to learn the backend's time, then one running.
    pool.run(&job(Operation::Imagine), &Progress::default())
        .await
        .unwrap();
    let running = {
        let pool = pool.clone();
        tokio::spawn(async move {
            pool.run(&job(Operation::Imagine), &Progress::default())
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let early = pool.openings(Duration::from_millis(50));
    assert_eq!((early.now, early.soon), (1, 0), "{early:?}");
    let next = early.next.expect("the running job's expected end");
    let until = next.saturating_duration_since(Instant::now());
    assert!(until > Duration::from_millis(50), "{until:?}");
    assert!(until < Duration::from_millis(250), "{until:?}");
    tokio::time::sleep_until((next + Duration::from_millis(5)).into()).await;
    let late = pool.openings(Duration::from_millis(50));
    assert_eq!((late.now, late.soon, late.next), (1, 1, None), "{late:?}");
    running.await.unwrap().unwrap();
    assert_eq!(pool.openings(Duration::from_millis(50)).count(), 2);
}
