//! Benchmark 4, scale with data: memory of `easel serve` idle and under a fetch load, and fetch
//! latency, with a small store (the baseline) and with large ones.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};
use sqlx::Connection;

use crate::proc::{fresh_dir, Mem, Server};
use crate::report::{count, Row};
use crate::wrk::WrkResult;
use crate::{now_ms, open_conn, Ctx};

/// How many processes' peaks under the fetch load are measured per size (their median is the
/// figure).
const PEAK_SAMPLES: usize = 3;

/// The median of a few samples.
fn median(samples: &[f64]) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[sorted.len() / 2]
}

/// How many task ids the fetch load picks from (at random).
const SAMPLE_IDS: usize = 20_000;

/// Build a store of `n` finished tasks (stored as easel stores them, by `seq`; records of a
/// realistic size) for one account; write a random sample of their ids to `ids`; return an API
/// key.
async fn build_store(data: &Path, n: usize, ids: &Path) -> anyhow::Result<String> {
    let (store, account, db_path) = crate::open_store_with_account(data).await?;
    let key = easel::auth::create_key(store.as_ref(), &account.id, "bench").await?;

    let mut conn = open_conn(&db_path).await?;
    sqlx::query("PRAGMA cache_size = -524288")
        .execute(&mut conn)
        .await?;
    let mut tx = conn.begin().await?;
    // A temporary table first, so that each random folder name is drawn once (SQLite would
    // evaluate the expression again at each use in a plain subquery). It has the length of an id.
    sqlx::query(
        "CREATE TEMP TABLE gen AS
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
         SELECT i,
                lower(hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-4'
                      || substr(hex(randomblob(2)), 2) || '-'
                      || substr('89ab', 1 + abs(random()) % 4, 1)
                      || substr(hex(randomblob(2)), 2) || '-' || hex(randomblob(6))) AS id,
                lower(hex(randomblob(16))) AS tok
         FROM n",
    )
    .bind(n as i64)
    .execute(&mut *tx)
    .await?;
    // The images' blob keys, as the worker stores them (the address is built when read).
    sqlx::query(
        "INSERT INTO tasks (seq, account_id, task_type, status, priority, prompt, aspect_ratio,
             process_mode, seed, percentage, attempts, created_at, started_at, finished_at,
             grid_key, image_keys)
         SELECT i, ?1, 'imagine', 'finished', 1, 'a red sunset over the ocean, number ' || i,
                '1:1', 'fast', abs(random()) % 4294967296, 100, 1, ?2 + i, ?2 + i + 5,
                ?2 + i + 900, id || '/' || tok || '/grid.png',
                json_array(id || '/' || tok || '/0.png', id || '/' || tok || '/1.png',
                           id || '/' || tok || '/2.png', id || '/' || tok || '/3.png')
         FROM gen ORDER BY i",
    )
    .bind(&account.id)
    .bind(now_ms() - 86_400_000)
    .execute(&mut *tx)
    .await?;
    let sample: Vec<i64> = sqlx::query_scalar("SELECT i FROM gen ORDER BY random() LIMIT ?")
        .bind(SAMPLE_IDS as i64)
        .fetch_all(&mut *tx)
        .await?;
    let sample: Vec<String> = sample
        .into_iter()
        .map(|seq| store.task_id(seq).to_string())
        .collect();
    sqlx::query("DROP TABLE gen").execute(&mut *tx).await?;
    tx.commit().await?;
    sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
        .execute(&mut conn)
        .await?;
    conn.close().await?;
    store.close().await;
    std::fs::write(ids, sample.join("\n") + "\n")?;
    Ok(key)
}

struct Measured {
    tasks: usize,
    idle: Mem,
    after: Mem,
    /// VmHWM after the fetch load, of each of `PEAK_SAMPLES` processes (the first is `after`'s).
    peaks: Vec<f64>,
    fetch: Vec<WrkResult>,
    db_mib: f64,
}

/// `easel serve` on `data` with its default settings.
async fn serve(ctx: &Ctx, data: &Path) -> anyhow::Result<Server> {
    Server::start(
        &ctx.easel,
        &["serve"],
        &[
            ("EASEL_DATA_DIR", data.display().to_string()),
            ("EASEL_LISTEN", "127.0.0.1:0".into()),
        ],
        data,
        "easel",
    )
    .await
}

