//! The soak (issue 51): one `easel serve` on its embedded defaults (SQLite, local files, the
//! built-in generator) under a steady mixed load for a long while (30 minutes unless
//! `--soak-minutes` says otherwise), to find what grows. Not part of a plain `bench/run`: it runs
//! only when named (`bench/run --only soak`).
//!
//! The load, all at once and at fixed rates (each request on its own task, so that a slow answer
//! does not slow the rate):
//! - [`SUBMITS_PER_SEC`] `imagine` submits, each with a `webhook_url` on a receiver of this
//!   process that answers 500 to one delivery in [`FAIL_ONE_IN`] (easel retries those);
//! - [`FETCHES_PER_SEC`] `POST /api/v1/fetch` of tasks submitted lately;
//! - an upload (`POST /api/v1/upload`, a 64 px PNG) every [`UPLOAD_EVERY`];
//! - [`STREAMS_ALL`] account event streams that take every event and [`STREAMS_FINISHED`] that
//!   take finished tasks only (`?status=finished`), open from the start to the end;
//! - retention at its shortest (`retention` and `upload_retention` 1 minute, swept every 10 s),
//!   so that images and uploads are deleted while new ones come.
//!
//! Every [`SAMPLE`] it notes the server's resident memory, its open files, the database's bytes
//! (with its WAL) per task stored, the bytes of the image files, its CPU, and the submits' and
//! fetches' latencies. The goal: none of resident memory, open files, database bytes per task and
//! submit p99 grows by more than 10% over the last two thirds of the run (for 30 minutes: the
//! mean of minutes 10 to 12 against the mean of minutes 28 to 30). `bench/soak-plot.py` draws
//! the samples from the results' JSON.

use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use axum::extract::State;
use axum::http::StatusCode;
use bytes::Bytes;
use serde_json::{json, Value};

use crate::backends::percentile;
use crate::proc::{cpu_secs, fresh_dir, Server};
use crate::report::{count, Row};
use crate::subscribers::Subscribers;
use crate::Ctx;

const SUBMITS_PER_SEC: f64 = 4.0;
const FETCHES_PER_SEC: f64 = 20.0;
const UPLOAD_EVERY: Duration = Duration::from_secs(2);
const STREAMS_ALL: usize = 25;
const STREAMS_FINISHED: usize = 475;
const SAMPLE: Duration = Duration::from_secs(10);
/// The receiver answers 500 to one delivery in this many (10%).
const FAIL_ONE_IN: usize = 10;
/// The most a figure may grow over the last two thirds of the run.
const GROWTH_GOAL: f64 = 1.10;
/// How long, after the load stops, every task's webhook has to have been answered 200.
const DRAIN: Duration = Duration::from_secs(180);

/// The webhook receiver: fails one request in [`FAIL_ONE_IN`], notes the tasks answered 200.
#[derive(Default)]
struct Hooks {
    received: AtomicUsize,
    failed: AtomicUsize,
    delivered: Mutex<HashSet<String>>,
}

async fn hook(State(hooks): State<Arc<Hooks>>, body: Bytes) -> StatusCode {
    let n = hooks.received.fetch_add(1, Ordering::Relaxed) + 1;
    if n % FAIL_ONE_IN == 0 {
        hooks.failed.fetch_add(1, Ordering::Relaxed);
        return StatusCode::INTERNAL_SERVER_ERROR;
    }
    let record: Value = serde_json::from_slice(&body).unwrap_or_default();
    if let Some(id) = record["task_id"].as_str() {
        hooks.delivered.lock().unwrap().insert(id.to_string());
    }
    StatusCode::OK
}

