//! Benchmark 6, postgres: easel on PostgreSQL beside easel on SQLite, in the same run.
//!
//! - Durable submits: wrk with 64 connections against `easel serve` (workers stopped) on
//!   SQLite with `sqlite_synchronous=full`, then on a fresh PostgreSQL database made for the run
//!   (dropped after); the SQLite run is the baseline.
//! - Tasks through their whole life: `imagine` tasks with a `webhook_url` pointing at a local
//!   receiver, submitted over HTTP, claimed and generated (at the smallest image size), finished,
//!   their webhook sent from the outbox and recorded as delivered; on SQLite (one node, the
//!   baseline), on PostgreSQL with one node, and with two nodes sharing the database (submits
//!   split across both; each node keeps its images in a local directory of its own, which this
//!   benchmark never fetches).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use futures::StreamExt;
use serde_json::{json, Value};
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions};
use sqlx::{ConnectOptions, Connection};

use crate::e2e::PROMPTS;
use crate::proc::{cpu_of, cpu_secs, cpu_since, fresh_dir, Server};
use crate::report::{count, Row};
use crate::webhooks::Receiver;
use crate::wrk::WrkResult;
use crate::{now_ms, open_db, Ctx};

/// The concurrency of the submit comparison (the goal applies there).
const CLIENTS: usize = 64;

/// The default server: the local PostgreSQL with trust authentication.
pub const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

pub(crate) fn options(url: &str) -> anyhow::Result<PgConnectOptions> {
    Ok(url
        .parse::<PgConnectOptions>()
        .with_context(|| format!("not a PostgreSQL URL: {url}"))?
        .disable_statement_logging())
}

/// One connection to the server's maintenance database, within 5 s.
async fn admin(url: &str) -> anyhow::Result<PgConnection> {
    let opts = options(url)?;
    match tokio::time::timeout(Duration::from_secs(5), opts.connect()).await {
        Ok(Ok(conn)) => Ok(conn),
        Ok(Err(e)) => Err(e.into()),
        Err(_) => bail!("no answer within 5 s"),
    }
}

/// Whether the server answers; the reason when it does not.
pub async fn check_reachable(url: &str) -> anyhow::Result<()> {
    let mut conn = admin(url).await?;
    sqlx::query("SELECT 1").execute(&mut conn).await?;
    conn.close().await?;
    Ok(())
}

/// A database of its own for one measurement, dropped by [`Scratch::drop_db`].
pub(crate) struct Scratch {
    admin_url: String,
    pub name: String,
    pub url: String,
}

impl Scratch {
    pub async fn create(admin_url: &str, label: &str) -> anyhow::Result<Scratch> {
        let name = format!("easel_bench_{}_{label}", std::process::id());
        let mut conn = admin(admin_url).await?;
        sqlx::raw_sql(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .execute(&mut conn)
            .await?;
        sqlx::raw_sql(&format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .await
            .with_context(|| format!("CREATE DATABASE {name}"))?;
        conn.close().await?;
        let mut url =
            reqwest::Url::parse(admin_url).with_context(|| format!("not a URL: {admin_url}"))?;
        url.set_path(&name);
        let url = url.to_string();
        Ok(Scratch {
            admin_url: admin_url.to_string(),
            name,
            url,
        })
    }

    pub async fn drop_db(self) -> anyhow::Result<()> {
        let mut conn = admin(&self.admin_url).await?;
        sqlx::raw_sql(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        ))
        .execute(&mut conn)
        .await
        .with_context(|| format!("DROP DATABASE {}", self.name))?;
        conn.close().await?;
        Ok(())
    }
}

/// The server's settings that bear on durability and the figures.
async fn server_settings(url: &str) -> anyhow::Result<Value> {
    let mut conn = admin(url).await?;
    let mut out = serde_json::Map::new();
    for name in [
        "server_version",
        "fsync",
        "synchronous_commit",
        "wal_sync_method",
        "shared_buffers",
        "max_connections",
        "autovacuum",
    ] {
        let v: String = sqlx::query_scalar("SELECT current_setting($1)")
            .bind(name)
            .fetch_one(&mut conn)
            .await?;
        out.insert(name.into(), json!(v));
    }
    conn.close().await?;
    Ok(Value::Object(out))
}

/// CPU time (seconds) of every process named `postgres` on the machine: the server's backends
/// and its background processes (whoever else uses the server counts too).
pub(crate) fn postgres_cpu_secs() -> f64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    let mut total = 0.0;
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(comm) = std::fs::read_to_string(format!("/proc/{pid}/comm")) else {
            continue;
        };
        if comm.trim() == "postgres" {
            total += cpu_secs(Some(pid)).unwrap_or(0.0);
        }
    }
    total
}

