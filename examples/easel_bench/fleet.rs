//! The fleet benchmark (issue 51): four `easel serve` nodes on one PostgreSQL in front of many
//! simulated GPUs, fed by a steady stream of submits, measuring what matters at scale, keeping
//! every GPU busy, and how the cost of dispatching grows with the number of GPUs.
//!
//! Each simulated backend is a small server of this process that speaks OpenAI's
//! `POST /v1/images/generations`, takes one job at a time (a second waits for the first) and
//! holds each a fixed [`JOB`]. The backends are dealt out evenly, each node configured with its
//! share (`concurrency = 1` each) and easel's default `workers` (raised by easel to twice the
//! node's slots). Submits go round-robin to the four nodes at 1.1 times the fleet's capacity
//! (backends / [`JOB`] a second) for [`FEED`], so that a backlog is always there; then the driver
//! waits for every task to end. Per fleet size:
//!
//! - **busy share**: the backends' job time, summed, over the window's length times the number of
//!   backends; the window runs from two jobs' length after the first job started (every node warm,
//!   the backlog built) to the end of the feed (goal: at least 95%);
//! - **claim to start**: per task, the moment its backend received the job (this process's wall
//!   clock) less its record's `started_at` (the node's claim, the same clock): how long a claimed
//!   task waited on its node for a slot and its request (goal: p99 under 100 ms);
//! - **dispatch cost**: the nodes' CPU time (`/proc/PID/stat`) and PostgreSQL's (every `postgres`
//!   process) per task, and the database's transactions and rows written per task from
//!   `pg_stat_database` (the scratch database's own counters; statements are not counted, as
//!   `pg_stat_statements` is not loaded on the test machines).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use serde_json::{json, Value};
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;

use crate::backends::{busy_secs, percentile, picture_png};
use crate::postgres::{options, postgres_cpu_secs, Scratch};
use crate::proc::{cpu_of, cpu_since, fresh_dir, Server};
use crate::report::Row;
use crate::Ctx;

/// How long each simulated backend holds a job (issue 51: 4 s).
const JOB: Duration = Duration::from_secs(4);
/// How long the submits are fed at 1.1 times the capacity.
const FEED: Duration = Duration::from_secs(40);
const NODES: usize = 4;
/// The image size easel asks for and the backends answer: small, so that the figures are the
/// dispatch's, not image work's.
const IMAGE_SIZE: u32 = 256;
const BUSY_GOAL: f64 = 95.0;
const CLAIM_GOAL_MS: f64 = 100.0;

/// A simulated GPU: one job at a time, each held for [`JOB`].
struct Gpu {
    one_at_a_time: tokio::sync::Mutex<()>,
    /// Each job's prompt, when its request arrived (wall clock, ms), and when it held the GPU.
    jobs: Mutex<Vec<Job>>,
    answer: Bytes,
}

struct Job {
    prompt: String,
    received_ms: f64,
    start: Instant,
    end: Instant,
}

fn wall_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
        * 1000.0
}

async fn generations(State(gpu): State<Arc<Gpu>>, Json(body): Json<Value>) -> Response {
    let received_ms = wall_ms();
    let _held = gpu.one_at_a_time.lock().await;
    let start = Instant::now();
    tokio::time::sleep(JOB).await;
    gpu.jobs.lock().unwrap().push(Job {
        prompt: body["prompt"].as_str().unwrap_or("").to_string(),
        received_ms,
        start,
        end: Instant::now(),
    });
    (
        [(header::CONTENT_TYPE, "application/json")],
        gpu.answer.clone(),
    )
        .into_response()
}

