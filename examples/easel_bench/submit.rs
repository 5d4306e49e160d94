//! Benchmark 1, submit: durable `POST /api/v1/imagine` on the SQLite store with workers stopped,
//! against the bare handler of `easel bench-baseline`, at several concurrencies, for both
//! `sqlite_synchronous` settings.

use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};

use crate::proc::{cpu_secs, fresh_dir, Server};
use crate::report::{clients as clients_text, Row};
use crate::wrk::WrkResult;
use crate::Ctx;

/// The concurrency at which the goals apply.
const GOAL_CLIENTS: usize = 64;

pub async fn run(ctx: &Ctx) -> anyhow::Result<(Vec<Row>, Value)> {
    let dir = ctx.work.join("submit");
    fresh_dir(&dir)?;
    let baseline = Server::start(
        &ctx.easel,
        &["bench-baseline", "--listen", "127.0.0.1:0"],
        &[],
        &dir.join("baseline"),
        "baseline",
    )
    .await?;
    let baseline_url = baseline.url("/api/v1/imagine");
    let secs = ctx.plan.run_secs;
    let warmup = ctx.plan.warmup_secs;

    let mut rows = Vec::new();
    let mut details = serde_json::Map::new();
    for mode in ["full", "normal"] {
        let mut runs = Vec::new();
        for &clients in &ctx.plan.concurrencies {
            println!("  sync={mode}, {clients} clients: baseline, then easel ({secs} s each)");
            // Every run starts from an empty store, so that the runs do not depend on each
            // other: with workers stopped, each one leaves its tasks queued.
            let data = dir.join(format!("{mode}-{clients}"));
            let server = Server::start(
                &ctx.easel,
                &["serve"],
                &[
                    ("EASEL_DATA_DIR", data.display().to_string()),
                    ("EASEL_LISTEN", "127.0.0.1:0".into()),
                    ("EASEL_WORKERS", "0".into()),
                    ("EASEL_SQLITE_SYNCHRONOUS", mode.into()),
                    // Workers are stopped, so every submitted task stays queued.
                    ("EASEL_PLANS__SELF-HOSTED__MAX_PENDING", "4000000000".into()),
                ],
                &data,
                "easel",
            )
            .await?;
            let key = server.key.clone().context("easel printed no first key")?;
            let env = [("EASEL_BENCH_KEY", key)];
            let url = server.url("/api/v1/imagine");

            ctx.wrk
                .run("submit.lua", &baseline_url, clients, warmup, &[])
                .await?;
            let cpu0 = cpu_secs(Some(baseline.pid()))?;
            let b = ctx
                .wrk
                .run("submit.lua", &baseline_url, clients, secs, &[])
                .await?;
            let baseline_cpu_us =
                (cpu_secs(Some(baseline.pid()))? - cpu0) * 1e6 / b.requests as f64;
            let w = ctx
                .wrk
                .run("submit.lua", &url, clients, warmup, &env)
                .await?;
            let queued_before = w.requests - w.errors_status;
            let cpu0 = cpu_secs(Some(server.pid()))?;
            let s = ctx.wrk.run("submit.lua", &url, clients, secs, &env).await?;
            let easel_cpu_us = (cpu_secs(Some(server.pid()))? - cpu0) * 1e6 / s.requests as f64;
            // The caller's additions (prompt parameters, 4 KiB of metadata) on the same server,
            // right after the plain submits.
            let extras = if clients == GOAL_CLIENTS {
                println!(
                    "  sync={mode}, {clients} clients: with parameters and metadata ({secs} s)"
                );
                let e = ctx
                    .wrk
                    .run("submit_extras.lua", &url, clients, secs, &env)
                    .await?;
                check(&e, "easel with parameters and metadata")?;
                Some(e)
            } else {
                None
            };
            server.stop(Duration::from_secs(60)).await?;
            let _ = std::fs::remove_dir_all(&data);
            check(&b, "baseline")?;
            check(&s, "easel")?;

            let goal = clients == GOAL_CLIENTS;
            let mut rps = Row::new(
                "submit",
                format!("submit, sync={mode}, {}: requests/s", clients_text(clients)),
                "req/s",
            )
            .value(&[s.rps()])
            .baseline(&[b.rps()]);
            if goal {
                let met = rps.ratio.is_some_and(|r| r >= 0.5);
                rps = rps.goal(">= 0.5x baseline", met);
            }
            let mut latency = Row::new(
                "submit",
                format!("submit, sync={mode}, {}: p50 / p99", clients_text(clients)),
                "ms",
            )
            .value(&[s.p50_ms(), s.p99_ms()])
            .baseline(&[b.p50_ms(), b.p99_ms()]);
            if goal {
                latency = latency.goal("p99 < 10 ms", s.p99_ms() < 10.0);
            }
            rows.push(rps);
            rows.push(latency);
            if let Some(e) = &extras {
                let ratio = e.rps() / s.rps();
                rows.push(
                    Row::new(
                        "submit",
                        format!(
                            "submit, sync={mode}, {}: with prompt parameters and 4 KiB of \
                             metadata, against the plain submit: requests/s",
                            clients_text(clients)
                        ),
                        "req/s",
                    )
                    .value(&[e.rps()])
                    .baseline(&[s.rps()])
                    .goal(">= 0.9x the plain submit", ratio >= 0.9),
                );
            }
            // The same submits made in-process, straight to the store: what HTTP adds.
            let alone = if goal {
                println!("  sync={mode}, {clients} clients: the store alone ({secs} s)");
                let data = dir.join(format!("{mode}-{clients}-store"));
                let alone = crate::store_alone::submits(&data, mode, clients, warmup, secs).await?;
                let _ = std::fs::remove_dir_all(&data);
                rows.push(
                    Row::new(
                        "submit",
                        format!(
                            "submit, sync={mode}, {}: easel against its store alone \
                             (in-process calls, no HTTP): requests/s",
                            clients_text(clients)
                        ),
                        "req/s",
                    )
                    .value(&[s.rps()])
                    .baseline(&[alone.per_sec]),
                );
                Some(json!({
                    "requests_per_sec": alone.per_sec,
                    "p50_ms": alone.p50_ms,
                    "p99_ms": alone.p99_ms,
                }))
            } else {
                None
            };
            if goal {
                let cpu = Row::new(
                    "submit",
                    format!(
                        "submit, sync={mode}, {}: CPU time per request",
                        clients_text(clients)
                    ),
                    "µs",
                )
                .value(&[easel_cpu_us])
                .baseline(&[baseline_cpu_us]);
                // Issue 51's goal is for the durable submit: the one acknowledged after fsync.
                rows.push(if mode == "full" {
                    let met = cpu.ratio.is_some_and(|r| r <= 2.0);
                    cpu.goal("<= 2.0x the bare handler", met)
                } else {
                    cpu
                });
            }
            runs.push(json!({
                "clients": clients,
                "tasks_queued_before": queued_before,
                "tasks_queued_after": queued_before + s.requests - s.errors_status,
                "easel_cpu_us_per_request": easel_cpu_us,
                "baseline_cpu_us_per_request": baseline_cpu_us,
                "easel": s,
                "baseline": b,
                "store_alone": alone,
                "with_extras": extras,
            }));
        }
        details.insert(mode.to_string(), Value::Array(runs));
    }
    baseline.stop(Duration::from_secs(10)).await?;
    Ok((rows, Value::Object(details)))
}

/// A run with failed requests measures something else than the figure says.
pub fn check(r: &WrkResult, what: &str) -> anyhow::Result<()> {
    if r.requests == 0 || r.errors() * 100 > r.requests {
        anyhow::bail!(
            "{what}: {} of {} requests failed (connect {}, read {}, write {}, status >= 400 {}, \
             timeout {})",
            r.errors(),
            r.requests,
            r.errors_connect,
            r.errors_read,
            r.errors_write,
            r.errors_status,
            r.errors_timeout
        );
    }
    Ok(())
}
