//! The events benchmark (issue 31): Server-Sent Events streams held open by many subscribers.
//!
//! - One node (SQLite): 2,000 streams of `GET /api/v1/events` (the account's tasks) opened on a
//!   server with nothing to say; its resident memory per open stream (beside the same server
//!   before they opened) and its CPU use over 10 s while they are open and idle (beside its CPU
//!   use over 10 s before).
//! - Then tasks run one after another on a mock ComfyUI in this process (tests/it/backend_mocks:
//!   `progress` frames over its WebSocket, 10 per job over 2 s); every frame becomes a `progress`
//!   event at each of the 2,000 subscribers. The latency is from the moment the mock sends a
//!   frame to the moment a subscriber reads the event: both are seen by this process's one
//!   monotonic clock, so no server change or clock sync is needed. Also: the spread between the
//!   first and the last subscriber to get one event.
//! - 10,000 streams on a fresh node, the same figures (memory, idle CPU, then one task's events
//!   at every subscriber), where the machine's hard limit on open files allows it.
//! - Two nodes on PostgreSQL, when its server answers: the tasks run on node A (which has the
//!   backend), 500 subscribers are on node B (no workers); the same latency, across nodes.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use serde_json::{json, Value};

use crate::backend_mocks::comfyui::ComfyMock;
use crate::backends::percentile;
use crate::postgres::Scratch;
use crate::proc::{cpu_secs, fresh_dir, Server};
use crate::report::{count, Row};
use crate::subscribers::{Frames, Subscribers};
use crate::Ctx;

/// Streams open on the one node.
const STREAMS: usize = 2_000;
/// Streams open on the one node of the many-streams run.
const MANY_STREAMS: usize = 10_000;
/// Streams open on node B of the two PostgreSQL nodes.
const PG_STREAMS: usize = 500;
/// How long CPU use is measured, before and while the streams are open.
const WINDOW: Duration = Duration::from_secs(10);
/// `progress` frames per job of the mock ComfyUI, and how long its job runs.
const STEPS: u32 = 10;
const JOB: Duration = Duration::from_secs(2);

/// One latency run's figures.
struct Latency {
    /// From the mock's frame to each subscriber's event, ms.
    each_ms: Vec<f64>,
    /// From the mock's frame to the first subscriber's event, ms.
    first_ms: Vec<f64>,
    /// From the first subscriber's event to the last's, per event, ms.
    spread_ms: Vec<f64>,
    /// From the mock's frame to each subscriber's event, by the frame's percentage, ms: where in
    /// a job the slow arrivals are.
    by_percentage: std::collections::BTreeMap<i64, Vec<f64>>,
    frames: usize,
    /// Events expected at the subscribers (frames x streams) and those that arrived.
    expected: usize,
    matched: usize,
    /// From the mock's frame to a later event of the same percentage at a subscriber that had
    /// it already (a stored progress with its new preview repeats the percentage), ms.
    repeat_ms: Vec<f64>,
}

impl Latency {
    fn details(&self) -> Value {
        let p = |v: &[f64]| {
            json!({ "p50": percentile(v, 0.5), "p99": percentile(v, 0.99),
                                    "max": v.iter().copied().fold(f64::NAN, f64::max) })
        };
        json!({
            "frames": self.frames,
            "events_expected": self.expected,
            "events_matched": self.matched,
            "repeats": self.repeat_ms.len(),
            "frame_to_repeat_ms": p(&self.repeat_ms),
            "frame_to_event_ms": p(&self.each_ms),
            "frame_to_first_subscriber_ms": p(&self.first_ms),
            "first_to_last_subscriber_ms": p(&self.spread_ms),
            "frame_to_event_ms_by_percentage": self.by_percentage.iter()
                .map(|(percentage, v)| (percentage.to_string(), p(v)))
                .collect::<serde_json::Map<_, _>>(),
        })
    }
}

/// The mock ComfyUI, and an easel.toml naming it as the one backend.
async fn mock_backend(dir: &Path) -> anyhow::Result<(Arc<ComfyMock>, std::path::PathBuf)> {
    let mock = Arc::new(ComfyMock {
        delay: JOB,
        ..ComfyMock::default()
    });
    let url = mock.start().await;
    // The mock steps as the graph's sampler says, as ComfyUI does: the fixture with STEPS.
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/comfyui/txt2img.json"
    );
    let mut graph: Value = serde_json::from_slice(&std::fs::read(fixture)?)?;
    graph["3"]["inputs"]["steps"] = json!(STEPS);
    std::fs::create_dir_all(dir)?;
    let workflow = dir.join("txt2img.json");
    std::fs::write(&workflow, serde_json::to_vec(&graph)?)?;
    let workflow = workflow.display();
    let config = dir.join("easel.toml");
    std::fs::write(
        &config,
        format!(
            "[[backends]]\nname = \"comfy\"\nkind = \"comfyui\"\nurl = \"{url}\"\n\
             concurrency = 1\ntimeout = \"60s\"\nworkflow = \"{workflow}\"\n"
        ),
    )?;
    Ok((mock, config))
}

