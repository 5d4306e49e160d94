//! Benchmark `claims`: the store's claims alone, as workers make them (`claim_task`), with no
//! HTTP and no generation: a queue of 100,000 pending tasks held by one account, then by 1,000
//! accounts of 100 each, drained by concurrent claimers, on SQLite and (when its server answers)
//! PostgreSQL. The submits that fill the queue are timed too (the store's `submit`, concurrent
//! callers). Issue 29's goal compares these with the same driver run on the revision before
//! fair sharing (docs/benchmarks.md, "Fair sharing"). On SQLite a third queue holds tasks with
//! 4 KiB of metadata each, and every queue's claims also give the bytes the process wrote per
//! claim (the WAL and the checkpoints): what a task's extras add to each update of its row.

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

/// One queue's shape: this many accounts with this many pending tasks each, with or without
/// [`METADATA_BYTES`] of metadata each.
#[derive(Clone, Copy)]
struct Shape {
    accounts: usize,
    each: usize,
    metadata: bool,
}

/// The metadata of the queue that has some: an object just under the API's 4 KiB limit.
const METADATA_BYTES: usize = 4096 - 64;

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
            metadata: false,
        },
        Shape {
            accounts: 1000,
            each: total / 1000,
            metadata: false,
        },
        Shape {
            accounts: 1,
            each: total,
            metadata: true,
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
            if shape.metadata && store_name != "sqlite" {
                // PostgreSQL's server writes its files, not this process: no bytes to count.
                continue;
            }
            let extra = if shape.metadata { "-metadata" } else { "" };
            let label = format!("{}x{}{extra}", shape.accounts, shape.each);
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
            if store_name == "sqlite" {
                // The submits' WAL into the database first, so that the bytes counted below
                // are the claims' own and not the checkpoint of what filling wrote.
                let pool = crate::open_db(&dir.join(&label).join("easel.db"), false).await?;
                sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
                    .execute(&pool)
                    .await?;
                pool.close().await;
            }
            let written = written_bytes()?;
            let claimed = drain(&store, shape.accounts * shape.each).await?;
            let written_per_claim =
                (written_bytes()? - written) as f64 / (shape.accounts * shape.each) as f64;
            stop.cancel();
            store.close().await;
            if let Some(scratch) = scratch {
                scratch.drop_db().await?;
            }
            println!(
                "  {store_name}, {} accounts x {}{extra}: submits {:.0}/s, claims {:.0}/s, \
                 {:.0} bytes written per claim",
                shape.accounts, shape.each, filled, claimed, written_per_claim
            );
            let mut shape_text = if shape.accounts == 1 {
                format!("1 account with {}", shape.each)
            } else {
                format!("{} accounts with {} each", shape.accounts, shape.each)
            };
            if shape.metadata {
                shape_text.push_str(", each with 4 KiB of metadata,");
            }
            rows.push(
                Row::new(
                    "claims",
                    format!("claims, {store_name}, {shape_text} pending, {CLAIMERS} claimers"),
                    "claims/s",
                )
                .value(&[claimed]),
            );
            if store_name == "sqlite" {
                rows.push(
                    Row::new(
                        "claims",
                        format!(
                            "claims, sqlite, {shape_text} pending: bytes the process wrote per \
                             claim (WAL and checkpoints)"
                        ),
                        "bytes",
                    )
                    .value(&[written_per_claim]),
                );
            }
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
                "metadata_bytes": if shape.metadata { METADATA_BYTES } else { 0 },
                "submits_per_sec": filled, "claims_per_sec": claimed,
                // Only SQLite's writes are this process's own.
                "written_bytes_per_claim": (store_name == "sqlite").then_some(written_per_claim),
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
    // Made once: the submits' rate is the store's, not the making of 4 KiB of JSON.
    let metadata = if shape.metadata {
        let note = "x".repeat(METADATA_BYTES - 16);
        Some(easel::domain::Metadata::parse(json!({ "note": note })).map_err(anyhow::Error::msg)?)
    } else {
        None
    };
    let total = shape.accounts * shape.each;
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut callers = JoinSet::new();
    for _ in 0..SUBMITTERS {
        let (store, keys, next, metadata) =
            (store.clone(), keys.clone(), next.clone(), metadata.clone());
        callers.spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= total {
                    return Ok::<_, anyhow::Error>(());
                }
                let key = &keys[n % keys.len()];
                let mut task = bench_task();
                task.extras.metadata = metadata.clone();
                let done = store.submit(&task, key, &u32::MAX.into()).await?;
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

/// The bytes this process has caused to be written to storage (`/proc/self/io`): with SQLite
/// in-process, its WAL and its checkpoints.
fn written_bytes() -> anyhow::Result<u64> {
    let io = std::fs::read_to_string("/proc/self/io")?;
    io.lines()
        .find_map(|line| line.strip_prefix("write_bytes: "))
        .and_then(|n| n.trim().parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no write_bytes in /proc/self/io"))
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