async fn start_hooks() -> anyhow::Result<(Arc<Hooks>, String)> {
    let hooks = Arc::new(Hooks::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/hook", listener.local_addr()?);
    let app = axum::Router::new()
        .route("/hook", axum::routing::post(hook))
        .with_state(hooks.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((hooks, url))
}

/// What the load loops share: the ids submitted, the latencies since the last sample, errors.
#[derive(Default)]
struct Load {
    ids: Mutex<Vec<String>>,
    submit_ms: Mutex<Vec<f64>>,
    fetch_ms: Mutex<Vec<f64>>,
    uploads: AtomicUsize,
    errors: Mutex<Vec<String>>,
}

impl Load {
    fn error(&self, what: String) {
        let mut errors = self.errors.lock().unwrap();
        if errors.len() < 20 {
            errors.push(what);
        }
    }
}

/// What each request of the load needs: the client, the server, its key, the receiver's URL,
/// and where to note what came back.
#[derive(Clone)]
struct Caller {
    http: reqwest::Client,
    base: String,
    key: String,
    hook_url: String,
    load: Arc<Load>,
}

impl Caller {
    /// The answer to `what` when it has the `expected` status; otherwise the failure noted.
    fn answered(
        &self,
        what: &str,
        sent: reqwest::Result<reqwest::Response>,
        expected: u16,
    ) -> Option<reqwest::Response> {
        match sent {
            Ok(r) if r.status() == expected => Some(r),
            Ok(r) => {
                self.load.error(format!("{what}: {}", r.status()));
                None
            }
            Err(e) => {
                self.load.error(format!("{what}: {e}"));
                None
            }
        }
    }

    /// The `n`th imagine, with a webhook.
    async fn submit(&self, n: u64) {
        let body = json!({
            "prompt": format!("a lighthouse at dusk, study {n}"),
            "webhook_url": self.hook_url,
        });
        let t = Instant::now();
        let sent = self
            .http
            .post(format!("{}/api/v1/imagine", self.base))
            .header("Authorization", &self.key)
            .json(&body)
            .send()
            .await;
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        if let Some(r) = self.answered("submit", sent, 200) {
            let answer: Value = r.json().await.unwrap_or_default();
            if let Some(id) = answer["task_id"].as_str() {
                self.load.submit_ms.lock().unwrap().push(ms);
                self.load.ids.lock().unwrap().push(id.to_string());
            }
        }
    }

    /// A fetch of one of the last 200 tasks submitted: what a polling client asks for.
    async fn fetch(&self, n: u64) {
        let id = {
            let ids = self.load.ids.lock().unwrap();
            if ids.is_empty() {
                return;
            }
            let back = (n as usize * 7919) % ids.len().min(200);
            ids[ids.len() - 1 - back].clone()
        };
        let t = Instant::now();
        let sent = self
            .http
            .post(format!("{}/api/v1/fetch", self.base))
            .header("Authorization", &self.key)
            .json(&json!({ "task_id": id }))
            .send()
            .await;
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        if let Some(r) = self.answered("fetch", sent, 200) {
            let _ = r.bytes().await;
            self.load.fetch_ms.lock().unwrap().push(ms);
        }
    }

    /// The `n`th upload, a 64 px PNG of its own.
    async fn upload(&self, n: u64) {
        let sent = self
            .http
            .post(format!("{}/api/v1/upload", self.base))
            .header("Authorization", &self.key)
            .header("Content-Type", "image/png")
            .body(crate::backends::photo_like_png(64, n))
            .send()
            .await;
        if self.answered("upload", sent, 201).is_some() {
            self.load.uploads.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// One sample of the server.
#[derive(Clone, Debug, serde::Serialize)]
struct Sample {
    secs: f64,
    rss_mib: f64,
    open_files: usize,
    tasks: usize,
    db_bytes: u64,
    db_bytes_per_task: f64,
    image_bytes: u64,
    cpu_ms_per_sec: f64,
    submit_p50_ms: f64,
    submit_p99_ms: f64,
    fetch_p99_ms: f64,
    /// The window's own submit latencies, for the p99 over several samples.
    #[serde(skip)]
    submit_ms: Vec<f64>,
    hooks_received: usize,
    hooks_failed: usize,
}

fn open_files(pid: u32) -> anyhow::Result<usize> {
    Ok(std::fs::read_dir(format!("/proc/{pid}/fd"))?.count())
}

/// The bytes of the files under `dir`, recursively.
fn bytes_under(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => bytes_under(&e.path()),
            Ok(_) => e.metadata().map(|m| m.len()).unwrap_or(0),
            Err(_) => 0,
        })
        .sum()
}

fn db_bytes(data: &Path) -> u64 {
    ["easel.db", "easel.db-wal", "easel.db-shm"]
        .iter()
        .map(|f| {
            std::fs::metadata(data.join(f))
                .map(|m| m.len())
                .unwrap_or(0)
        })
        .sum()
}

/// Run `each` every `period` (skipping ticks missed), each call on its own task, until `stop`.
fn every<F, Fut>(period: Duration, stop: tokio::sync::watch::Receiver<bool>, each: F)
where
    F: Fn(u64) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut n = 0u64;
        while !*stop.borrow() {
            tick.tick().await;
            tokio::spawn(each(n));
            n += 1;
        }
    });
}