/// Lines of a log at WARN and ERROR level, and the first few of them.
fn log_problems(log: &Path) -> Value {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let warn: Vec<&str> = text.lines().filter(|l| l.contains(" WARN ")).collect();
    let error: Vec<&str> = text.lines().filter(|l| l.contains(" ERROR ")).collect();
    json!({
        "log": log.display().to_string(),
        "warn_lines": warn.len(),
        "error_lines": error.len(),
        "first": warn.iter().chain(error.iter()).take(5).collect::<Vec<_>>(),
    })
}

/// Samples, every 20 ms until stopped, what the database's backends are doing
/// (`pg_stat_activity`: active and waiting on what, or idle): where PostgreSQL's time goes.
struct Waits {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<anyhow::Result<Value>>,
}

impl Waits {
    async fn start(url: &str) -> anyhow::Result<Waits> {
        let mut conn = options(url)?.connect().await?;
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            let mut tally: std::collections::BTreeMap<String, u64> = Default::default();
            let mut samples = 0u64;
            while !*stopped.borrow() {
                let rows: Vec<(Option<String>, Option<String>, Option<String>)> = sqlx::query_as(
                    "SELECT state, wait_event_type, wait_event FROM pg_stat_activity
                     WHERE datname = current_database() AND pid <> pg_backend_pid()",
                )
                .fetch_all(&mut conn)
                .await?;
                samples += 1;
                for (state, kind, event) in rows {
                    let what = match (state.as_deref(), kind, event) {
                        (Some("active"), Some(k), Some(e)) => format!("active, waiting: {k}:{e}"),
                        (Some("active"), _, _) => "active, on CPU".to_string(),
                        (Some(s), _, _) => s.to_string(),
                        (None, _, _) => "unknown".to_string(),
                    };
                    *tally.entry(what).or_default() += 1;
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(20)) => {}
                    _ = stopped.changed() => {}
                }
            }
            conn.close().await?;
            // Mean backends in each state per sample.
            let mean: serde_json::Map<String, Value> = tally
                .into_iter()
                .map(|(k, v)| {
                    (
                        k,
                        json!((v as f64 / samples.max(1) as f64 * 100.0).round() / 100.0),
                    )
                })
                .collect();
            Ok(json!({ "samples": samples, "mean_backends": mean }))
        });
        Ok(Waits { stop, task })
    }

    async fn finish(self) -> Value {
        let _ = self.stop.send(true);
        match self.task.await {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => json!({ "error": format!("{e:#}") }),
            Err(e) => json!({ "error": e.to_string() }),
        }
    }
}

