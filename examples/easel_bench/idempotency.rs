//! Benchmark `idempotency`: durable `POST /api/v1/imagine` on the SQLite store with workers
//! stopped, each request with an `Idempotency-Key` of its own, against the same submits without
//! one, on the same server, back to back. Both are made by bench/wrk/submit_idempotent.lua, so
//! that wrk spends the same on each request. The goal: keyed submits at 0.8x or more.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};

use crate::proc::{cpu_secs, fresh_dir, Server};
use crate::report::{clients as clients_text, Row};
use crate::submit::check;
use crate::wrk::WrkResult;
use crate::Ctx;

/// The concurrency at which the goal applies, as for `submit`.
const GOAL_CLIENTS: usize = 64;
/// Runs of each kind per concurrency, alternated (plain, keyed, keyed, plain, ...) so that a
/// drift of the machine's speed over the runs weighs on both alike.
const ROUNDS: usize = 2;

/// Keys a server holds already in the second measurement at the goal's concurrency: a year of
/// a busy account's keys, so that each new key goes into a large index, not a fresh one.
const HELD_KEYS: usize = 1_000_000;

pub async fn run(ctx: &Ctx) -> anyhow::Result<(Vec<Row>, Value)> {
    let dir = ctx.work.join("idempotency");
    fresh_dir(&dir)?;
    let mut rows = Vec::new();
    let mut details = Vec::new();
    let cases = ctx
        .plan
        .concurrencies
        .iter()
        .filter(|&&c| c > 1)
        .map(|&c| (c, 0))
        .chain([(GOAL_CLIENTS, HELD_KEYS)]);
    for (clients, held) in cases {
        let data = dir.join(format!("c{clients}-h{held}"));
        let (keyed_timed, plain_timed) = measure(ctx, &data, clients, held).await?;
        let ((keyed, keyed_cpu), (plain, plain_cpu)) = (split(keyed_timed), split(plain_timed));
        let _ = std::fs::remove_dir_all(&data);
        let holding = if held == 0 {
            "a fresh server".to_string()
        } else {
            format!("a server holding {} keys", crate::report::count(held))
        };
        let (k, p) = (rate(&keyed), rate(&plain));
        let mut row = Row::new(
            "idempotency",
            format!(
                "submit with a unique Idempotency-Key per request, sync=full, {}, {holding}: \
                 requests/s (baseline: the same submits without a key, same server)",
                clients_text(clients)
            ),
            "req/s",
        )
        .value(&[k])
        .baseline(&[p]);
        if clients == GOAL_CLIENTS {
            let met = row.ratio.is_some_and(|r| r >= 0.8);
            row = row.goal(">= 0.8x without keys", met);
        }
        rows.push(row);
        rows.push(
            Row::new(
                "idempotency",
                format!(
                    "submit with a unique Idempotency-Key per request, sync=full, {}, \
                     {holding}: p50 / p99",
                    clients_text(clients)
                ),
                "ms",
            )
            .value(&[
                median(&keyed, WrkResult::p50_ms),
                median(&keyed, WrkResult::p99_ms),
            ])
            .baseline(&[
                median(&plain, WrkResult::p50_ms),
                median(&plain, WrkResult::p99_ms),
            ]),
        );
        rows.push(
            Row::new(
                "idempotency",
                format!(
                    "submit with a unique Idempotency-Key per request, sync=full, {}, \
                     {holding}: server CPU per request",
                    clients_text(clients)
                ),
                "ms",
            )
            .value(&[keyed_cpu])
            .baseline(&[plain_cpu]),
        );
        details.push(json!({
            "clients": clients,
            "held_keys": held,
            "keyed": keyed,
            "plain": plain,
            "server_cpu_ms_per_request": { "keyed": keyed_cpu, "plain": plain_cpu },
        }));
    }
    Ok((rows, Value::Array(details)))
}

/// A wrk run and the server CPU time (seconds) it took.
type Timed = (WrkResult, f64);

/// The runs alone, and the server CPU per request over them (ms).
fn split(timed: Vec<Timed>) -> (Vec<WrkResult>, f64) {
    let cpu: f64 = timed.iter().map(|(_, cpu)| cpu).sum();
    let runs: Vec<WrkResult> = timed.into_iter().map(|(r, _)| r).collect();
    let per_request = crate::alternated::cpu_per_request(cpu, &runs);
    (runs, per_request)
}

