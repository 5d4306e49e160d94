//! Benchmark `idempotency`: durable `POST /api/v1/imagine` on the SQLite store with workers
//! stopped, each request with an `Idempotency-Key` of its own, against the same submits without
//! one, on the same server, back to back. Both are made by bench/wrk/submit_idempotent.lua, so
//! that wrk spends the same on each request. The goal: keyed submits at 0.8x or more.

use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};

use crate::proc::{fresh_dir, Server};
use crate::report::{clients as clients_text, Row};
use crate::submit::check;
use crate::wrk::WrkResult;
use crate::Ctx;

/// The concurrency at which the goal applies, as for `submit`.
const GOAL_CLIENTS: usize = 64;
/// Runs of each kind per concurrency, alternated (plain, keyed, keyed, plain, ...) so that a
/// drift of the machine's speed over the runs weighs on both alike.
const ROUNDS: usize = 2;

pub async fn run(ctx: &Ctx) -> anyhow::Result<(Vec<Row>, Value)> {
    let dir = ctx.work.join("idempotency");
    fresh_dir(&dir)?;
    let secs = ctx.plan.run_secs;
    let warmup = ctx.plan.warmup_secs;
    let mut rows = Vec::new();
    let mut details = Vec::new();
    for &clients in ctx.plan.concurrencies.iter().filter(|&&c| c > 1) {
        let data = dir.join(format!("c{clients}"));
        let server = Server::start(
            &ctx.easel,
            &["serve"],
            &[
                ("EASEL_DATA_DIR", data.display().to_string()),
                ("EASEL_LISTEN", "127.0.0.1:0".into()),
                ("EASEL_WORKERS", "0".into()),
                ("EASEL_PLANS__SELF-HOSTED__MAX_PENDING", "4000000000".into()),
            ],
            &data,
            "easel",
        )
        .await?;
        let key = server.key.clone().context("easel printed no first key")?;
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
            "  {clients} clients: without and with keys, {ROUNDS} runs of each ({secs} s each)"
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
                if with_keys {
                    let env = keyed_env(&format!("r{round}"));
                    let r = ctx
                        .wrk
                        .run("submit_idempotent.lua", &url, clients, secs, &env)
                        .await?;
                    check(&r, "easel with idempotency keys")?;
                    keyed.push(r);
                } else {
                    let r = ctx
                        .wrk
                        .run("submit_idempotent.lua", &url, clients, secs, &plain_env)
                        .await?;
                    check(&r, "easel")?;
                    plain.push(r);
                }
            }
        }
        server.stop(Duration::from_secs(60)).await?;
        let _ = std::fs::remove_dir_all(&data);

        let (k, p) = (rate(&keyed), rate(&plain));
        let mut row = Row::new(
            "idempotency",
            format!(
                "submit with a unique Idempotency-Key per request, sync=full, {}: requests/s \
                 (baseline: the same submits without a key, same server)",
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
                    "submit with a unique Idempotency-Key per request, sync=full, {}: p50 / p99",
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
        details.push(json!({ "clients": clients, "keyed": keyed, "plain": plain }));
    }
    Ok((rows, Value::Array(details)))
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