/// Room on a server for `streams` streams of one account, all from one address (the soak's
/// server gets it too).
pub(crate) fn stream_room(streams: usize) -> [(&'static str, String); 4] {
    [
        ("EASEL_MAX_STREAMS_PER_ACCOUNT", (streams + 100).to_string()),
        ("EASEL_MAX_STREAMS", (streams + 100).to_string()),
        ("EASEL_MAX_CONNECTIONS", (streams + 1_000).to_string()),
        ("EASEL_MAX_CONNECTIONS_PER_ADDRESS", "0".into()),
    ]
}

/// What every server of this benchmark gets: room for the streams.
fn env(data: &Path, streams: usize) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("EASEL_DATA_DIR", data.display().to_string()),
        ("EASEL_LISTEN", "127.0.0.1:0".into()),
        ("EASEL_IMAGE_SIZE", "256".into()),
    ];
    env.extend(stream_room(streams));
    env
}

fn http(streams: usize) -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .pool_max_idle_per_host(streams)
        .build()?)
}

/// Run `tasks` imagine tasks on `submit_to`, one after another (each awaited with
/// `Prefer: wait`); their ids.
async fn run_tasks(
    http: &reqwest::Client,
    submit_to: &Server,
    key: &str,
    tasks: usize,
) -> anyhow::Result<Vec<String>> {
    let mut ids = Vec::new();
    for i in 0..tasks {
        let answer: Value = http
            .post(submit_to.url("/api/v1/imagine"))
            .header("Authorization", key)
            .json(&json!({ "prompt": format!("a lighthouse watched by many, {i}") }))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let id = answer["task_id"].as_str().context("a task id")?.to_string();
        let record: Value = http
            .get(submit_to.url(&format!("/api/v1/tasks/{id}")))
            .header("Authorization", key)
            .header("Prefer", "wait=60")
            .timeout(Duration::from_secs(90))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        ensure!(record["status"] == "finished", "a task ended so: {record}");
        ids.push(id);
    }
    // The last events reach every subscriber.
    tokio::time::sleep(Duration::from_secs(1)).await;
    Ok(ids)
}

/// Match what the subscribers got against the mock's frames: a frame's latency at a subscriber
/// is to the first event there that says its percentage; a later one that says it again (the
/// stored progress, with a new preview) is a repeat, timed apart.
fn latency(
    frames: &Frames,
    ids: &[String],
    got: Vec<Vec<crate::subscribers::Arrival>>,
) -> anyhow::Result<Latency> {
    let sent = frames.by_task(ids)?;
    let streams = got.len();
    let mut each_ms = Vec::new();
    let mut repeat_ms = Vec::new();
    let mut by_percentage = std::collections::BTreeMap::<i64, Vec<f64>>::new();
    let mut arrivals: HashMap<(String, i64), (Instant, Instant)> = HashMap::new();
    for mut subscriber in got {
        subscriber.sort_by_key(|(_, _, at)| *at);
        let mut seen = std::collections::HashSet::new();
        for (task, percentage, at) in subscriber {
            let key = (task, percentage);
            let Some(sent_at) = sent.get(&key) else {
                // Not from a frame (5, 15, 80...: easel's own steps of the job).
                continue;
            };
            let ms = at.saturating_duration_since(*sent_at).as_secs_f64() * 1e3;
            if !seen.insert(key.clone()) {
                repeat_ms.push(ms);
                continue;
            }
            each_ms.push(ms);
            by_percentage.entry(key.1).or_default().push(ms);
            let seen = arrivals.entry(key).or_insert((at, at));
            seen.0 = seen.0.min(at);
            seen.1 = seen.1.max(at);
        }
    }
    let mut first_ms = Vec::new();
    let mut spread_ms = Vec::new();
    for (key, (first, last)) in &arrivals {
        first_ms.push(first.saturating_duration_since(sent[key]).as_secs_f64() * 1e3);
        spread_ms.push((*last - *first).as_secs_f64() * 1e3);
    }
    ensure!(
        !sent.is_empty() && !each_ms.is_empty(),
        "no progress event could be matched to the mock's {} frames",
        sent.len()
    );
    Ok(Latency {
        frames: sent.len(),
        expected: sent.len() * streams,
        matched: each_ms.len(),
        each_ms,
        first_ms,
        spread_ms,
        by_percentage,
        repeat_ms,
    })
}

