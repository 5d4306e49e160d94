//! Benchmark `moderation`: durable `POST /api/v1/imagine` on the SQLite store with workers
//! stopped, with 10,000 terms in the moderation lists (9,900 words and phrases, 100 `re:`
//! patterns, none matching the prompt) against the same submits with no list, on the same
//! server, alternated (the list written and removed through the admin API between runs). The
//! goal: 0.95x or more.

use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};

use crate::idempotency::rate;
use crate::proc::{fresh_dir, Server};
use crate::report::{clients as clients_text, Row};
use crate::submit::check;
use crate::Ctx;

const GOAL_CLIENTS: usize = 64;
const ROUNDS: usize = 2;
/// The terms written, as the issue asks.
pub const TERMS: usize = 10_000;

/// 10,000 terms: words and two-word phrases, and 100 patterns, none in the benchmark's prompt.
fn terms() -> Vec<String> {
    (0..TERMS)
        .map(|i| match i % 100 {
            0 => format!("re:^zq{i}x+$"),
            1..=30 => format!("blocked{i} phrase{i}"),
            _ => format!("blockedword{i}"),
        })
        .collect()
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<(Vec<Row>, Value)> {
    let dir = ctx.work.join("moderation");
    fresh_dir(&dir)?;
    let secs = ctx.plan.run_secs;
    let warmup = ctx.plan.warmup_secs;
    let http = reqwest::Client::new();
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
        let list = server.url("/api/v1/admin/moderation/lists/bench");
        let env = [("EASEL_BENCH_KEY", key.clone())];
        let body = json!({ "terms": terms() });
        let set = |on: bool| {
            let (http, list, key, body) = (&http, &list, &key, &body);
            async move {
                let req = if on {
                    http.put(list).json(body)
                } else {
                    http.delete(list)
                };
                let res = req.header("Authorization", key).send().await?;
                anyhow::ensure!(
                    res.status().is_success() || (!on && res.status() == 404),
                    "the list was not {}: {}",
                    if on { "written" } else { "removed" },
                    res.status()
                );
                anyhow::Ok(())
            }
        };
        println!(
            "  {clients} clients: no list and {TERMS} terms, {ROUNDS} runs of each ({secs} s each)"
        );
        set(true).await?;
        ctx.wrk
            .run("submit_idempotent.lua", &url, clients, warmup, &env)
            .await?;
        let mut none = Vec::new();
        let mut listed = Vec::new();
        for round in 0..ROUNDS {
            for with_list in [round % 2 == 1, round % 2 == 0] {
                set(with_list).await?;
                let r = ctx
                    .wrk
                    .run("submit_idempotent.lua", &url, clients, secs, &env)
                    .await?;
                check(&r, "easel")?;
                if with_list {
                    listed.push(r);
                } else {
                    none.push(r);
                }
            }
        }
        server.stop(Duration::from_secs(60)).await?;
        let _ = std::fs::remove_dir_all(&data);
        let (l, n) = (rate(&listed), rate(&none));
        let mut row = Row::new(
            "moderation",
            format!(
                "submit with {TERMS} moderation terms, sync=full, {}: requests/s (baseline: \
                 the same submits with no list, same server)",
                clients_text(clients)
            ),
            "req/s",
        )
        .value(&[l])
        .baseline(&[n]);
        if clients == GOAL_CLIENTS {
            let met = row.ratio.is_some_and(|r| r >= 0.95);
            row = row.goal(">= 0.95x without lists", met);
        }
        rows.push(row);
        details.push(json!({ "clients": clients, "listed": listed, "none": none }));
    }
    Ok((rows, Value::Array(details)))
}