async fn start_gpu(answer: Bytes) -> anyhow::Result<(Arc<Gpu>, String)> {
    let gpu = Arc::new(Gpu {
        one_at_a_time: tokio::sync::Mutex::new(()),
        jobs: Mutex::default(),
        answer,
    });
    let app = Router::new()
        .route("/v1/images/generations", post(generations))
        .route("/v1/models", get(|| async { Json(json!({"data": []})) }))
        .with_state(gpu.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/v1", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((gpu, url))
}

/// The scratch database's counters that say what the fleet asked of PostgreSQL.
#[derive(Clone, Copy, Default)]
struct DbCounters {
    transactions: f64,
    rows_written: f64,
    rows_read: f64,
}

async fn db_counters(admin: &PgPool, db: &str) -> anyhow::Result<DbCounters> {
    let row: (i64, i64, i64) = sqlx::query_as(
        "SELECT xact_commit + xact_rollback, tup_inserted + tup_updated + tup_deleted,
                tup_fetched
         FROM pg_stat_database WHERE datname = $1",
    )
    .bind(db)
    .fetch_one(admin)
    .await?;
    Ok(DbCounters {
        transactions: row.0 as f64,
        rows_written: row.1 as f64,
        rows_read: row.2 as f64,
    })
}

/// What one fleet size measured.
struct Measured {
    backends: usize,
    tasks: usize,
    busy: f64,
    window_secs: f64,
    claim_to_start_ms: Vec<f64>,
    node_cpu_ms_per_task: f64,
    pg_cpu_ms_per_task: f64,
    transactions_per_task: f64,
    rows_written_per_task: f64,
    rows_read_per_task: f64,
    idle_transactions_per_sec: f64,
    tasks_per_sec: f64,
}

async fn measure(ctx: &Ctx, admin_url: &str, backends: usize) -> anyhow::Result<Measured> {
    let dir = ctx.work.join(format!("fleet-{backends}"));
    fresh_dir(&dir)?;
    let answer = {
        let image = picture_png(IMAGE_SIZE);
        let data: Vec<Value> = (0..4).map(|_| json!({ "b64_json": image })).collect();
        Bytes::from(serde_json::to_vec(&json!({ "created": 0, "data": data }))?)
    };
    let mut gpus = Vec::with_capacity(backends);
    let mut tomls = vec![String::new(); NODES];
    for i in 0..backends {
        let (gpu, url) = start_gpu(answer.clone()).await?;
        tomls[i % NODES].push_str(&format!(
            "[[backends]]\nname = \"gpu-{i}\"\nkind = \"openai\"\nurl = \"{url}\"\n\
             concurrency = 1\ntimeout = \"60s\"\n\n"
        ));
        gpus.push(gpu);
    }
    let scratch = Scratch::create(admin_url, &format!("fleet{backends}")).await?;
    let admin = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(options(admin_url)?)
        .await?;
    let capacity = backends as f64 / JOB.as_secs_f64();
    let tasks = (capacity * 1.1 * FEED.as_secs_f64()).round() as usize;
    let mut nodes = Vec::with_capacity(NODES);
    for (node, toml) in tomls.iter().enumerate() {
        let data = dir.join(format!("node{node}"));
        std::fs::create_dir_all(&data)?;
        let config = data.join("easel.toml");
        std::fs::write(&config, toml)?;
        // One after the other: the first creates the schema and prints the first key.
        nodes.push(
            Server::start(
                &ctx.easel,
                &["serve"],
                &[
                    ("EASEL_DATA_DIR", data.display().to_string()),
                    ("EASEL_LISTEN", "127.0.0.1:0".into()),
                    ("EASEL_CONFIG", config.display().to_string()),
                    ("EASEL_DATABASE_URL", scratch.url.clone()),
                    // Four nodes' pools within the server's 100 connections.
                    ("EASEL_DATABASE_MAX_CONNECTIONS", "8".into()),
                    ("EASEL_IMAGE_SIZE", IMAGE_SIZE.to_string()),
                    (
                        "EASEL_PLANS__SELF-HOSTED__MAX_PENDING",
                        (tasks + 100).to_string(),
                    ),
                ],
                &data,
                "easel",
            )
            .await?,
        );
    }
    let key = nodes[0].key.clone().context("easel printed no first key")?;
    let urls: Vec<String> = nodes.iter().map(|s| s.url("/api/v1/imagine")).collect();
    let http = reqwest::Client::new();

    // Idle: what the nodes ask of the database with nothing to do (polls, leases, heartbeats).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle0 = db_counters(&admin, &scratch.name).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let idle1 = db_counters(&admin, &scratch.name).await?;
    let idle_transactions_per_sec = (idle1.transactions - idle0.transactions) / 5.0;

    let cpu0 = cpu_of(&nodes)?;
    let pg0 = postgres_cpu_secs();
    let db0 = db_counters(&admin, &scratch.name).await?;
    let started = Instant::now();
    println!(
        "  {backends} backends: {tasks} tasks over {} s, {:.1} a second",
        FEED.as_secs(),
        capacity * 1.1
    );
    // The feed: task i at i / rate seconds, each submit on its own so that a slow answer does
    // not hold the next back.
    let interval = Duration::from_secs_f64(1.0 / (capacity * 1.1));
    let mut submits = tokio::task::JoinSet::new();
    for i in 0..tasks {
        tokio::time::sleep_until((started + interval.mul_f64(i as f64)).into()).await;
        let (http, url, key) = (http.clone(), urls[i % NODES].clone(), key.clone());
        submits.spawn(async move {
            let res = http
                .post(&url)
                .header("Authorization", &key)
                .json(&json!({ "prompt": format!("fleet task {i}") }))
                .send()
                .await?;
            if !res.status().is_success() {
                bail!("imagine answered {}: {}", res.status(), res.text().await?);
            }
            Ok(())
        });
    }
    let fed_until = Instant::now();
    while let Some(done) = submits.join_next().await {
        done??;
    }
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(options(&scratch.url)?)
        .await?;
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let ended: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM tasks WHERE status IN ('finished', 'failed')")
                .fetch_one(&pool)
                .await?;
        if ended as usize >= tasks {
            break;
        }
        if Instant::now() > deadline {
            bail!("{ended} of {tasks} tasks ended within 180 s after the feed");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let wall = started.elapsed().as_secs_f64();
    let node_cpu = cpu_since(&nodes, &cpu0)?;
    let pg_cpu = postgres_cpu_secs() - pg0;
    let records: Vec<(String, String, Option<i64>)> =
        sqlx::query_as("SELECT prompt, status, started_at FROM tasks")
            .fetch_all(&pool)
            .await?;
    pool.close().await;
    for s in nodes {
        s.stop(Duration::from_secs(30)).await?;
    }
    // After the nodes closed their connections, every counter they moved is in the view.
    sqlx::query("SELECT pg_stat_clear_snapshot()")
        .execute(&admin)
        .await?;
    let db1 = db_counters(&admin, &scratch.name).await?;
    admin.close().await;
    scratch.drop_db().await?;

    let failed = records.iter().filter(|r| r.1 != "finished").count();
    if failed > 0 {
        bail!("{failed} of {tasks} tasks did not finish");
    }
    let jobs: Vec<Job> = gpus
        .iter()
        .flat_map(|g| std::mem::take(&mut *g.jobs.lock().unwrap()))
        .collect();
    let by_prompt: std::collections::HashMap<&str, &Job> =
        jobs.iter().map(|j| (j.prompt.as_str(), j)).collect();
    let mut claim_to_start_ms = Vec::with_capacity(records.len());
    for (prompt, _, started_at) in &records {
        let job = by_prompt
            .get(prompt.as_str())
            .with_context(|| format!("no backend job for {prompt:?}"))?;
        let claimed = started_at.context("a finished task without started_at")? as f64;
        claim_to_start_ms.push(job.received_ms - claimed);
    }
    let first = jobs.iter().map(|j| j.start).min().context("no jobs")?;
    let from = first + 2 * JOB;
    if fed_until <= from {
        bail!("the feed ended before the window began");
    }
    let busy = busy_secs(jobs.iter().map(|j| (j.start, j.end)), from, fed_until);
    let window = (fed_until - from).as_secs_f64();
    let n = tasks as f64;
    Ok(Measured {
        backends,
        tasks,
        busy: 100.0 * busy / (window * backends as f64),
        window_secs: window,
        claim_to_start_ms,
        node_cpu_ms_per_task: node_cpu * 1000.0 / n,
        pg_cpu_ms_per_task: pg_cpu * 1000.0 / n,
        transactions_per_task: (db1.transactions - db0.transactions) / n,
        rows_written_per_task: (db1.rows_written - db0.rows_written) / n,
        rows_read_per_task: (db1.rows_read - db0.rows_read) / n,
        idle_transactions_per_sec,
        tasks_per_sec: n / wall,
    })
}

pub async fn run(ctx: &Ctx, admin_url: &str) -> anyhow::Result<(Vec<Row>, Value)> {
    let sizes: &[usize] = if ctx.plan.run_secs < 10 {
        &[10, 40]
    } else {
        &[10, 40, 100]
    };
    let mut rows = Vec::new();
    let mut details = Vec::new();
    for &backends in sizes {
        let m = measure(ctx, admin_url, backends).await?;
        let label = format!(
            "{} simulated GPUs (4 s a job, one at a time) on {NODES} PostgreSQL nodes, fed at 1.1x",
            m.backends
        );
        rows.push(
            Row::new("fleet", format!("busy share: {label}"), "%")
                .value(&[m.busy])
                .goal(format!(">= {BUSY_GOAL}%"), m.busy >= BUSY_GOAL),
        );
        let p50 = percentile(&m.claim_to_start_ms, 0.5);
        let p99 = percentile(&m.claim_to_start_ms, 0.99);
        rows.push(
            Row::new("fleet", format!("claim to start: {label}"), "ms")
                .value(&[p50, p99])
                .goal(format!("p99 < {CLAIM_GOAL_MS} ms"), p99 < CLAIM_GOAL_MS),
        );
        for (figure, unit, value) in [
            ("the nodes' CPU per task", "ms", m.node_cpu_ms_per_task),
            ("PostgreSQL's CPU per task", "ms", m.pg_cpu_ms_per_task),
            (
                "PostgreSQL transactions per task",
                "n",
                m.transactions_per_task,
            ),
            (
                "PostgreSQL rows written per task",
                "n",
                m.rows_written_per_task,
            ),
        ] {
            rows.push(Row::new("fleet", format!("{figure}: {label}"), unit).value(&[value]));
        }
        println!(
            "  {} backends: busy {:.1}% over {:.0} s, claim to start p50 {p50:.1} / p99 \
             {p99:.1} / max {:.1} ms, {:.1} tasks/s, node CPU {:.2} ms/task, PostgreSQL CPU \
             {:.2} ms/task, {:.1} transactions/task, {:.1} rows written/task, idle {:.1} \
             transactions/s",
            m.backends,
            m.busy,
            m.window_secs,
            percentile(&m.claim_to_start_ms, 1.0),
            m.tasks_per_sec,
            m.node_cpu_ms_per_task,
            m.pg_cpu_ms_per_task,
            m.transactions_per_task,
            m.rows_written_per_task,
            m.idle_transactions_per_sec,
        );
        details.push(json!({
            "backends": m.backends,
            "nodes": NODES,
            "job_secs": JOB.as_secs_f64(),
            "tasks": m.tasks,
            "busy_percent": m.busy,
            "window_secs": m.window_secs,
            "claim_to_start_ms": {
                "p50": p50,
                "p90": percentile(&m.claim_to_start_ms, 0.9),
                "p99": p99,
                "max": percentile(&m.claim_to_start_ms, 1.0),
            },
            "tasks_per_sec": m.tasks_per_sec,
            "node_cpu_ms_per_task": m.node_cpu_ms_per_task,
            "postgres_cpu_ms_per_task": m.pg_cpu_ms_per_task,
            "transactions_per_task": m.transactions_per_task,
            "rows_written_per_task": m.rows_written_per_task,
            "rows_read_per_task": m.rows_read_per_task,
            "idle_transactions_per_sec": m.idle_transactions_per_sec,
        }));
    }
    Ok((rows, Value::Array(details)))
}