/// Keyed and plain runs at `clients` against one server in `data` that holds `held` keys of its
/// account (written straight into its database between a first start and the measured one).
async fn measure(
    ctx: &Ctx,
    data: &Path,
    clients: usize,
    held: usize,
) -> anyhow::Result<(Vec<Timed>, Vec<Timed>)> {
    let (secs, warmup) = (ctx.plan.run_secs, ctx.plan.warmup_secs);
    let env = [
        ("EASEL_DATA_DIR", data.display().to_string()),
        ("EASEL_LISTEN", "127.0.0.1:0".into()),
        ("EASEL_WORKERS", "0".into()),
        ("EASEL_PLANS__SELF-HOSTED__MAX_PENDING", "4000000000".into()),
    ];
    let mut server = Server::start(&ctx.easel, &["serve"], &env, data, "easel").await?;
    let key = server.key.clone().context("easel printed no first key")?;
    if held > 0 {
        server.stop(Duration::from_secs(60)).await?;
        hold_keys(&data.join("easel.db"), held).await?;
        server = Server::start(&ctx.easel, &["serve"], &env, data, "easel").await?;
    }
    let url = server.url("/api/v1/imagine");
    let plain_env = [("EASEL_BENCH_KEY", key.clone())];
    let keyed_env = |run: &str| {
        [
            ("EASEL_BENCH_KEY", key.clone()),
            (
                "EASEL_BENCH_IDEMPOTENCY_PREFIX",
                format!("{run}-{}", uuid::Uuid::new_v4().simple()),
            ),
        ]
    };
    println!(
        "  {clients} clients, {held} keys held: without and with keys, {ROUNDS} runs of each \
         ({secs} s each)"
    );
    ctx.wrk
        .run("submit_idempotent.lua", &url, clients, warmup, &plain_env)
        .await?;
    ctx.wrk
        .run(
            "submit_idempotent.lua",
            &url,
            clients,
            warmup,
            &keyed_env("warmup"),
        )
        .await?;
    let mut plain = Vec::new();
    let mut keyed = Vec::new();
    for round in 0..ROUNDS {
        for with_keys in [round % 2 == 1, round % 2 == 0] {
            let (env, what, runs) = if with_keys {
                let env = keyed_env(&format!("r{round}"));
                (env.to_vec(), "easel with idempotency keys", &mut keyed)
            } else {
                (plain_env.to_vec(), "easel", &mut plain)
            };
            let cpu = cpu_secs(Some(server.pid()))?;
            let r = ctx
                .wrk
                .run("submit_idempotent.lua", &url, clients, secs, &env)
                .await?;
            let used = cpu_secs(Some(server.pid()))? - cpu;
            check(&r, what)?;
            runs.push((r, used));
        }
    }
    server.stop(Duration::from_secs(60)).await?;
    Ok((keyed, plain))
}

/// Write `n` unexpired keys of the database's first account, as many keyed submits would have
/// left them (random fingerprints, a task id and a small answer each).
async fn hold_keys(db: &Path, n: usize) -> anyhow::Result<()> {
    let pool = crate::open_db(db, false).await?;
    let now = chrono::Utc::now().timestamp_millis();
    sqlx::query(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
         INSERT INTO idempotency_keys (account_id, idempotency_key, fingerprint, task_id, status,
                                       body, created_at, expires_at)
         SELECT (SELECT id FROM accounts ORDER BY created_at LIMIT 1),
                'held-' || hex(randomblob(8)) || '-' || i, randomblob(32),
                lower(hex(randomblob(16))), 200,
                '{\"task_id\":\"' || lower(hex(randomblob(16))) || '\",\"status\":\"pending\"}',
                ?2, ?2 + 86400000 FROM n",
    )
    .bind(n as i64)
    .bind(now)
    .execute(&pool)
    .await
    .context("writing the held keys")?;
    pool.close().await;
    Ok(())
}

/// Requests per second over all of the runs together.
pub fn rate(runs: &[WrkResult]) -> f64 {
    let requests: u64 = runs.iter().map(|r| r.requests).sum();
    let us: u64 = runs.iter().map(|r| r.duration_us).sum();
    requests as f64 / (us as f64 / 1e6)
}

/// The middle of the runs' figures (the mean of the middle two for an even count).
fn median(runs: &[WrkResult], figure: fn(&WrkResult) -> f64) -> f64 {
    let mut v: Vec<f64> = runs.iter().map(figure).collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}