pub async fn run(ctx: &Ctx, postgres: Option<&str>) -> anyhow::Result<(Vec<Row>, Value)> {
    let tasks = if ctx.plan.run_secs < 10 { 4 } else { 10 };
    crate::wait::raise_open_files(STREAMS as u64 * 2 + 1_000)?;
    let (mut rows, one) = one_node(ctx, STREAMS, tasks).await?;
    // The server inherits this process's limit; each of the two holds one end of every stream.
    let many = match crate::wait::raise_open_files(MANY_STREAMS as u64 + 2_000) {
        Ok(()) => {
            let (r, d) = one_node(ctx, MANY_STREAMS, 1).await?;
            rows.extend(r);
            d
        }
        Err(e) => json!(format!("skipped: {e:#}")),
    };
    let two = match postgres {
        Some(url) => {
            let (r, d) = two_nodes(ctx, url, tasks).await?;
            rows.extend(r);
            d
        }
        None => json!("skipped: PostgreSQL did not answer"),
    };
    Ok((
        rows,
        json!({ "one_node": one, "one_node_many_streams": many, "two_postgres_nodes": two }),
    ))
}

/// `streams` streams on one fresh node: its memory and CPU with them open and idle, then `tasks`
/// tasks' events at every one. The latency goal is for the run of [`STREAMS`].
async fn one_node(ctx: &Ctx, streams: usize, tasks: usize) -> anyhow::Result<(Vec<Row>, Value)> {
    let data = ctx.work.join(format!("events-{streams}"));
    fresh_dir(&data)?;
    let (mock, config) = mock_backend(&data).await?;
    let mut env = env(&data, streams);
    env.push(("EASEL_CONFIG", config.display().to_string()));
    env.push(("EASEL_WORKERS", "2".into()));
    let server = Server::start(&ctx.easel, &["serve"], &env, &data, "easel").await?;
    let key = server.key.clone().context("the first start prints a key")?;
    let http = http(streams)?;
    let pid = server.pid();

    // Idle: the same server, no streams, over the same window.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mem_before = server.mem()?;
    let cpu = cpu_secs(Some(pid))?;
    tokio::time::sleep(WINDOW).await;
    let idle_cpu = cpu_secs(Some(pid))? - cpu;

    let opened = Instant::now();
    let mut subscribers = Subscribers::start(&http, &server.url("/api/v1/events"), &key, streams);
    subscribers
        .wait_open(streams, Duration::from_secs(120))
        .await?;
    let open_secs = opened.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let cpu = cpu_secs(Some(pid))?;
    tokio::time::sleep(WINDOW).await;
    let open_cpu = cpu_secs(Some(pid))? - cpu;
    let mem_open = server.mem()?;

    let frames = Frames::record(&mock);
    let cpu = cpu_secs(Some(pid))?;
    let ran = Instant::now();
    let ids = run_tasks(&http, &server, &key, tasks).await?;
    let run_secs = ran.elapsed().as_secs_f64();
    let run_cpu = cpu_secs(Some(pid))? - cpu;
    let mem_after = server.mem()?;
    let got = subscribers.finish().await?;
    server.stop(Duration::from_secs(30)).await?;
    let lat = latency(&frames, &ids, got)?;

    let per_stream_kib = (mem_open.rss_mib - mem_before.rss_mib) * 1024.0 / streams as f64;
    let millicores = |secs: f64| secs * 1e3 / WINDOW.as_secs_f64();
    let n = count(streams);
    println!(
        "   {n} streams open in {open_secs:.1} s: RSS {:.1} -> {:.1} MiB ({:.1} after {tasks} \
         tasks); CPU {idle_cpu:.2} s idle, {open_cpu:.2} s with the streams open, over {} s; \
         {run_cpu:.1} s over the {run_secs:.0} s of tasks; {} of {} events matched to frames, \
         and {} repeats",
        mem_before.rss_mib,
        mem_open.rss_mib,
        mem_after.rss_mib,
        WINDOW.as_secs(),
        lat.matched,
        lat.expected,
        lat.repeat_ms.len(),
    );
    let (p50, p99) = (
        percentile(&lat.each_ms, 0.5),
        percentile(&lat.each_ms, 0.99),
    );
    let latency_row = Row::new(
        "events",
        format!(
            "events: backend's progress report to the event at each of {n} subscribers, \
             one node (SQLite), p50 / p99"
        ),
        "ms",
    )
    .value(&[p50, p99]);
    let rows = vec![
        Row::new(
            "events",
            format!("events: resident memory per open stream ({n} streams, one node)"),
            "KiB",
        )
        .value(&[per_stream_kib])
        .goal("< 16 KiB", per_stream_kib < 16.0),
        Row::new(
            "events",
            format!("events: server CPU while {n} streams are open and idle, vs no streams"),
            "millicores",
        )
        .value(&[millicores(open_cpu)])
        .baseline(&[millicores(idle_cpu)])
        .goal("near zero (< 20 millicores)", millicores(open_cpu) < 20.0),
        if streams == STREAMS {
            latency_row.goal("p99 < 50 ms", p99 < 50.0)
        } else {
            latency_row
        },
        Row::new(
            "events",
            format!("events: first to last of {n} subscribers to get one event, p50 / p99"),
            "ms",
        )
        .value(&[
            percentile(&lat.spread_ms, 0.5),
            percentile(&lat.spread_ms, 0.99),
        ]),
        Row::new(
            "events",
            format!(
                "events: the stored progress with a new preview, repeating a frame's \
                 percentage, at each of {n} subscribers: from the frame, p50 / p99"
            ),
            "ms",
        )
        .value(&[
            percentile(&lat.repeat_ms, 0.5),
            percentile(&lat.repeat_ms, 0.99),
        ]),
    ];
    let details = json!({
        "streams": streams,
        "tasks": tasks,
        "frames_per_task": STEPS,
        "job_secs": JOB.as_secs_f64(),
        "secs_to_open": open_secs,
        "rss_before_mib": mem_before.rss_mib,
        "rss_open_mib": mem_open.rss_mib,
        "rss_after_tasks_mib": mem_after.rss_mib,
        "peak_mib": mem_after.peak_mib,
        "per_stream_kib": per_stream_kib,
        "idle_cpu_secs": idle_cpu,
        "open_idle_cpu_secs": open_cpu,
        "window_secs": WINDOW.as_secs(),
        "tasks_secs": run_secs,
        "tasks_cpu_secs": run_cpu,
        "latency": lat.details(),
    });
    Ok((rows, details))
}

