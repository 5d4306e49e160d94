//! easel's store driven in-process, without HTTP: the same calls `easel serve` makes for a submit
//! (`Store::insert_task`) and for a webhook delivery (`claim_due_deliveries`, then
//! `record_attempt`), from as many concurrent callers as the HTTP benchmarks have clients. The
//! gap between these rates and easel's over HTTP is what the HTTP side costs; the gap between
//! these and the bare baselines is what the store costs.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use easel::store::sqlite::SqliteStore;
use easel::store::{AttemptRecord, NewTask, SharedStore, Submitted};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// Requests per second and latency percentiles of one run.
pub struct Rates {
    pub per_sec: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// Open the store in `data` as `easel serve` does: its sync mode, its checkpointer running.
async fn open(data: &Path, mode: &str) -> anyhow::Result<(SharedStore, CancellationToken)> {
    std::fs::create_dir_all(data)?;
    let url = format!("sqlite://{}", data.join("easel.db").display());
    let store: SharedStore = Arc::new(SqliteStore::open(&url, mode == "full").await?);
    let stop = CancellationToken::new();
    tokio::spawn({
        let store = store.clone();
        let stop = stop.clone();
        async move { store.run_background(stop).await }
    });
    Ok((store, stop))
}

/// `clients` callers submitting the benchmark's body (`bench/wrk/submit.lua`) in a loop into a
/// fresh store in `data`: `warmup`, then `secs` measured.
pub async fn submits(
    data: &Path,
    mode: &str,
    clients: usize,
    warmup: u64,
    secs: u64,
) -> anyhow::Result<Rates> {
    let (store, stop) = open(data, mode).await?;
    let account = store
        .ensure_account(
            easel::FIRST_ACCOUNT_EMAIL,
            &easel::webhooks::signing::generate_secret(),
        )
        .await?;
    let key = easel::auth::create_key(store.as_ref(), &account.id, "bench").await?;
    let key_hash = easel::auth::hash_key(&key);
    let started = Instant::now();
    let measure_from = started + Duration::from_secs(warmup);
    let end = measure_from + Duration::from_secs(secs);
    let callers: Vec<_> = (0..clients)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                loop {
                    let sent = Instant::now();
                    if sent >= end {
                        return Ok::<_, anyhow::Error>(latencies);
                    }
                    let task = bench_task();
                    let done = store.submit(&task, &key_hash, &u32::MAX.into()).await?;
                    anyhow::ensure!(
                        matches!(done, Submitted::Queued { .. }),
                        "the store refused a submit: {done:?}"
                    );
                    if sent >= measure_from {
                        latencies.push(sent.elapsed().as_secs_f64() * 1e3);
                    }
                }
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for caller in callers {
        latencies.extend(caller.await??);
    }
    stop.cancel();
    store.close().await;
    anyhow::ensure!(!latencies.is_empty(), "no submit completed");
    latencies.sort_by(f64::total_cmp);
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    Ok(Rates {
        per_sec: latencies.len() as f64 / secs as f64,
        p50_ms: at(0.50),
        p99_ms: at(0.99),
    })
}

/// Drain the `n` due deliveries prefilled in `data` as the dispatcher does, without sending
/// anything: claims of `concurrency` (as many as the dispatcher's queue holds; it claims once half
/// of it is free, so this is the store's best case), and each claimed delivery's attempt recorded
/// as delivered by a task of its own (records share group commits), with at most three times
/// `concurrency` claimed and not yet recorded (the most the dispatcher holds). Returns deliveries
/// per second.
pub async fn deliveries(
    data: &Path,
    mode: &str,
    n: usize,
    concurrency: usize,
) -> anyhow::Result<f64> {
    let (store, stop) = open(data, mode).await?;
    let claim = concurrency.max(1);
    let held = Arc::new(Semaphore::new(3 * concurrency));
    let started = Instant::now();
    let mut records = JoinSet::new();
    loop {
        let room = held.clone().acquire_many_owned(claim as u32).await?;
        let due = store.claim_due_deliveries(claim as i64, 60_000).await?;
        if due.is_empty() {
            break;
        }
        let mut room = room;
        for d in due {
            let one = room.split(1).expect("a permit per claimed delivery");
            let store = store.clone();
            records.spawn(async move {
                let record = AttemptRecord {
                    attempted_at: easel::store::now_ms(),
                    duration_ms: 0,
                    status_code: Some(200),
                    error: None,
                    delivered: true,
                    next_attempt_at: None,
                    first_failed_at: None,
                };
                let done = store.record_attempt(&d, &record).await;
                drop(one);
                done
            });
        }
    }
    let mut recorded = 0;
    while let Some(done) = records.join_next().await {
        anyhow::ensure!(done??, "an attempt was not recorded");
        recorded += 1;
    }
    let secs = started.elapsed().as_secs_f64();
    stop.cancel();
    store.close().await;
    anyhow::ensure!(
        recorded == n,
        "the store alone recorded {recorded} of {n} deliveries"
    );
    Ok(n as f64 / secs)
}

/// The benchmark's task (`bench/wrk/submit.lua`'s body), as the store takes it.
pub fn bench_task() -> NewTask {
    NewTask {
        operation: easel::domain::Operation::Imagine,
        prompt: "a red sunset over the ocean, in soft watercolour".into(),
        aspect_ratio: easel::domain::AspectRatio {
            width: 16,
            height: 9,
        },
        process_mode: easel::domain::ProcessMode::Fast,
        priority: 1,
        seed: i64::from(rand::random::<u32>()),
        parent_seq: None,
        webhook_url: None,
        webhook_secret: None,
        cost: 0,
        idempotency: None,
        extras: Default::default(),
    }
}
