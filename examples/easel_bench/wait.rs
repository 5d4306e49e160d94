//! The wait benchmark (issue 19): 5,000 requests held by `Prefer: wait` on one node. Tasks are
//! submitted to a server without workers (so they stay queued), then 5,000 `GET
//! /api/v1/tasks/{id}` with `Prefer: wait=60` are sent, 100 per task, and held. Figures: the
//! server's resident memory per waiting request (beside the same server before the waits, measured
//! in the same run), its CPU use while they wait (beside its idle CPU use over as long, before the
//! waits), and, once the tasks are canceled, how long the waiters took to be answered.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use serde_json::{json, Value};

use crate::backends::percentile;
use crate::proc::{cpu_secs, fresh_dir, Server};
use crate::report::{self, Row};
use crate::Ctx;

/// Requests held at once.
const WAITERS: usize = 5_000;
/// Tasks they wait on (each waited on by WAITERS / TASKS requests).
const TASKS: usize = 50;
/// How long CPU use is measured, idle and while the requests wait.
const WINDOW: Duration = Duration::from_secs(10);

pub async fn run(ctx: &Ctx) -> anyhow::Result<(Vec<Row>, Value)> {
    let data = ctx.work.join("wait");
    fresh_dir(&data)?;
    let env = vec![
        ("EASEL_DATA_DIR", data.display().to_string()),
        ("EASEL_LISTEN", "127.0.0.1:0".into()),
        // Nothing runs: the tasks stay queued for as long as the benchmark needs.
        ("EASEL_WORKERS", "0".into()),
        ("EASEL_MAX_CONNECTIONS", (WAITERS + 1_000).to_string()),
        // Every waiter comes from this one address.
        ("EASEL_MAX_CONNECTIONS_PER_ADDRESS", "0".into()),
    ];
    raise_open_files(WAITERS as u64 * 2 + 1_000)?;
    let server = Server::start(&ctx.easel, &["serve"], &env, &data, "easel").await?;
    let key = server.key.clone().context("the first start prints a key")?;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(WAITERS)
        .timeout(Duration::from_secs(120))
        .build()?;
    // The submits keep no connection open: a kept one would be counted idle and then taken by a
    // waiter, and the count of connections below would fall one short.
    let submitter = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(120))
        .build()?;
    let mut ids = Vec::with_capacity(TASKS);
    for i in 0..TASKS {
        let answer: Value = submitter
            .post(server.url("/api/v1/imagine"))
            .header("Authorization", &key)
            .json(&json!({ "prompt": format!("a task to wait on, {i}") }))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        ids.push(answer["task_id"].as_str().context("a task id")?.to_string());
    }
    drop(submitter);
    let pid = server.pid();
    // The server's sockets, not all its files: SQLite's and the log's come and go on their own.
    let sockets = || open_sockets(pid);
    let mut sockets_idle = sockets()?;
    // The submits' connections are closed by the server once it reads their ends.
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = sockets()?;
        if now == sockets_idle {
            break;
        }
        sockets_idle = now;
    }

    // Idle: the same server, nothing waiting, over the same window.
    let mem_before = server.mem()?;
    let cpu = cpu_secs(Some(pid))?;
    tokio::time::sleep(WINDOW).await;
    let idle_cpu = cpu_secs(Some(pid))? - cpu;

    // 5,000 requests waiting, one connection each.
    let sent = Instant::now();
    let mut waiters = tokio::task::JoinSet::new();
    for i in 0..WAITERS {
        let (http, url, key) = (
            http.clone(),
            server.url(&format!("/api/v1/tasks/{}", ids[i % TASKS])),
            key.clone(),
        );
        waiters.spawn(async move {
            let answer = http
                .get(url)
                .header("Authorization", key)
                .header("Prefer", "wait=60")
                .send()
                .await?;
            let status = answer.status().as_u16();
            let body: Value = answer.json().await?;
            Ok::<_, anyhow::Error>((status, body, Instant::now()))
        });
    }
    // Every connection accepted, then a moment for the requests to be read and registered.
    let deadline = Instant::now() + Duration::from_secs(60);
    while sockets()? < sockets_idle + WAITERS {
        ensure!(
            Instant::now() < deadline,
            "only {} of {WAITERS} connections reached the server within 60 s",
            sockets()?.saturating_sub(sockets_idle)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let settled = sent.elapsed();
    let cpu = cpu_secs(Some(pid))?;
    tokio::time::sleep(WINDOW).await;
    let waiting_cpu = cpu_secs(Some(pid))? - cpu;
    let mem_waiting = server.mem()?;
    ensure!(
        waiters.len() == WAITERS,
        "{} waiting requests were answered before their tasks ended",
        WAITERS - waiters.len()
    );

    // End the tasks: every waiter is answered with its task canceled.
    let canceled = Instant::now();
    for id in &ids {
        http.post(server.url(&format!("/api/v1/tasks/{id}/cancel")))
            .header("Authorization", &key)
            .json(&json!({}))
            .send()
            .await?
            .error_for_status()?;
    }
    let mut answered_ms = Vec::with_capacity(WAITERS);
    while let Some(done) = waiters.join_next().await {
        let (status, body, at) = done??;
        ensure!(
            status == 200 && body["status"] == "canceled",
            "a waiter was answered {status}: {body}"
        );
        answered_ms.push(at.saturating_duration_since(canceled).as_secs_f64() * 1e3);
    }
    answered_ms.sort_by(f64::total_cmp);
    server.stop(Duration::from_secs(30)).await?;

    let per_request_kib = (mem_waiting.rss_mib - mem_before.rss_mib) * 1024.0 / WAITERS as f64;
    // Thousandths of a core: CPU milliseconds per second.
    let millicores = |secs: f64| secs * 1e3 / WINDOW.as_secs_f64();
    let waiting = report::count(WAITERS);
    println!(
        "   {waiting} waiting requests: RSS {:.1} -> {:.1} MiB; CPU {:.3} s idle, {:.3} s while \
         waiting, over {} s; settled after {:.1} s",
        mem_before.rss_mib,
        mem_waiting.rss_mib,
        idle_cpu,
        waiting_cpu,
        WINDOW.as_secs(),
        settled.as_secs_f64()
    );
    let p50 = percentile(&answered_ms, 0.5);
    let p99 = percentile(&answered_ms, 0.99);
    let rows = vec![
        Row::new(
            "wait",
            format!("resident memory per waiting request ({waiting} waiting)"),
            "KiB",
        )
        .value(&[per_request_kib])
        .goal("informational", true),
        Row::new(
            "wait",
            format!("server CPU while {waiting} requests wait, vs idle"),
            "millicores",
        )
        .value(&[millicores(waiting_cpu)])
        .baseline(&[millicores(idle_cpu)])
        .goal(
            "near zero (< 20 millicores)",
            millicores(waiting_cpu) < 20.0,
        ),
        Row::new(
            "wait",
            format!("all {waiting} answered after their tasks are canceled, p50 / p99"),
            "ms",
        )
        .value(&[p50, p99]),
    ];
    let details = json!({
        "waiters": WAITERS,
        "tasks": TASKS,
        "rss_before_mib": mem_before.rss_mib,
        "rss_waiting_mib": mem_waiting.rss_mib,
        "per_request_kib": per_request_kib,
        "idle_cpu_secs": idle_cpu,
        "waiting_cpu_secs": waiting_cpu,
        "window_secs": WINDOW.as_secs(),
        "answered_after_cancel_ms": { "p50": p50, "p99": p99, "max": answered_ms.last() },
    });
    Ok((rows, details))
}

/// How many sockets process `pid` holds open.
fn open_sockets(pid: u32) -> anyhow::Result<usize> {
    let mut n = 0;
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd"))? {
        // A file closed between the listing and the look is not a socket.
        let Ok(target) = std::fs::read_link(fd?.path()) else {
            continue;
        };
        n += usize::from(target.to_string_lossy().starts_with("socket:"));
    }
    Ok(n)
}

/// Let this process (and the server it starts, which inherits it) open `want` files: the soft
/// limit raised to the hard one, as easel raises its own; an error when that is fewer.
pub(crate) fn raise_open_files(want: u64) -> anyhow::Result<()> {
    let (soft, hard) = easel::http::open_files::raise_to_hard().context("getrlimit failed")?;
    ensure!(
        soft >= want,
        "this benchmark needs {want} open files; the hard limit is {hard}"
    );
    Ok(())
}
