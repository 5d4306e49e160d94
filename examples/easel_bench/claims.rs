//! Benchmark `claims`: the store's claims alone, as workers make them (`claim_task`), with no
//! HTTP and no generation: a queue of 100,000 pending tasks held by one account, then by 1,000
//! accounts of 100 each, drained by concurrent claimers, on SQLite and (when its server answers)
//! PostgreSQL. The submits that fill the queue are timed too (the store's `submit`, concurrent
//! callers). Issue 29's goal compares these with the same driver run on the revision before
//! fair sharing (docs/benchmarks.md, "Fair sharing").

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use easel::store::{SharedStore, Submitted};
use serde_json::{json, Value};
use tokio::task::JoinSet;

use crate::postgres::Scratch;
use crate::proc::fresh_dir;
use crate::report::Row;
use crate::store_alone::bench_task;
use crate::Ctx;

/// Concurrent callers of `submit` while filling, and of `claim_task` while draining.
const SUBMITTERS: usize = 16;
const CLAIMERS: usize = 8;

/// One queue's shape: this many accounts with this many pending tasks each.
#[derive(Clone, Copy)]
struct Shape {
    accounts: usize,
    each: usize,
}

pub async fn run(ctx: &Ctx, pg: Option<&str>) -> anyhow::Result<(Vec<Row>, Value)> {
    let dir = ctx.work.join("claims");
    fresh_dir(&dir)?;
    let total = if ctx.plan.run_secs < 10 {
        20_000
    } else {
        100_000
    };
    let shapes = [
        Shape {
            accounts: 1,
            each: total,
        },
        Shape {
            accounts: 1000,
            each: total / 1000,
        },
    ];
    let mut rows = Vec::new();
    let mut details = Vec::new();
    let stores: Vec<&str> = if pg.is_some() {
        vec!["sqlite", "postgres"]
    } else {
        println!("  PostgreSQL does not answer: SQLite only");
        vec!["sqlite"]
    };
    for store_name in stores {
        for shape in shapes {
            let label = format!("{}x{}", shape.accounts, shape.each);
            let stop = tokio_util::sync::CancellationToken::new();
            let (store, scratch) = match store_name {
                "sqlite" => {
                    let data = dir.join(&label);
                    std::fs::create_dir_all(&data)?;
                    let store = open_sqlite(&data).await?;
                    // Its checkpointer, as `easel serve` runs it.
                    tokio::spawn({
                        let (store, stop) = (store.clone(), stop.clone());
                        async move { store.run_background(stop).await }
                    });
                    (store, None)
                }
                _ => {
                    let scratch = Scratch::create(pg.expect("checked"), "claims").await?;
                    let store = open_postgres(&scratch.url).await?;
                    (store, Some(scratch))
                }
            };
            let filled = fill(&store, shape).await?;
            let claimed = drain(&store, shape.accounts * shape.each).await?;
            stop.cancel();
            store.close().await;
            if let Some(scratch) = scratch {
                scratch.drop_db().await?;
            }
            println!(
                "  {store_name}, {} accounts x {}: submits {:.0}/s, claims {:.0}/s",
                shape.accounts, shape.each, filled, claimed
            );
            let shape_text = if shape.accounts == 1 {
                format!("1 account with {}", shape.each)
            } else {
                format!("{} accounts with {} each", shape.accounts, shape.each)
            };
            rows.push(
                Row::new(
                    "claims",
                    format!("claims, {store_name}, {shape_text} pending, {CLAIMERS} claimers"),
                    "claims/s",
                )
                .value(&[claimed]),
            );
            rows.push(
                Row::new(
                    "claims",
                    format!("store submits filling it, {store_name}, {SUBMITTERS} callers"),
                    "submits/s",
                )
                .value(&[filled]),
            );
            details.push(json!({
                "store": store_name, "accounts": shape.accounts, "each": shape.each,
                "submits_per_sec": filled, "claims_per_sec": claimed,
            }));
        }
    }
    Ok((rows, json!({ "runs": details })))
}

async fn open_sqlite(data: &Path) -> anyhow::Result<SharedStore> {
    let url = format!("sqlite://{}", data.join("easel.db").display());
    Ok(Arc::new(
        easel::store::sqlite::SqliteStore::open(&url, true).await?,
    ))
}

async fn open_postgres(url: &str) -> anyhow::Result<SharedStore> {
    let options = easel::store::postgres::PgOptions {
        max_connections: 24,
        acquire_timeout: Duration::from_secs(30),
    };
    Ok(Arc::new(
        easel::store::postgres::PgStore::open(url, &options).await?,
    ))
}

/// Queue `shape`'s tasks, the accounts' submits interleaved, from concurrent callers; submits
/// per second.
async fn fill(store: &SharedStore, shape: Shape) -> anyhow::Result<f64> {
    let mut keys = Vec::new();
    for n in 0..shape.accounts {
        let account = store
            .ensure_account(
                &format!("bench{n}@example.com"),
                &easel::webhooks::signing::generate_secret(),
            )
            .await?;
        let key = easel::auth::create_key(store.as_ref(), &account.id, "bench").await?;
        keys.push(easel::auth::hash_key(&key));
    }
    let keys = Arc::new(keys);
    let total = shape.accounts * shape.each;
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut callers = JoinSet::new();
    for _ in 0..SUBMITTERS {
        let (store, keys, next) = (store.clone(), keys.clone(), next.clone());
        callers.spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= total {
                    return Ok::<_, anyhow::Error>(());
                }
                let key = &keys[n % keys.len()];
                let done = store.submit(&bench_task(), key, &u32::MAX.into()).await?;
                anyhow::ensure!(
                    matches!(done, Submitted::Queued { .. }),
                    "the store refused a submit: {done:?}"
                );
            }
        });
    }
    while let Some(done) = callers.join_next().await {
        done??;
    }
    Ok(total as f64 / started.elapsed().as_secs_f64())
}

/// Claim `total` tasks from concurrent claimers; claims per second.
async fn drain(store: &SharedStore, total: usize) -> anyhow::Result<f64> {
    let claimed = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut claimers = JoinSet::new();
    for n in 0..CLAIMERS {
        let (store, claimed) = (store.clone(), claimed.clone());
        claimers.spawn(async move {
            let owner = format!("bench-{n}");
            while store.claim_task(&owner, 600_000).await?.is_some() {
                claimed.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<_, anyhow::Error>(())
        });
    }
    while let Some(done) = claimers.join_next().await {
        done??;
    }
    let secs = started.elapsed().as_secs_f64();
    let claimed = claimed.load(Ordering::Relaxed);
    anyhow::ensure!(claimed == total, "claimed {claimed} of {total} tasks");
    Ok(total as f64 / secs)
}