fn serve_env(data: &Path, extra: &[(&'static str, String)]) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("EASEL_DATA_DIR", data.display().to_string()),
        ("EASEL_LISTEN", "127.0.0.1:0".into()),
    ];
    env.extend(extra.iter().cloned());
    env
}

pub async fn run(ctx: &Ctx, admin_url: &str) -> anyhow::Result<(Vec<Row>, Value)> {
    let dir = ctx.work.join("postgres");
    fresh_dir(&dir)?;
    let settings = server_settings(admin_url).await?;
    println!(
        "  PostgreSQL {} (fsync={}, synchronous_commit={})",
        settings["server_version"].as_str().unwrap_or("?"),
        settings["fsync"].as_str().unwrap_or("?"),
        settings["synchronous_commit"].as_str().unwrap_or("?"),
    );
    let mut rows = Vec::new();
    let (r, submit) = submits(ctx, &dir, admin_url).await?;
    rows.extend(r);
    let (r, lifecycle) = lifecycles(ctx, &dir, admin_url).await?;
    rows.extend(r);
    Ok((
        rows,
        json!({ "server": settings, "submit": submit, "lifecycle": lifecycle }),
    ))
}

/// One wrk measurement of durable submits at `CLIENTS` connections against a fresh easel.
struct SubmitRun {
    wrk: WrkResult,
    easel_cpu_us: f64,
    postgres_cpu_us: f64,
    log: Value,
    /// On PostgreSQL: what its backends did during the measured run.
    waits: Option<Value>,
}

async fn submit_once(
    ctx: &Ctx,
    data: &Path,
    store_env: &[(&'static str, String)],
    sample: Option<&str>,
) -> anyhow::Result<SubmitRun> {
    let mut extra = vec![
        ("EASEL_WORKERS", "0".to_string()),
        // Workers are stopped, so every submitted task stays queued.
        (
            "EASEL_PLANS__SELF-HOSTED__MAX_PENDING",
            "4000000000".to_string(),
        ),
    ];
    extra.extend(store_env.iter().cloned());
    let server = Server::start(
        &ctx.easel,
        &["serve"],
        &serve_env(data, &extra),
        data,
        "easel",
    )
    .await?;
    let key = server.key.clone().context("easel printed no first key")?;
    let env = [("EASEL_BENCH_KEY", key)];
    let url = server.url("/api/v1/imagine");
    ctx.wrk
        .run("submit.lua", &url, CLIENTS, ctx.plan.warmup_secs, &env)
        .await?;
    let waits = match sample {
        Some(db) => Some(Waits::start(db).await?),
        None => None,
    };
    let cpu0 = cpu_secs(Some(server.pid()))?;
    let pg0 = postgres_cpu_secs();
    let w = ctx
        .wrk
        .run("submit.lua", &url, CLIENTS, ctx.plan.run_secs, &env)
        .await?;
    let waits = match waits {
        Some(w) => Some(w.finish().await),
        None => None,
    };
    let per = |secs: f64| secs * 1e6 / w.requests.max(1) as f64;
    let easel_cpu_us = per(cpu_secs(Some(server.pid()))? - cpu0);
    let postgres_cpu_us = per(postgres_cpu_secs() - pg0);
    let log = server.log.clone();
    server.stop(Duration::from_secs(60)).await?;
    crate::submit::check(&w, "easel")?;
    Ok(SubmitRun {
        wrk: w,
        easel_cpu_us,
        postgres_cpu_us,
        log: log_problems(&log),
        waits,
    })
}

/// Durable submits at 64 clients: SQLite (`sqlite_synchronous=full`), then PostgreSQL.
async fn submits(ctx: &Ctx, dir: &Path, admin_url: &str) -> anyhow::Result<(Vec<Row>, Value)> {
    let secs = ctx.plan.run_secs;
    println!("  submit, {CLIENTS} clients: easel on SQLite (sync=full), {secs} s");
    let data = dir.join("submit-sqlite");
    let lite = submit_once(
        ctx,
        &data,
        &[("EASEL_SQLITE_SYNCHRONOUS", "full".to_string())],
        None,
    )
    .await?;
    let _ = std::fs::remove_dir_all(&data);

    println!("  submit, {CLIENTS} clients: easel on PostgreSQL (a fresh database), {secs} s");
    let db = Scratch::create(admin_url, "submit").await?;
    let data = dir.join("submit-postgres");
    let pg = submit_once(
        ctx,
        &data,
        &[("EASEL_DATABASE_URL", db.url.clone())],
        Some(&db.url),
    )
    .await;
    db.drop_db().await?;
    let pg = pg?;
    let _ = std::fs::remove_dir_all(&data);

    let (s, p) = (&lite.wrk, &pg.wrk);
    let rate = Row::new(
        "postgres",
        format!("postgres: submit, {CLIENTS} clients, durable: requests/s (baseline: SQLite, sync=full)"),
        "req/s",
    )
    .value(&[p.rps()])
    .baseline(&[s.rps()]);
    let met = rate.ratio.is_some_and(|r| r >= 0.5);
    let rows = vec![
        rate.goal(">= 0.5x SQLite", met),
        Row::new(
            "postgres",
            format!("postgres: submit, {CLIENTS} clients, durable: p50 / p99 (baseline: SQLite)"),
            "ms",
        )
        .value(&[p.p50_ms(), p.p99_ms()])
        .baseline(&[s.p50_ms(), s.p99_ms()])
        .goal("p99 < 10 ms", p.p99_ms() < 10.0),
        Row::new(
            "postgres",
            format!(
                "postgres: submit, {CLIENTS} clients: easel's CPU time per request \
                 (baseline: on SQLite)"
            ),
            "µs",
        )
        .value(&[pg.easel_cpu_us])
        .baseline(&[lite.easel_cpu_us]),
        Row::new(
            "postgres",
            format!("postgres: submit, {CLIENTS} clients: PostgreSQL's CPU time per request"),
            "µs",
        )
        .value(&[pg.postgres_cpu_us]),
    ];
    let details = json!({
        "clients": CLIENTS,
        "sqlite": { "wrk": s, "easel_cpu_us_per_request": lite.easel_cpu_us, "log": lite.log },
        "postgres": {
            "wrk": p,
            "easel_cpu_us_per_request": pg.easel_cpu_us,
            "postgres_cpu_us_per_request": pg.postgres_cpu_us,
            "backends": pg.waits,
            "log": pg.log,
        },
        "ratio": p.rps() / s.rps(),
    });
    Ok((rows, details))
}

/// Where a lifecycle run keeps its tasks.
enum Store {
    Sqlite,
    Postgres { url: String },
}

/// One task's life, in Unix microseconds.
struct Life {
    task_status: String,
    delivery_status: Option<String>,
    created: i64,
    started: Option<i64>,
    finished: Option<i64>,
    attempted: Option<i64>,
    recorded: Option<i64>,
    arrived: Option<i64>,
}

/// The times of every task and its delivery, as stored.
const LIFE_SQL: &str = "SELECT d.task_id, t.status, d.status, t.created_at, t.started_at,
        t.finished_at, (SELECT MIN(a.attempted_at) FROM webhook_attempts a
                        WHERE a.delivery_id = d.id),
        d.updated_at
    FROM tasks t LEFT JOIN webhook_deliveries d ON d.task_seq = t.seq";

type LifeRow = (
    Option<String>,
    String,
    Option<String>,
    i64,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
);

/// How many deliveries the store has recorded as delivered.
const DELIVERED_SQL: &str = "SELECT COUNT(*) FROM webhook_deliveries WHERE status = 'delivered'";

enum Db {
    Sqlite(sqlx::SqlitePool),
    Postgres(sqlx::PgPool),
}

impl Db {
    async fn open(store: &Store, data: &Path) -> anyhow::Result<Db> {
        Ok(match store {
            Store::Sqlite => Db::Sqlite(open_db(&data.join("easel.db"), true).await?),
            Store::Postgres { url } => Db::Postgres(
                PgPoolOptions::new()
                    .max_connections(1)
                    .connect_with(options(url)?)
                    .await?,
            ),
        })
    }

    async fn delivered(&self) -> anyhow::Result<i64> {
        Ok(match self {
            Db::Sqlite(p) => sqlx::query_scalar(DELIVERED_SQL).fetch_one(p).await?,
            Db::Postgres(p) => sqlx::query_scalar(DELIVERED_SQL).fetch_one(p).await?,
        })
    }

    async fn lives(&self) -> anyhow::Result<Vec<LifeRow>> {
        Ok(match self {
            Db::Sqlite(p) => sqlx::query_as(LIFE_SQL).fetch_all(p).await?,
            Db::Postgres(p) => sqlx::query_as(LIFE_SQL).fetch_all(p).await?,
        })
    }

    async fn close(self) {
        match self {
            Db::Sqlite(p) => p.close().await,
            Db::Postgres(p) => p.close().await,
        }
    }
}

/// p50 and p99 of some durations in microseconds, in milliseconds.
fn percentiles_ms(mut us: Vec<i64>) -> [f64; 2] {
    if us.is_empty() {
        return [f64::NAN, f64::NAN];
    }
    us.sort_unstable();
    let at = |q: f64| {
        let i = ((us.len() as f64 * q).ceil() as usize).clamp(1, us.len()) - 1;
        us[i] as f64 / 1000.0
    };
    [at(0.50), at(0.99)]
}

/// The phases of a task's life, in the order they happen: (label, JSON name).
const PHASES: &[(&str, &str)] = &[
    ("submit (HTTP answer)", "submit"),
    ("queued (created to claimed)", "queued"),
    ("generated (claimed to finished)", "generated"),
    ("outbox (finished to webhook sent)", "outbox"),
    ("webhook (sent to arrival)", "webhook"),
    ("whole life (created to webhook arrival)", "whole"),
];

/// One lifecycle run's figures.
struct LifeRun {
    rate: f64,
    /// p50 and p99 (ms) of each of `PHASES`.
    phases: Vec<[f64; 2]>,
    /// CPU time per task of the easel processes (all nodes) and of PostgreSQL's, in ms.
    easel_cpu_ms: f64,
    postgres_cpu_ms: f64,
    details: Value,
}

/// `n` tasks with webhooks through `nodes` easel nodes on `store`, until each is delivered.
async fn lifecycle(
    ctx: &Ctx,
    dir: &Path,
    store: &Store,
    nodes: usize,
    receiver: &Receiver,
    hook_url: &str,
) -> anyhow::Result<LifeRun> {
    let n = ctx.plan.pg_e2e_tasks;
    let size = ctx.plan.pg_image_size;
    let workers = ctx.plan.workers;
    fresh_dir(dir)?;
    receiver.take();
    let mut servers = Vec::new();
    for node in 0..nodes {
        let data = dir.join(format!("node{node}"));
        let mut extra = vec![
            ("EASEL_WORKERS", workers.to_string()),
            ("EASEL_IMAGE_SIZE", size.to_string()),
            (
                "EASEL_PLANS__SELF-HOSTED__MAX_PENDING",
                (n + 100).to_string(),
            ),
            ("EASEL_WEBHOOK_ALLOW_HTTP", "true".to_string()),
            ("EASEL_WEBHOOK_ALLOW_PRIVATE", "true".to_string()),
        ];
        match store {
            Store::Sqlite => extra.push(("EASEL_SQLITE_SYNCHRONOUS", "full".to_string())),
            Store::Postgres { url } => extra.push(("EASEL_DATABASE_URL", url.clone())),
        }
        // One after the other: the first creates the schema and the first key.
        servers.push(
            Server::start(
                &ctx.easel,
                &["serve"],
                &serve_env(&data, &extra),
                &data,
                "easel",
            )
            .await?,
        );
    }
    let key = servers[0]
        .key
        .clone()
        .context("easel printed no first key")?;
    let urls: Vec<String> = servers.iter().map(|s| s.url("/api/v1/imagine")).collect();
    let client = reqwest::Client::new();
    let cpu0 = cpu_of(&servers)?;
    let pg0 = postgres_cpu_secs();
    let waits = match store {
        Store::Postgres { url } => Some(Waits::start(url).await?),
        Store::Sqlite => None,
    };
    let started_ms = now_ms();
    let started = Instant::now();
    // Submitted 8 at a time, as the end-to-end benchmark does; task i goes to node i % nodes.
    let submitted: Vec<anyhow::Result<i64>> = futures::stream::iter(0..n)
        .map(|i| {
            let (client, url, key) = (&client, &urls[i % nodes], &key);
            async move {
                let t = Instant::now();
                let res = client
                    .post(url)
                    .header("Authorization", key)
                    .json(&json!({
                        "prompt": PROMPTS[i % PROMPTS.len()],
                        "webhook_url": hook_url,
                    }))
                    .send()
                    .await?;
                if !res.status().is_success() {
                    bail!("imagine answered {}: {}", res.status(), res.text().await?);
                }
                Ok(t.elapsed().as_micros() as i64)
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    let submit_us = submitted
        .into_iter()
        .collect::<anyhow::Result<Vec<i64>>>()?;
    let submit_secs = started.elapsed().as_secs_f64();

    let limit = Duration::from_secs(ctx.plan.e2e_timeout_secs);
    let all_arrived = receiver.wait_for(n, limit).await;
    // Then until every delivery is recorded as delivered (records are group-committed).
    let db = Db::open(store, &dir.join("node0")).await?;
    let mut all_recorded = false;
    while started.elapsed() < limit + Duration::from_secs(30) {
        if db.delivered().await? as usize >= n {
            all_recorded = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let wall_secs = started.elapsed().as_secs_f64();
    let cpu = cpu_since(&servers, &cpu0)?;
    let pg_cpu = postgres_cpu_secs() - pg0;
    let waits = match waits {
        Some(w) => Some(w.finish().await),
        None => None,
    };
    let lives = db.lives().await?;
    db.close().await;
    let mut logs = Vec::new();
    for s in servers {
        let log = s.log.clone();
        s.stop(Duration::from_secs(60)).await?;
        logs.push(log_problems(&log));
    }
    let arrivals = receiver.take();
    if !all_arrived || !all_recorded {
        bail!(
            "{} of {n} webhooks arrived and {} deliveries were recorded as delivered within \
             {limit:?}; logs: {}",
            arrivals.len(),
            lives
                .iter()
                .filter(|l| l.2.as_deref() == Some("delivered"))
                .count(),
            serde_json::to_string(&logs)?
        );
    }
    let arrived: std::collections::HashMap<String, i64> = arrivals.iter().cloned().collect();
    let lives: Vec<Life> = lives
        .into_iter()
        .map(|r| Life {
            arrived: r.0.as_ref().and_then(|id| arrived.get(id).copied()),
            task_status: r.1,
            delivery_status: r.2,
            created: r.3 * 1000,
            started: r.4.map(|t| t * 1000),
            finished: r.5.map(|t| t * 1000),
            attempted: r.6.map(|t| t * 1000),
            recorded: r.7.map(|t| t * 1000),
        })
        .collect();
    anyhow::ensure!(
        lives.len() == n,
        "the store holds {} tasks, {n} submitted",
        lives.len()
    );
    let failed = lives.iter().filter(|l| l.task_status != "finished").count();
    let undelivered = lives
        .iter()
        .filter(|l| l.delivery_status.as_deref() != Some("delivered"))
        .count();
    let duplicates = arrivals.len() - arrived.len();
    let span = |f: fn(&Life) -> Option<(i64, i64)>| -> Vec<i64> {
        lives.iter().filter_map(f).map(|(a, b)| b - a).collect()
    };
    let phases = vec![
        percentiles_ms(submit_us),
        percentiles_ms(span(|l| Some((l.created, l.started?)))),
        percentiles_ms(span(|l| Some((l.started?, l.finished?)))),
        percentiles_ms(span(|l| Some((l.finished?, l.attempted?)))),
        percentiles_ms(span(|l| Some((l.attempted?, l.arrived?)))),
        percentiles_ms(span(|l| Some((l.created, l.arrived?)))),
    ];
    // The end of the run: the last webhook's arrival (every delivery was then seen recorded as
    // `delivered` above; the store keeps no time of that record, `updated_at` is the attempt's
    // end as the dispatcher measured it).
    let last_arrival_ms = arrivals.iter().map(|a| a.1).max().unwrap_or(0) / 1000;
    let last_recorded_ms = lives.iter().filter_map(|l| l.recorded).max().unwrap_or(0) / 1000;
    let last_finished_ms = lives.iter().filter_map(|l| l.finished).max().unwrap_or(0) / 1000;
    let life_secs = (last_arrival_ms - started_ms) as f64 / 1000.0;
    let rate = n as f64 / life_secs;
    let mut phase_json = serde_json::Map::new();
    for ((_, name), [p50, p99]) in PHASES.iter().zip(&phases) {
        phase_json.insert(name.to_string(), json!({ "p50_ms": p50, "p99_ms": p99 }));
    }
    let details = json!({
        "tasks": n,
        "nodes": nodes,
        "workers_per_node": workers,
        "image_size": size,
        "submit_secs": submit_secs,
        "secs_to_last_arrival": life_secs,
        "secs_to_last_updated_at": (last_recorded_ms - started_ms) as f64 / 1000.0,
        "secs_to_last_finished": (last_finished_ms - started_ms) as f64 / 1000.0,
        "wall_secs": wall_secs,
        "tasks_per_sec": rate,
        "failed_tasks": failed,
        "not_delivered": undelivered,
        "duplicate_webhooks": duplicates,
        "easel_cpu_ms_per_task": cpu * 1000.0 / n as f64,
        "postgres_cpu_ms_per_task": match store {
            Store::Postgres { .. } => Some(pg_cpu * 1000.0 / n as f64),
            Store::Sqlite => None,
        },
        "phases": phase_json,
        "backends": waits,
        "logs": logs,
    });
    if failed > 0 || undelivered > 0 {
        bail!("{failed} tasks did not finish and {undelivered} were not delivered: {details}");
    }
    let _ = std::fs::remove_dir_all(dir);
    Ok(LifeRun {
        rate,
        phases,
        easel_cpu_ms: cpu * 1000.0 / n as f64,
        postgres_cpu_ms: pg_cpu * 1000.0 / n as f64,
        details,
    })
}

/// Tasks through their whole life: SQLite with one node, PostgreSQL with one and two.
async fn lifecycles(ctx: &Ctx, dir: &Path, admin_url: &str) -> anyhow::Result<(Vec<Row>, Value)> {
    let n = ctx.plan.pg_e2e_tasks;
    let size = ctx.plan.pg_image_size;
    let workers = ctx.plan.workers;
    let (receiver, hook_url) = Receiver::start().await?;

    // What the generator alone does at this size on as many threads as a node has workers: the
    // ceiling of one node.
    println!("  generator alone: {n} tasks, {size} px, on {workers} threads");
    let generator_secs = tokio::task::spawn_blocking(move || {
        crate::e2e::generator_alone(0, n, workers, size).as_secs_f64()
    })
    .await?;
    let generator_rate = n as f64 / generator_secs;

    println!("  whole life: {n} tasks, {size} px, easel on SQLite (sync=full), 1 node");
    let lite = lifecycle(
        ctx,
        &dir.join("life-sqlite"),
        &Store::Sqlite,
        1,
        &receiver,
        &hook_url,
    )
    .await?;

    let mut pg_runs = Vec::new();
    for nodes in [1, 2] {
        println!("  whole life: {n} tasks, {size} px, easel on PostgreSQL, {nodes} node(s)");
        let db = Scratch::create(admin_url, &format!("life{nodes}")).await?;
        let store = Store::Postgres {
            url: db.url.clone(),
        };
        let run = lifecycle(
            ctx,
            &dir.join(format!("life-postgres-{nodes}")),
            &store,
            nodes,
            &receiver,
            &hook_url,
        )
        .await;
        db.drop_db().await?;
        pg_runs.push((nodes, run?));
    }

    let mut rows = vec![Row::new(
        "postgres",
        format!(
            "postgres: whole life: the generator alone, {size} px, on {workers} threads \
             (no store, no HTTP): tasks/s (baseline: SQLite, 1 node)"
        ),
        "tasks/s",
    )
    .value(&[generator_rate])
    .baseline(&[lite.rate])];
    for (nodes, run) in &pg_runs {
        let setting = format!(
            "{} node{}, {workers} workers each",
            nodes,
            if *nodes == 1 { "" } else { "s" }
        );
        rows.push(
            Row::new(
                "postgres",
                format!(
                    "postgres: whole life, {} tasks with webhooks, {size} px, {setting}: \
                     tasks/s (baseline: SQLite, 1 node)",
                    count(n)
                ),
                "tasks/s",
            )
            .value(&[run.rate])
            .baseline(&[lite.rate]),
        );
        for ((label, _), (p, s)) in PHASES.iter().zip(run.phases.iter().zip(&lite.phases)) {
            rows.push(
                Row::new(
                    "postgres",
                    format!("postgres: whole life, {setting}: {label}, p50 / p99"),
                    "ms",
                )
                .value(p)
                .baseline(s),
            );
        }
        rows.push(
            Row::new(
                "postgres",
                format!("postgres: whole life, {setting}: easel's CPU time per task (all nodes)"),
                "ms",
            )
            .value(&[run.easel_cpu_ms])
            .baseline(&[lite.easel_cpu_ms]),
        );
        rows.push(
            Row::new(
                "postgres",
                format!("postgres: whole life, {setting}: PostgreSQL's CPU time per task"),
                "ms",
            )
            .value(&[run.postgres_cpu_ms]),
        );
    }
    let details = json!({
        "generator_alone_tasks_per_sec": generator_rate,
        "sqlite_1_node": lite.details,
        "postgres_1_node": pg_runs[0].1.details,
        "postgres_2_nodes": pg_runs[1].1.details,
    });
    Ok((rows, details))
}