async fn two_nodes(ctx: &Ctx, admin_url: &str, tasks: usize) -> anyhow::Result<(Vec<Row>, Value)> {
    let dir = ctx.work.join("events-postgres");
    fresh_dir(&dir)?;
    let db = Scratch::create(admin_url, "events").await?;
    let result = two_nodes_on(ctx, &dir, &db.url, tasks).await;
    db.drop_db().await?;
    result
}

async fn two_nodes_on(
    ctx: &Ctx,
    dir: &Path,
    db: &str,
    tasks: usize,
) -> anyhow::Result<(Vec<Row>, Value)> {
    let (a_dir, b_dir) = (dir.join("node-a"), dir.join("node-b"));
    let (mock, config) = mock_backend(&a_dir).await?;
    let mut a_env = env(&a_dir, PG_STREAMS);
    a_env.push(("EASEL_CONFIG", config.display().to_string()));
    a_env.push(("EASEL_WORKERS", "2".into()));
    a_env.push(("EASEL_DATABASE_URL", db.to_string()));
    let a = Server::start(&ctx.easel, &["serve"], &a_env, &a_dir, "easel").await?;
    let key = a.key.clone().context("the first start prints a key")?;
    let mut b_env = env(&b_dir, PG_STREAMS);
    b_env.push(("EASEL_WORKERS", "0".into()));
    b_env.push(("EASEL_DATABASE_URL", db.to_string()));
    let b = Server::start(&ctx.easel, &["serve"], &b_env, &b_dir, "easel").await?;
    let http = http(PG_STREAMS)?;

    let mut subscribers = Subscribers::start(&http, &b.url("/api/v1/events"), &key, PG_STREAMS);
    subscribers
        .wait_open(PG_STREAMS, Duration::from_secs(60))
        .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let frames = Frames::record(&mock);
    let ids = run_tasks(&http, &a, &key, tasks).await?;
    let got = subscribers.finish().await?;
    a.stop(Duration::from_secs(30)).await?;
    b.stop(Duration::from_secs(30)).await?;
    let lat = latency(&frames, &ids, got)?;
    let n = count(PG_STREAMS);
    println!(
        "   two PostgreSQL nodes, {n} subscribers on the node without workers: {} of {} events \
         matched to frames, and {} repeats",
        lat.matched,
        lat.expected,
        lat.repeat_ms.len()
    );
    let (p50, p99) = (
        percentile(&lat.each_ms, 0.5),
        percentile(&lat.each_ms, 0.99),
    );
    let rows = vec![Row::new(
        "events",
        format!(
            "events: backend's progress report to the event at each of {n} subscribers on the \
             other PostgreSQL node, p50 / p99"
        ),
        "ms",
    )
    .value(&[p50, p99])
    .goal("p99 < 100 ms", p99 < 100.0)];
    let details = json!({
        "streams": PG_STREAMS,
        "tasks": tasks,
        "latency": lat.details(),
    });
    Ok((rows, details))
}