pub async fn run(ctx: &Ctx, minutes: f64) -> anyhow::Result<(Vec<Row>, Value)> {
    anyhow::ensure!(minutes >= 3.0, "--soak-minutes must be at least 3");
    let dir = ctx.work.join("soak");
    fresh_dir(&dir)?;
    let data = dir.join("data");
    let streams = STREAMS_ALL + STREAMS_FINISHED;
    let mut env = vec![
        ("EASEL_DATA_DIR", data.display().to_string()),
        ("EASEL_LISTEN", "127.0.0.1:0".into()),
        ("EASEL_IMAGE_SIZE", "64".into()),
        ("EASEL_WEBHOOK_ALLOW_HTTP", "true".into()),
        ("EASEL_WEBHOOK_ALLOW_PRIVATE", "true".into()),
        ("EASEL_RETENTION", "1m".into()),
        ("EASEL_UPLOAD_RETENTION", "1m".into()),
        ("EASEL_RETENTION_SWEEP_INTERVAL", "10s".into()),
    ];
    env.extend(crate::events::stream_room(streams));
    let server = Server::start(&ctx.easel, &["serve"], &env, &dir, "soak").await?;
    let key = server.key.clone().context("the first start prints a key")?;
    let base = server.url("");
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?;
    let streaming = reqwest::Client::new();
    let (hooks, hook_url) = start_hooks().await?;

    let mut all = Subscribers::start(&streaming, &server.url("/api/v1/events"), &key, STREAMS_ALL);
    let mut finished_only = Subscribers::start(
        &streaming,
        &server.url("/api/v1/events?status=finished"),
        &key,
        STREAMS_FINISHED,
    );
    all.wait_open(STREAMS_ALL, Duration::from_secs(60)).await?;
    finished_only
        .wait_open(STREAMS_FINISHED, Duration::from_secs(60))
        .await?;

    let load = Arc::new(Load::default());
    let caller = Caller {
        http,
        base,
        key,
        hook_url,
        load: load.clone(),
    };
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let period = |per_sec: f64| Duration::from_secs_f64(1.0 / per_sec);
    let each = caller.clone();
    every(period(SUBMITS_PER_SEC), stopped.clone(), move |n| {
        let caller = each.clone();
        async move { caller.submit(n).await }
    });
    let each = caller.clone();
    every(period(FETCHES_PER_SEC), stopped.clone(), move |n| {
        let caller = each.clone();
        async move { caller.fetch(n).await }
    });
    let each = caller.clone();
    every(UPLOAD_EVERY, stopped, move |n| {
        let caller = each.clone();
        async move { caller.upload(n).await }
    });

    let total = Duration::from_secs_f64(minutes * 60.0);
    let started = Instant::now();
    let mut samples: Vec<Sample> = Vec::new();
    let mut cpu_before = cpu_secs(Some(server.pid()))?;
    let mut at = started;
    println!(
        "   soak: {minutes} min of {SUBMITS_PER_SEC} submits/s, {FETCHES_PER_SEC} fetches/s, \
         an upload every {} s and {streams} open streams",
        UPLOAD_EVERY.as_secs()
    );
    while started.elapsed() < total {
        tokio::time::sleep_until((at + SAMPLE).into()).await;
        let now = Instant::now();
        let cpu = cpu_secs(Some(server.pid()))?;
        let window = now.duration_since(at).as_secs_f64();
        at = now;
        let tasks = load.ids.lock().unwrap().len();
        let db = db_bytes(&data);
        let submit_ms = std::mem::take(&mut *load.submit_ms.lock().unwrap());
        let fetch_ms = std::mem::take(&mut *load.fetch_ms.lock().unwrap());
        let sample = Sample {
            secs: started.elapsed().as_secs_f64(),
            rss_mib: server.mem()?.rss_mib,
            open_files: open_files(server.pid())?,
            tasks,
            db_bytes: db,
            db_bytes_per_task: db as f64 / tasks.max(1) as f64,
            image_bytes: bytes_under(&data.join("files")),
            cpu_ms_per_sec: (cpu - cpu_before) * 1000.0 / window,
            submit_p50_ms: percentile(&submit_ms, 0.5),
            submit_p99_ms: percentile(&submit_ms, 0.99),
            fetch_p99_ms: percentile(&fetch_ms, 0.99),
            submit_ms,
            hooks_received: hooks.received.load(Ordering::Relaxed),
            hooks_failed: hooks.failed.load(Ordering::Relaxed),
        };
        cpu_before = cpu;
        if samples.len() % 6 == 0 {
            println!(
                "   {:>5.0} s: {:.1} MiB, {} files, {} tasks, {:.0} B/task in the database, \
                 {:.1} MiB of images, {:.0} ms CPU/s, submit p99 {:.2} ms",
                sample.secs,
                sample.rss_mib,
                sample.open_files,
                sample.tasks,
                sample.db_bytes_per_task,
                sample.image_bytes as f64 / 1048576.0,
                sample.cpu_ms_per_sec,
                sample.submit_p99_ms
            );
        }
        samples.push(sample);
    }
    let _ = stop.send(true);

    // Every task's webhook answered 200 in the end (the failed ones retried).
    let ids: Vec<String> = load.ids.lock().unwrap().clone();
    let drained = Instant::now();
    let undelivered = loop {
        let missing = {
            let delivered = hooks.delivered.lock().unwrap();
            ids.iter().filter(|id| !delivered.contains(*id)).count()
        };
        if missing == 0 || drained.elapsed() > DRAIN {
            break missing;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    // Every stream stayed open to the end (one that ended is an error here).
    all.finish().await?;
    finished_only.finish().await?;
    let errors = load.errors.lock().unwrap().clone();
    server.stop(Duration::from_secs(30)).await?;
    if !errors.is_empty() {
        bail!("requests failed during the soak: {}", errors.join("; "));
    }

    // The last two thirds: the mean of the window that starts them against the last window.
    let secs = total.as_secs_f64();
    let span = secs / 15.0;
    let early: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.secs > secs / 3.0 && s.secs <= secs / 3.0 + span)
        .collect();
    let late: Vec<&Sample> = samples.iter().filter(|s| s.secs > secs - span).collect();
    anyhow::ensure!(
        !early.is_empty() && !late.is_empty(),
        "too few samples to compare"
    );
    let mean = |of: &[&Sample], f: &dyn Fn(&Sample) -> f64| -> f64 {
        of.iter().map(|s| f(s)).sum::<f64>() / of.len() as f64
    };
    let p99 = |of: &[&Sample]| -> f64 {
        let all: Vec<f64> = of.iter().flat_map(|s| s.submit_ms.clone()).collect();
        percentile(&all, 0.99)
    };
    let min = |s: f64| {
        format!("{:.3}", s / 60.0)
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    };
    let windows = format!(
        "minutes {}-{} against {}-{}",
        min(secs / 3.0),
        min(secs / 3.0 + span),
        min(secs - span),
        min(secs)
    );
    let mut rows = Vec::new();
    let figures: [(&str, &'static str, f64, f64); 4] = [
        (
            "resident memory",
            "MiB",
            mean(&early, &|s| s.rss_mib),
            mean(&late, &|s| s.rss_mib),
        ),
        (
            "open files",
            "files",
            mean(&early, &|s| s.open_files as f64),
            mean(&late, &|s| s.open_files as f64),
        ),
        (
            "database bytes per task",
            "bytes",
            mean(&early, &|s| s.db_bytes_per_task),
            mean(&late, &|s| s.db_bytes_per_task),
        ),
        ("submit p99", "ms", p99(&early), p99(&late)),
    ];
    // The later window is the row's figure, the earlier its baseline: the ratio is the growth.
    for (what, unit, before, after) in figures {
        let ratio = after / before;
        rows.push(
            Row::new("soak", format!("soak: {what}, {windows}"), unit)
                .value(&[after])
                .baseline(&[before])
                .goal(
                    format!("<= {GROWTH_GOAL:.2}x"),
                    ratio.is_finite() && ratio <= GROWTH_GOAL,
                ),
        );
    }
    let last = samples.last().context("no samples")?;
    rows.push(
        Row::new(
            "soak",
            format!(
                "soak: tasks, uploads, webhook requests (of them answered 500), over {minutes} min"
            ),
            "",
        )
        .value(&[
            last.tasks as f64,
            load.uploads.load(Ordering::Relaxed) as f64,
            hooks.received.load(Ordering::Relaxed) as f64,
            hooks.failed.load(Ordering::Relaxed) as f64,
        ]),
    );
    rows.push(
        Row::new(
            "soak",
            format!(
                "soak: tasks whose webhook was never answered 200 within {} s of the end",
                DRAIN.as_secs()
            ),
            "",
        )
        .value(&[undelivered as f64])
        .goal("0", undelivered == 0),
    );
    println!(
        "   soak: {} tasks, {} uploads, {} webhook requests ({} answered 500), {} undelivered",
        count(last.tasks),
        count(load.uploads.load(Ordering::Relaxed)),
        count(hooks.received.load(Ordering::Relaxed)),
        count(hooks.failed.load(Ordering::Relaxed)),
        undelivered
    );
    let details = json!({
        "minutes": minutes,
        "submits_per_sec": SUBMITS_PER_SEC,
        "fetches_per_sec": FETCHES_PER_SEC,
        "upload_every_secs": UPLOAD_EVERY.as_secs(),
        "streams": streams,
        "fail_one_in": FAIL_ONE_IN,
        "undelivered": undelivered,
        "samples": samples,
    });
    Ok((rows, details))
}
