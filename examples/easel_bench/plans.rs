//! Benchmark `plans` (issue 47): durable `POST /api/v1/imagine` on the SQLite store with workers
//! stopped, with five `[plans.NAME]` tables configured (the account's plan with a request rate
//! that never refuses, its models, moderation lists, running, pending and batch limits; four
//! other plans beside it) against the same submits with none (only the default plan's pending
//! limit raised, as in every submit benchmark), on the same server: the configuration file is
//! rewritten and reloaded (`POST /api/v1/admin/reload`) between runs, alternated. The goal:
//! 0.95x or more ("plans must not cost the hot path").

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use crate::alternated;
use crate::proc::{fresh_dir, Server};
use crate::report::Row;
use crate::Ctx;

const GOAL_CLIENTS: usize = 64;
const ROUNDS: usize = 2;

/// Without plans: the default plan, with only the pending limit raised so that no submit is
/// refused over a run.
const WITHOUT: &str = r#"
[plans.self-hosted]
max_pending = 4000000000
"#;

/// With plans: the account's (the default plan) limited in every way a plan can be, none of
/// them reached by the benchmark; and four others, as an operator selling easel would have.
const WITH: &str = r#"
default_plan = "self-hosted"

[plans.self-hosted]
max_pending = 4000000000
max_running = 4
rate = { rate = 1000000.0, burst = 1000000, account_rate = 1000000.0, account_burst = 1000000 }
models = ["procedural"]
batch_max = 40
moderation = ["brand-safety"]

[plans.free]
credits_per_period = 100
period = "day"
max_running = 1
max_pending = 5
rate = { rate = 1.0, burst = 5 }
models = ["procedural"]
batch_max = 4
moderation = ["brand-safety"]

[plans.hobby]
credits_per_period = 1000
period = "week"
max_running = 2
max_pending = 50
rate = { rate = 5.0, burst = 20 }
batch_max = 10
moderation = ["brand-safety"]

[plans.pro]
credits_per_period = 2000
period = "month"
max_running = 4
max_pending = 500
rate = { rate = 20.0, burst = 40 }
models = ["procedural"]
batch_max = 40
moderation = ["brand-safety"]

[plans.team]
credits_per_period = 20000
period = "month"
max_running = 16
max_pending = 5000
rate = { rate = 100.0, burst = 200, account_rate = 400.0, account_burst = 800 }
batch_max = 40
"#;

/// The terms of the list every plan above names (none in the benchmark's prompt).
fn terms() -> Vec<String> {
    (0..50).map(|i| format!("blockedword{i}")).collect()
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<(Vec<Row>, Value)> {
    let dir = ctx.work.join("plans");
    fresh_dir(&dir)?;
    let http = reqwest::Client::new();
    let mut rows = Vec::new();
    let mut details = Vec::new();
    for &clients in ctx.plan.concurrencies.iter().filter(|&&c| c > 1) {
        let data = dir.join(format!("c{clients}"));
        let (server, key) = alternated::submit_server(ctx, &data, WITHOUT, &[]).await?;
        let config = data.join("easel.toml");
        let url = server.url("/api/v1/imagine");
        let env = [("EASEL_BENCH_KEY", key.clone())];
        // The moderation list the plans name; without plans every list applies, so both
        // configurations match each prompt against the same terms.
        let res = http
            .put(server.url("/api/v1/admin/moderation/lists/brand-safety"))
            .header("Authorization", &key)
            .json(&json!({ "terms": terms() }))
            .send()
            .await?;
        anyhow::ensure!(res.status().is_success(), "the list: {}", res.status());
        println!(
            "  {clients} clients: without and with plans, {ROUNDS} runs of each ({} s each)",
            ctx.plan.run_secs
        );
        let runs = alternated::run(
            ctx,
            alternated::Side::both(&server, &url, &env),
            clients,
            ROUNDS,
            |with| {
                let (http, key, server, config) = (&http, &key, &server, &config);
                async move { configure(http, key, server, config, with).await }
            },
            |_| async { Ok(()) },
        )
        .await?;
        server.stop(Duration::from_secs(60)).await?;
        let _ = std::fs::remove_dir_all(&data);
        rows.extend(runs.rows(
            "plans",
            "submit with five plans configured (rate, models, lists, limits), sync=full \
             (baseline: the same submits without plans, same server, reloaded)",
            clients,
            (GOAL_CLIENTS, 0.95, ">= 0.95x without plans"),
        ));
        details.push(runs.details(clients, "planned", "none"));
    }
    Ok((rows, Value::Array(details)))
}

/// Write the configuration with or without plans and have the server reload it.
async fn configure(
    http: &reqwest::Client,
    key: &str,
    server: &Server,
    config: &Path,
    with: bool,
) -> anyhow::Result<()> {
    std::fs::write(config, if with { WITH } else { WITHOUT })?;
    let res = http
        .post(server.url("/api/v1/admin/reload"))
        .header("Authorization", key)
        .send()
        .await?;
    let status = res.status();
    let body = res.text().await?;
    anyhow::ensure!(status.is_success(), "reload: {status} {body}");
    Ok(())
}