async fn measure(ctx: &Ctx, n: usize) -> anyhow::Result<Measured> {
    let dir = ctx.work.join(format!("scale-{n}"));
    fresh_dir(&dir)?;
    let data = dir.join("data");
    let ids = dir.join("ids.txt");
    println!("  building a store of {n} tasks");
    let built = std::time::Instant::now();
    let key = build_store(&data, n, &ids).await?;
    let db_mib = std::fs::metadata(data.join("easel.db"))?.len() as f64 / 1024.0 / 1024.0;
    println!(
        "  built in {:.1} s ({db_mib:.0} MiB); easel serve: idle, then fetch load",
        built.elapsed().as_secs_f64()
    );
    let server = serve(ctx, &data).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = server.mem()?;
    let env = [
        ("EASEL_BENCH_KEY", key),
        ("EASEL_BENCH_IDS", ids.display().to_string()),
    ];
    let url = server.url("/api/v1/fetch");
    let max_clients = *ctx.plan.fetch_concurrencies.iter().max().unwrap_or(&1);
    ctx.wrk
        .run("fetch.lua", &url, max_clients, ctx.plan.warmup_secs, &env)
        .await?;
    let mut fetch = Vec::new();
    for &clients in &ctx.plan.fetch_concurrencies {
        let r = ctx
            .wrk
            .run("fetch.lua", &url, clients, ctx.plan.run_secs, &env)
            .await?;
        anyhow::ensure!(
            r.requests > 0 && r.errors() == 0,
            "fetch at {n} tasks: {} of {} requests failed",
            r.errors(),
            r.requests
        );
        fetch.push(r);
    }
    let after = server.mem()?;
    server.stop(Duration::from_secs(60)).await?;
    // The peak moves between runs by more than the differences it is compared on (allocator
    // arenas, which threads happen to run what): measure it again on fresh processes under the
    // heaviest load, and compare medians.
    let mut peaks = vec![after.peak_mib];
    for _ in 1..PEAK_SAMPLES {
        let server = serve(ctx, &data).await?;
        let url = server.url("/api/v1/fetch");
        let secs = ctx.plan.warmup_secs + ctx.plan.run_secs;
        let r = ctx
            .wrk
            .run("fetch.lua", &url, max_clients, secs, &env)
            .await?;
        anyhow::ensure!(r.errors() == 0, "fetch at {n} tasks: requests failed");
        peaks.push(server.mem()?.peak_mib);
        server.stop(Duration::from_secs(60)).await?;
    }
    // A million tasks take most of a GiB; keep only the log.
    let _ = std::fs::remove_dir_all(&data).context("removing the store");
    Ok(Measured {
        tasks: n,
        idle,
        after,
        peaks,
        fetch,
        db_mib,
    })
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<(Vec<Row>, Value)> {
    let sizes = &ctx.plan.scale_sizes;
    let mut measured = Vec::new();
    for &n in sizes {
        measured.push(measure(ctx, n).await?);
    }
    let base = &measured[0];
    let largest = measured.last().expect("at least one size").tasks;
    let mut rows = Vec::new();
    for (i, m) in measured.iter().enumerate().skip(1) {
        let is_largest = m.tasks == largest;
        let idle = Row::new(
            "scale",
            format!("memory idle (VmRSS), {} tasks", count(m.tasks)),
            "MiB",
        )
        .value(&[m.idle.rss_mib])
        .baseline(&[base.idle.rss_mib]);
        rows.push(if is_largest {
            idle.goal("< 50 MiB", m.idle.rss_mib < 50.0)
        } else {
            idle
        });
        let peak = Row::new(
            "scale",
            format!(
                "memory peak under fetch load (VmHWM, median of {PEAK_SAMPLES} processes), {} \
                 tasks",
                count(m.tasks)
            ),
            "MiB",
        )
        .value(&[median(&m.peaks)])
        .baseline(&[median(&base.peaks)]);
        // "Not growing with stored tasks": the previous size has a tenth of the tasks or fewer;
        // the peak may differ by 10% (SQLite's page caches are bounded: 4 MiB per connection).
        let previous = &measured[i - 1];
        let bounded = median(&m.peaks) <= median(&previous.peaks) * 1.1;
        rows.push(if is_largest {
            peak.goal(
                format!(
                    "not growing: <= 1.1x the {}-task store's ({})",
                    count(previous.tasks),
                    crate::report::num(median(&previous.peaks))
                ),
                bounded,
            )
        } else {
            peak
        });
        for (r, b) in m.fetch.iter().zip(&base.fetch) {
            let row = Row::new(
                "scale",
                format!(
                    "fetch, {} tasks, {}: p50 / p99",
                    count(m.tasks),
                    crate::report::clients(r.connections)
                ),
                "ms",
            )
            .value(&[r.p50_ms(), r.p99_ms()])
            .baseline(&[b.p50_ms(), b.p99_ms()]);
            rows.push(if is_largest {
                row.goal("p99 < 2 ms", r.p99_ms() < 2.0)
            } else {
                row
            });
        }
    }
    let details: Vec<Value> = measured
        .iter()
        .map(|m| {
            json!({
                "tasks": m.tasks,
                "db_mib": m.db_mib,
                "idle": m.idle,
                "after_fetch_load": m.after,
                "peak_samples_mib": m.peaks,
                "fetch": m.fetch,
            })
        })
        .collect();
    let mut rows_with_idle_base = vec![Row::new(
        "scale",
        format!("memory idle (VmRSS), {} tasks", count(base.tasks)),
        "MiB",
    )
    .value(&[base.idle.rss_mib])
    .goal("< 50 MiB", base.idle.rss_mib < 50.0)];
    rows_with_idle_base.extend(rows);
    Ok((
        rows_with_idle_base,
        json!({ "sizes": details, "sample_ids": SAMPLE_IDS }),
    ))
}
