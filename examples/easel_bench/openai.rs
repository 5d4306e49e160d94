//! Benchmark `openai` (issue 49): 64 callers each asking for one image and waiting for it, in
//! OpenAI's dialect (`POST /v1/images/generations`, one image's URL in the answer) against
//! Apiframe's equivalent (`POST /api/v1/imagine` with `Prefer: wait=60`, the finished record),
//! on the same server with its workers running the procedural generator, alternated. Both make
//! one imagine task per call; the figure is calls answered per second, and the server's CPU
//! time per call. The goal: OpenAI's at 0.9x or more of Apiframe's.

use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};

use crate::idempotency::rate;
use crate::proc::{cpu_secs, fresh_dir, Server};
use crate::report::{clients as clients_text, Row};
use crate::submit::check;
use crate::wrk::WrkResult;
use crate::Ctx;

const CLIENTS: usize = 64;
/// Runs of each, alternated: the drawing takes the cores, so a run swings with what else runs.
const ROUNDS: usize = 3;
/// The generator's image size (long side): small, so that what easel does around a task (the
/// submit, the wait, the answer) weighs beside the drawing.
const IMAGE_SIZE: u32 = 256;
/// Pause after each run, for the tasks of the calls it left waiting to finish.
const DRAIN: Duration = Duration::from_secs(3);

pub async fn run(ctx: &Ctx) -> anyhow::Result<(Vec<Row>, Value)> {
    let data = ctx.work.join("openai");
    fresh_dir(&data)?;
    let secs = ctx.plan.run_secs;
    let warmup = ctx.plan.warmup_secs;
    let workers = ctx.plan.workers;
    let server = Server::start(
        &ctx.easel,
        &["serve"],
        &[
            ("EASEL_DATA_DIR", data.display().to_string()),
            ("EASEL_LISTEN", "127.0.0.1:0".into()),
            ("EASEL_WORKERS", workers.to_string()),
            ("EASEL_IMAGE_SIZE", IMAGE_SIZE.to_string()),
            ("EASEL_PLANS__SELF-HOSTED__MAX_PENDING", "4000000000".into()),
        ],
        &data,
        "easel",
    )
    .await?;
    let key = server.key.clone().context("easel printed no first key")?;
    let env = |dialect: &str| {
        [
            ("EASEL_BENCH_KEY", key.clone()),
            ("EASEL_BENCH_DIALECT", dialect.to_string()),
        ]
    };
    let url = |openai: bool| {
        server.url(if openai {
            "/v1/images/generations"
        } else {
            "/api/v1/imagine"
        })
    };
    println!(
        "  {CLIENTS} callers, {workers} workers, {IMAGE_SIZE} px: Apiframe's imagine + wait and \
         OpenAI's generations, {ROUNDS} runs of each ({secs} s each)"
    );
    for openai in [false, true] {
        let dialect = if openai { "openai" } else { "apiframe" };
        let r = ctx
            .wrk
            .run(
                "openai_or_imagine.lua",
                &url(openai),
                CLIENTS,
                warmup,
                &env(dialect),
            )
            .await?;
        check(&r, dialect)?;
        tokio::time::sleep(DRAIN).await;
    }
    let (mut apiframe, mut openai_runs) = (Vec::new(), Vec::new());
    let (mut cpu_apiframe, mut cpu_openai) = (0.0, 0.0);
    for round in 0..ROUNDS {
        for openai in [round % 2 == 0, round % 2 == 1] {
            let dialect = if openai { "openai" } else { "apiframe" };
            let cpu = cpu_secs(Some(server.pid()))?;
            let r = ctx
                .wrk
                .run(
                    "openai_or_imagine.lua",
                    &url(openai),
                    CLIENTS,
                    secs,
                    &env(dialect),
                )
                .await?;
            let used = cpu_secs(Some(server.pid()))? - cpu;
            check(&r, dialect)?;
            tokio::time::sleep(DRAIN).await;
            if openai {
                cpu_openai += used;
                openai_runs.push(r);
            } else {
                cpu_apiframe += used;
                apiframe.push(r);
            }
        }
    }
    server.stop(Duration::from_secs(60)).await?;
    let _ = std::fs::remove_dir_all(&data);

    let (o, a) = (rate(&openai_runs), rate(&apiframe));
    let per_call = |cpu: f64, runs: &[WrkResult]| {
        cpu * 1000.0 / runs.iter().map(|r| r.requests).sum::<u64>().max(1) as f64
    };
    let p = |runs: &[WrkResult], f: fn(&WrkResult) -> f64| {
        runs.iter().map(f).sum::<f64>() / runs.len().max(1) as f64
    };
    let met = o / a >= 0.9;
    let rows = vec![
        Row::new(
            "openai",
            format!(
                "POST /v1/images/generations (n=1, url), {workers} workers, {IMAGE_SIZE} px, {}: \
                 calls/s (baseline: POST /api/v1/imagine with Prefer: wait, same server)",
                clients_text(CLIENTS)
            ),
            "calls/s",
        )
        .value(&[o])
        .baseline(&[a])
        .goal(">= 0.9x imagine + wait", met),
        Row::new(
            "openai",
            format!(
                "POST /v1/images/generations, {}: p50 / p99 (baseline: imagine + wait)",
                clients_text(CLIENTS)
            ),
            "ms",
        )
        .value(&[
            p(&openai_runs, WrkResult::p50_ms),
            p(&openai_runs, WrkResult::p99_ms),
        ])
        .baseline(&[
            p(&apiframe, WrkResult::p50_ms),
            p(&apiframe, WrkResult::p99_ms),
        ]),
        Row::new(
            "openai",
            format!(
                "POST /v1/images/generations, {}: server CPU per call, the drawing included \
                 (baseline: imagine + wait)",
                clients_text(CLIENTS)
            ),
            "ms",
        )
        .value(&[per_call(cpu_openai, &openai_runs)])
        .baseline(&[per_call(cpu_apiframe, &apiframe)]),
    ];
    let details = json!({
        "clients": CLIENTS, "workers": workers, "image_size": IMAGE_SIZE,
        "openai": openai_runs, "apiframe": apiframe,
        "cpu_secs": {"openai": cpu_openai, "apiframe": cpu_apiframe},
    });
    Ok((rows, details))
}
