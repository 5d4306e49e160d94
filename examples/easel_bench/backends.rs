//! The backends benchmark: a release `easel serve` in front of simulated model backends (this
//! process serves OpenAI's `POST /v1/images/generations` on local ports, each job taking a
//! fixed time), measuring
//!
//! - the share of the backends' capacity easel keeps busy while a backlog of tasks is queued:
//!   the time the backends spent on jobs, summed, over the window's length times their total
//!   concurrency (goal: at least 95%, with one backend and with three of different speeds, and
//!   with one backend and four workers, whose jobs are handed its one slot in line order);
//! - easel's own time per task on top of the backend's: a task's time from `started_at` (the
//!   worker took it) to `finished_at` in its record, minus the time the backend spent on its
//!   job, with one task at a time, the backend answering PNG or JPEG photo-like pictures
//!   (goal: under 5 ms median at 1024 px), against the disk alone: this process writing and
//!   fsyncing the same four files as easel does, right after, on the same disk; and, at 1024 px,
//!   against the answer's transfer alone: a bare client in this process fetching the same answer
//!   from a simulated backend, from the answer made to the body held. At 1024 px also with
//!   `sqlite_synchronous = normal`, under which easel fsyncs nothing;
//! - what encoding a 1024 px grid takes: PNG with easel's fast settings, JPEG with the
//!   jpeg-encoder crate easel uses for the grid of JPEG answers, JPEG with the image crate's;
//! - what keeping a task's four answers takes after an idle pause (base64 decoded, metadata
//!   dropped, headers read), easel's way against all four files side by side.
//!
//! The window of the busy share runs from one second after the first job started (easel warm)
//! to the start of the last job (after which the queue is empty and slots fall idle by design).

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use base64::Engine;
use bytes::Bytes;
use serde_json::{json, Value};

use crate::proc::{fresh_dir, Server};
use crate::report::Row;
use crate::Ctx;

const BUSY_GOAL: f64 = 95.0;
/// Issue 51's goal: easel's own time per task beyond the backend's and beyond the disk's part
/// (the baseline measured in the same run), median, at 1024 px.
const BEYOND_DISK_GOAL_MS: f64 = 2.0;
/// The images' long side, px; and a small size, to tell easel's fixed cost per task (HTTP, the
/// store, the files' fsyncs) from its image work (decoding, the grid, encoding).
const IMAGE_SIZE: u32 = 512;
const LARGE_IMAGE_SIZE: u32 = 1024;
const SMALL_IMAGE_SIZE: u32 = 64;

/// What the simulated backend answers with.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Answer {
    Png,
    Jpeg,
}

impl Answer {
    fn name(self) -> &'static str {
        match self {
            Answer::Png => "png",
            Answer::Jpeg => "jpeg",
        }
    }
}

/// One job as the simulated backend saw it.
struct Span {
    prompt: String,
    start: Instant,
    end: Instant,
}

/// A backend that takes `delay` per job and answers `n` copies of one image of the size asked.
struct Sim {
    delay: Duration,
    answer: Answer,
    spans: Mutex<Vec<Span>>,
    /// The whole answer per size and count, made once: the simulated backend's own CPU time
    /// (encoding the picture, base64, writing megabytes of JSON) stays out of the figures.
    answers: Mutex<HashMap<(String, usize), Bytes>>,
}

async fn generations(State(sim): State<Arc<Sim>>, Json(body): Json<Value>) -> Response {
    let start = Instant::now();
    tokio::time::sleep(sim.delay).await;
    let size = body["size"].as_str().unwrap_or("64x64").to_string();
    let n = body["n"].as_u64().unwrap_or(1) as usize;
    let answer = sim
        .answers
        .lock()
        .unwrap()
        .entry((size, n))
        .or_insert_with_key(|(size, n)| {
            let image = picture(size, sim.answer);
            let data: Vec<Value> = (0..*n).map(|_| json!({"b64_json": image})).collect();
            Bytes::from(serde_json::to_vec(&json!({"created": 0, "data": data})).unwrap())
        })
        .clone();
    sim.spans.lock().unwrap().push(Span {
        prompt: body["prompt"].as_str().unwrap_or("").to_string(),
        start,
        end: Instant::now(),
    });
    ([(header::CONTENT_TYPE, "application/json")], answer).into_response()
}

/// A photo-like `size` px square as base64 PNG, as a simulated backend answers it.
pub(crate) fn picture_png(size: u32) -> String {
    picture(&format!("{size}x{size}"), Answer::Png)
}

/// A photo-like picture as base64 PNG or JPEG (quality 90): a gradient with seeded noise, so
/// that it compresses as a photograph does, not as a flat colour or a clean gradient.
fn picture(size: &str, answer: Answer) -> String {
    let (w, h) = size
        .split_once('x')
        .and_then(|(w, h)| Some((w.parse::<u32>().ok()?, h.parse::<u32>().ok()?)))
        .unwrap_or((64, 64));
    let img = photo_like(w, h, 7);
    let bytes = match answer {
        Answer::Png => easel::images::encode_png(&img),
        Answer::Jpeg => image_crate_jpeg(&img),
    };
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// `img` as a quality 90 JPEG by the image crate's encoder, which takes RGB only (the conversion
/// is part of its cost): what the simulated backend answers, and the grid encoder easel did not
/// choose.
fn image_crate_jpeg(img: &easel::images::RgbaImage) -> Vec<u8> {
    let rgb: Vec<u8> = img
        .data
        .chunks_exact(4)
        .flat_map(|p| [p[0], p[1], p[2]])
        .collect();
    let mut out = Vec::new();
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 90)
        .encode(&rgb, img.width, img.height, image::ExtendedColorType::Rgb8)
        .expect("a JPEG of a well-formed image");
    out
}

/// A photo-like `size` px square as PNG bytes, its noise seeded by `seed` (the soak's uploads).
pub(crate) fn photo_like_png(size: u32, seed: u64) -> Vec<u8> {
    easel::images::encode_png(&photo_like(size, size, seed))
}

/// A `w` x `h` gradient with noise of up to +-12 per channel from a xorshift seeded by `seed`.
fn photo_like(w: u32, h: u32, seed: u64) -> easel::images::RgbaImage {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut noise = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % 25) as i32 - 12
    };
    let mut img = easel::images::RgbaImage::new(w, h);
    for y in 0..h {
        for x in 0..w {
            let i = ((y * w + x) * 4) as usize;
            let base = [
                (x * 255 / w.max(1)) as i32,
                (y * 255 / h.max(1)) as i32,
                (((x + y) * 255) / (w + h).max(1)) as i32,
            ];
            for (out, value) in img.data[i..i + 3].iter_mut().zip(base) {
                *out = (value + noise()).clamp(0, 255) as u8;
            }
        }
    }
    img
}

/// The file the simulated backend answers at `size` px, decoded from its base64.
fn answer_file(size: u32, answer: Answer) -> anyhow::Result<Vec<u8>> {
    let b64 = picture(&format!("{size}x{size}"), answer);
    Ok(base64::engine::general_purpose::STANDARD.decode(b64)?)
}

/// The disk's part of a task, in this process alone: `files` written into a new folder two
/// levels below `root` (as easel's `files/<task>/<attempt>/`) and made durable as easel makes a
/// task's files durable, each file's fsync and those of the three folders above them all at
/// once; `rounds` rounds, each one's time in ms.
fn disk_alone(root: &Path, files: &[Vec<u8>], rounds: usize) -> anyhow::Result<Vec<f64>> {
    fresh_dir(root)?;
    let mut ms = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let task = root.join(format!("task-{round}"));
        let attempt = task.join("attempt");
        let started = Instant::now();
        std::fs::create_dir_all(&attempt)?;
        let created = (0..files.len())
            .map(|i| std::fs::File::create(attempt.join(i.to_string())))
            .collect::<Result<Vec<_>, _>>()?;
        std::thread::scope(|s| {
            let writes = created.into_iter().zip(files).map(|(mut file, bytes)| {
                s.spawn(move || {
                    file.write_all(bytes)?;
                    file.sync_all()
                })
            });
            let folders = [attempt.as_path(), task.as_path(), root]
                .map(|dir| s.spawn(move || std::fs::File::open(dir)?.sync_all()));
            let handles: Vec<_> = writes.chain(folders).collect();
            handles
                .into_iter()
                .try_for_each(|h| h.join().expect("a file write does not panic"))
        })?;
        ms.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(ms)
}

/// The answer's transfer alone: a bare client in this process asks a simulated backend (no
/// delay) for the four images `rounds` times, one at a time, each time's ms from the backend's
/// answer made (its span's end, as in easel's rows) to the client holding the whole body. What
/// of easel's time per task is the answer's bytes crossing the loopback, which no code in easel
/// takes below while it reads a whole answer before its images.
async fn transfer_alone(size: u32, answer: Answer, rounds: usize) -> anyhow::Result<Vec<f64>> {
    let (sim, url) = start_sim(0, answer).await?;
    let client = reqwest::Client::new();
    let mut ms = Vec::with_capacity(rounds);
    // One more round than measured: the first makes the answer and opens the connection.
    for round in 0..=rounds {
        let prompt = format!("transfer {round}");
        let res = client
            .post(format!("{url}/images/generations"))
            .json(&json!({"prompt": prompt, "n": 4, "size": format!("{size}x{size}")}))
            .send()
            .await?
            .error_for_status()?;
        let body = res.bytes().await?;
        let held = Instant::now();
        if body.is_empty() {
            bail!("the simulated backend answered nothing");
        }
        let end = sim
            .spans
            .lock()
            .unwrap()
            .iter()
            .find(|s| s.prompt == prompt)
            .map(|s| s.end)
            .context("no span for the transfer's request")?;
        if round > 0 {
            ms.push((held - end).as_secs_f64() * 1000.0);
        }
    }
    Ok(ms)
}

/// Median milliseconds of `runs` runs of `f`.
fn time_ms(runs: usize, mut f: impl FnMut() -> usize) -> f64 {
    let mut ms = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        std::hint::black_box(f());
        ms.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    median(&ms)
}

async fn start_sim(delay_ms: u64, answer: Answer) -> anyhow::Result<(Arc<Sim>, String)> {
    let sim = Arc::new(Sim {
        delay: Duration::from_millis(delay_ms),
        answer,
        spans: Mutex::default(),
        answers: Mutex::default(),
    });
    let app = Router::new()
        .route("/v1/images/generations", post(generations))
        .route(
            "/v1/models",
            axum::routing::get(|| async { Json(json!({"data": []})) }),
        )
        .with_state(sim.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/v1", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((sim, url))
}

/// What one run measured.
struct Measured {
    /// Busy share of the capacity in the window, in %.
    busy: f64,
    window_secs: f64,
    /// Per task: (started_at to finished_at) minus the backend's job, in ms.
    overhead_ms: Vec<f64>,
    /// Per task: (created_at to finished_at) minus the backend's job, in ms.
    end_to_end_ms: Vec<f64>,
    jobs_per_backend: Vec<usize>,
}

/// Run `tasks` imagine tasks through easel (with `workers` workers) in front of backends of
/// `(ms per job, concurrency)`: all submitted at once (a backlog), or one after another.
#[allow(clippy::too_many_arguments)]
async fn measure(
    ctx: &Ctx,
    name: &str,
    backends: &[(u64, usize)],
    tasks: usize,
    workers: usize,
    one_at_a_time: bool,
    image_size: u32,
    answer: Answer,
    sync: &str,
) -> anyhow::Result<Measured> {
    let data = ctx.work.join(format!("backends-{name}"));
    fresh_dir(&data)?;
    let mut sims = Vec::new();
    let mut toml = String::new();
    for (i, (delay, concurrency)) in backends.iter().enumerate() {
        let (sim, url) = start_sim(*delay, answer).await?;
        toml.push_str(&format!(
            "[[backends]]\nname = \"sim-{i}\"\nkind = \"openai\"\nurl = \"{url}\"\n\
             concurrency = {concurrency}\ntimeout = \"60s\"\n\n"
        ));
        sims.push(sim);
    }
    let config = data.join("easel.toml");
    std::fs::write(&config, toml)?;
    let server = Server::start(
        &ctx.easel,
        &["serve"],
        &[
            ("EASEL_DATA_DIR", data.display().to_string()),
            ("EASEL_LISTEN", "127.0.0.1:0".into()),
            ("EASEL_CONFIG", config.display().to_string()),
            ("EASEL_IMAGE_SIZE", image_size.to_string()),
            ("EASEL_SQLITE_SYNCHRONOUS", sync.to_string()),
            ("EASEL_WORKERS", workers.to_string()),
        ],
        &data,
        "easel",
    )
    .await?;
    let client = Client {
        http: reqwest::Client::new(),
        base: server.url(""),
        key: server
            .key
            .clone()
            .context("a first key on a fresh data dir")?,
    };
    let mut records = Vec::with_capacity(tasks);
    if one_at_a_time {
        for i in 0..tasks {
            let id = client.submit(&format!("bench task {i}")).await?;
            records.push(client.finished(&id).await?);
        }
    } else {
        let mut ids = Vec::with_capacity(tasks);
        for i in 0..tasks {
            ids.push(client.submit(&format!("bench task {i}")).await?);
        }
        for id in &ids {
            records.push(client.finished(id).await?);
        }
    }
    server.stop(Duration::from_secs(10)).await?;

    let jobs_per_backend: Vec<usize> = sims.iter().map(|s| s.spans.lock().unwrap().len()).collect();
    let spans: Vec<Span> = sims
        .iter()
        .flat_map(|s| std::mem::take(&mut *s.spans.lock().unwrap()))
        .collect();
    let by_prompt: HashMap<&str, &Span> = spans.iter().map(|s| (s.prompt.as_str(), s)).collect();
    let ms = |record: &Value, field: &str| -> anyhow::Result<f64> {
        let at = record[field].as_str().context("a time")?;
        Ok(chrono::DateTime::parse_from_rfc3339(at)?.timestamp_millis() as f64)
    };
    let mut overhead_ms = Vec::new();
    let mut end_to_end_ms = Vec::new();
    for record in &records {
        let prompt = record["prompt"].as_str().unwrap_or("");
        let span = by_prompt
            .get(prompt)
            .with_context(|| format!("no backend job for {prompt:?}"))?;
        let job = (span.end - span.start).as_secs_f64() * 1000.0;
        let finished = ms(record, "finished_at")?;
        overhead_ms.push(finished - ms(record, "started_at")? - job);
        end_to_end_ms.push(finished - ms(record, "created_at")? - job);
    }

    let first = spans.iter().map(|s| s.start).min().context("no jobs")?;
    let from = first + Duration::from_secs(1);
    let to = spans.iter().map(|s| s.start).max().context("no jobs")?;
    if to <= from {
        bail!("{name}: the backlog ran out within a second; give it more tasks");
    }
    let busy = busy_secs(spans.iter().map(|s| (s.start, s.end)), from, to);
    let slots: usize = backends.iter().map(|(_, c)| c).sum();
    let window = (to - from).as_secs_f64();
    Ok(Measured {
        busy: 100.0 * busy / (window * slots as f64),
        window_secs: window,
        overhead_ms,
        end_to_end_ms,
        jobs_per_backend,
    })
}

/// The seconds of `jobs` (start, end) that fall between `from` and `to`.
pub(crate) fn busy_secs(
    jobs: impl Iterator<Item = (Instant, Instant)>,
    from: Instant,
    to: Instant,
) -> f64 {
    jobs.map(|(start, end)| {
        let (a, b) = (start.max(from), end.min(to));
        b.saturating_duration_since(a).as_secs_f64()
    })
    .sum()
}

struct Client {
    http: reqwest::Client,
    base: String,
    key: String,
}

impl Client {
    async fn submit(&self, prompt: &str) -> anyhow::Result<String> {
        let res = self
            .http
            .post(format!("{}/api/v1/imagine", self.base))
            .header("Authorization", &self.key)
            .json(&json!({ "prompt": prompt }))
            .send()
            .await?;
        let status = res.status();
        let answer: Value = res.json().await?;
        if status != 200 {
            bail!("imagine: {status} {answer}");
        }
        Ok(answer["task_id"]
            .as_str()
            .context("no task_id")?
            .to_string())
    }

    async fn finished(&self, id: &str) -> anyhow::Result<Value> {
        let deadline = Instant::now() + Duration::from_secs(300);
        while Instant::now() < deadline {
            let record: Value = self
                .http
                .get(format!("{}/api/v1/tasks/{id}", self.base))
                .header("Authorization", &self.key)
                .send()
                .await?
                .json()
                .await?;
            match record["status"].as_str() {
                Some("finished") => return Ok(record),
                Some("failed") => bail!("task {id} failed: {record}"),
                _ => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
        bail!("task {id} did not finish within 300 s")
    }
}

fn median(v: &[f64]) -> f64 {
    percentile(v, 0.5)
}

/// The `q` quantile of `v` (nearest rank); NaN for none. Shared by the benchmarks whose
/// samples are milliseconds in a list.
pub fn percentile(v: &[f64], q: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// A busy-share run: its key, its label, its backends (ms per job, concurrency), its tasks, and
/// easel's workers.
type Setup = (&'static str, &'static str, Vec<(u64, usize)>, usize, usize);

/// easel's default `workers`.
const DEFAULT_WORKERS: usize = 2;

pub async fn run(ctx: &Ctx) -> anyhow::Result<(Vec<Row>, Value)> {
    let quick = ctx.plan.run_secs < 10;
    let scale = |n: usize| if quick { n / 2 } else { n };
    let mut rows = Vec::new();
    let mut details = serde_json::Map::new();

    // (a) The busy share with a backlog: one backend, then three of different speeds; and one
    // backend with more workers than its slots, whose jobs wait in the node's line for it and
    // are handed its slot in turn (issue 52): the handoff must not leave it idle.
    let setups: [Setup; 3] = [
        (
            "one",
            "one backend (100 ms/job, concurrency 1)",
            vec![(100, 1)],
            scale(120),
            DEFAULT_WORKERS,
        ),
        (
            "three",
            "three backends (100 ms x2, 200 ms x1, 400 ms x1 per job)",
            vec![(100, 2), (200, 1), (400, 1)],
            scale(300),
            DEFAULT_WORKERS,
        ),
        (
            "one_4_workers",
            "one backend with 4 workers (100 ms/job, concurrency 1)",
            vec![(100, 1)],
            scale(120),
            4,
        ),
    ];
    for (key, label, backends, tasks, workers) in setups {
        let (size, png) = (IMAGE_SIZE, Answer::Png);
        let m = measure(
            ctx, key, &backends, tasks, workers, false, size, png, "full",
        )
        .await?;
        println!(
            "   busy share, {label}: {:.1}% over {:.1} s ({tasks} tasks queued at once, \
             jobs per backend {:?})",
            m.busy, m.window_secs, m.jobs_per_backend,
        );
        details.insert(
            format!("busy_{key}"),
            json!({"busy_pct": m.busy, "window_secs": m.window_secs, "tasks": tasks,
                   "workers": workers, "backends": backends,
                   "jobs_per_backend": m.jobs_per_backend,
                   // Under load a task also waits for a free slot: not easel's own time.
                   "taken_to_finished_minus_job_ms_median": median(&m.overhead_ms)}),
        );
        rows.push(
            Row::new("backends", format!("busy share of {label}"), "%")
                .value(&[m.busy])
                .goal(format!(">= {BUSY_GOAL:.0}%"), m.busy >= BUSY_GOAL),
        );
    }

    // (b) easel's own time per task, one task at a time: the backend answering PNG or JPEG,
    // at three image sizes; at 1024 px also with `sqlite_synchronous = normal`, under which
    // easel fsyncs neither the files nor the commit.
    let tasks = scale(60);
    let runs = [
        (LARGE_IMAGE_SIZE, Answer::Png, "full", true),
        (LARGE_IMAGE_SIZE, Answer::Jpeg, "full", true),
        (LARGE_IMAGE_SIZE, Answer::Png, "normal", false),
        (LARGE_IMAGE_SIZE, Answer::Jpeg, "normal", false),
        (IMAGE_SIZE, Answer::Png, "full", false),
        (IMAGE_SIZE, Answer::Jpeg, "full", false),
        (SMALL_IMAGE_SIZE, Answer::Png, "full", false),
    ];
    for (size, answer, sync, goal) in runs {
        let format = answer.name();
        let m = measure(
            ctx,
            &format!("alone-{size}-{format}-{sync}"),
            &[(100, 1)],
            tasks,
            DEFAULT_WORKERS,
            true,
            size,
            answer,
            sync,
        )
        .await?;
        let (p50, p90) = (median(&m.overhead_ms), percentile(&m.overhead_ms, 0.9));
        let (e50, e90) = (median(&m.end_to_end_ms), percentile(&m.end_to_end_ms, 0.9));
        // The disk's part alone, right after, on the same disk: what no code in easel can
        // take below while the files are fsynced before the task is recorded.
        let disk = match sync {
            "full" => {
                let files = vec![answer_file(size, answer)?; 4];
                let ms = disk_alone(&ctx.work.join("disk-alone"), &files, tasks)?;
                Some((median(&ms), percentile(&ms, 0.9)))
            }
            _ => None,
        };
        // The answer's bytes crossing the loopback, right after, for the row of the goal.
        let transfer = if goal {
            let ms = transfer_alone(size, answer, tasks).await?;
            Some((median(&ms), percentile(&ms, 0.9)))
        } else {
            None
        };
        let disk_text = match disk {
            Some((d50, d90)) => format!("; the disk alone {d50:.1} ms median, {d90:.1} ms p90"),
            None => String::new(),
        };
        let transfer_text = match transfer {
            Some((t50, t90)) => {
                format!("; the answer's transfer alone {t50:.2} ms median, {t90:.2} ms p90")
            }
            None => String::new(),
        };
        println!(
            "   easel's time per task on top of the backend's ({tasks} tasks one at a time, \
             {size} px, {format} answers, sync={sync}): taken to finished {p50:.1} ms median, \
             {p90:.1} ms p90; submitted to finished {e50:.1} ms median, {e90:.1} ms p90\
             {disk_text}{transfer_text}"
        );
        details.insert(
            match sync {
                "full" => format!("overhead_{size}_{format}"),
                _ => format!("overhead_{size}_{format}_{sync}"),
            },
            json!({"tasks": tasks, "image_size": size, "answer": format, "sqlite_synchronous": sync,
                   "taken_to_finished_ms": {"p50": p50, "p90": p90},
                   "submitted_to_finished_ms": {"p50": e50, "p90": e90},
                   "disk_alone_ms": disk.map(|(p50, p90)| json!({"p50": p50, "p90": p90})),
                   "transfer_alone_ms": transfer.map(|(p50, p90)| json!({"p50": p50, "p90": p90}))}),
        );
        let figure = match disk {
            Some(_) => format!(
                "easel's time per task beyond the backend's, taken to finished ({size} px, \
                 {format} answers), p50 / p90 (baseline: the disk alone, the four files \
                 written and fsynced as easel does)"
            ),
            None => format!(
                "the same with sqlite_synchronous = normal, nothing fsynced ({size} px, \
                 {format} answers), p50 / p90"
            ),
        };
        let row = Row::new("backends", figure, "ms").value(&[p50, p90]);
        let row = match disk {
            Some((d50, d90)) => row.baseline(&[d50, d90]),
            None => row,
        };
        rows.push(row);
        // What is easel's own beyond the disk: the row's median less the disk's, both of this
        // run. The disk alone is measured after the row, not per task, so medians are compared.
        if let Some((d50, _)) = disk.filter(|_| goal) {
            let beyond = p50 - d50;
            rows.push(
                Row::new(
                    "backends",
                    format!(
                        "easel's own time per task beyond the backend's and beyond the disk \
                         alone ({size} px, {format} answers): the row's p50 less the disk's"
                    ),
                    "ms",
                )
                .value(&[beyond])
                .goal(
                    format!("< {BEYOND_DISK_GOAL_MS:.0} ms"),
                    beyond < BEYOND_DISK_GOAL_MS,
                ),
            );
            // Not the goal's figure: how much of what is left is the answer's transfer, which
            // the backend's span (its answer made) does not count and easel's rows do.
            if let Some((t50, _)) = transfer {
                rows.push(
                    Row::new(
                        "backends",
                        format!(
                            "the same less the answer's transfer alone ({size} px, {format} \
                             answers): the row's p50 less the disk's and the transfer's"
                        ),
                        "ms",
                    )
                    .value(&[beyond - t50]),
                );
            }
        }
        rows.push(
            Row::new(
                "backends",
                format!("the same, submitted to finished ({size} px, {format} answers), p50 / p90"),
                "ms",
            )
            .value(&[e50, e90]),
        );
    }

    // (c) Encoding a 1024 px grid of a photo-like picture, in this process: the choice of the
    // grid's format for JPEG answers.
    let grid = photo_like(LARGE_IMAGE_SIZE, LARGE_IMAGE_SIZE, 11);
    let png = time_ms(10, || easel::images::encode_png(&grid).len());
    // What easel writes for the grid of JPEG answers (quality 90, 4:2:0).
    let fast_jpeg = time_ms(10, || {
        easel::images::stored::StoredImage::jpeg(&grid)
            .expect("a JPEG of a well-formed image")
            .len()
    });
    let image_jpeg = time_ms(10, || image_crate_jpeg(&grid).len());
    println!(
        "   encoding a {LARGE_IMAGE_SIZE} px grid: PNG (fast) {png:.1} ms, JPEG q90 \
         (jpeg-encoder) {fast_jpeg:.1} ms, JPEG q90 (image) {image_jpeg:.1} ms"
    );
    details.insert(
        "grid_encoding_1024_ms".into(),
        json!({"png_fast": png, "jpeg_encoder_q90": fast_jpeg, "image_jpeg_q90": image_jpeg}),
    );
    rows.push(
        Row::new(
            "backends",
            format!(
                "encoding a {LARGE_IMAGE_SIZE} px grid: PNG fast / JPEG q90 (jpeg-encoder) / \
                 JPEG q90 (image)"
            ),
            "ms",
        )
        .value(&[png, fast_jpeg, image_jpeg]),
    );

    // (d) Keeping a backend's four files (base64 decoded, metadata dropped, header read) as a
    // task does once its answer is in, after an idle pause: easel's way (the light part on the
    // calling thread unless the files are large) against all four side by side, alternated.
    let mut keeping_details = serde_json::Map::new();
    for (size, answer) in [
        (SMALL_IMAGE_SIZE, Answer::Png),
        (LARGE_IMAGE_SIZE, Answer::Jpeg),
        (LARGE_IMAGE_SIZE, Answer::Png),
    ] {
        let (easel_ms, side_ms, b64_len) = keeping(size, answer).await?;
        let format = answer.name();
        println!(
            "   keeping four {size} px {format} answers ({} KB of base64 each): easel's \
             {:.3} ms median, all side by side {:.3} ms",
            b64_len / 1024,
            median(&easel_ms),
            median(&side_ms)
        );
        keeping_details.insert(
            format!("{size}_{format}"),
            json!({"base64_bytes_each": b64_len,
                   "easel_ms": {"p50": median(&easel_ms), "p90": percentile(&easel_ms, 0.9)},
                   "side_by_side_ms": {"p50": median(&side_ms), "p90": percentile(&side_ms, 0.9)}}),
        );
        rows.push(
            Row::new(
                "backends",
                format!(
                    "keeping a task's four {size} px {format} answers after an idle pause, \
                     p50 / p90 (baseline: all four side by side on a thread per CPU)"
                ),
                "ms",
            )
            .value(&[median(&easel_ms), percentile(&easel_ms, 0.9)])
            .baseline(&[median(&side_ms), percentile(&side_ms, 0.9)]),
        );
    }
    details.insert("keeping_answers".into(), Value::Object(keeping_details));
    Ok((rows, Value::Object(details)))
}

/// Keeping four base64 answers of `size` px, easel's way and all side by side, each on a
/// blocking thread after 30 ms idle (as a task's answer comes after its job), the two ways
/// alternated: their times in ms, and one answer's base64 length.
async fn keeping(size: u32, answer: Answer) -> anyhow::Result<(Vec<f64>, Vec<f64>, usize)> {
    use easel::generate::backends::answers::{keep_each, keep_output};
    use std::borrow::Cow;

    const ROUNDS: usize = 30;
    let b64 = picture(&format!("{size}x{size}"), answer).into_bytes();
    let files: Arc<Vec<Vec<u8>>> = Arc::new(vec![b64; 4]);
    let decoded = |b64: &Vec<u8>| -> Result<Cow<'static, [u8]>, easel::generate::GenerateError> {
        base64_simd::STANDARD
            .decode_to_vec(b64)
            .map(Cow::Owned)
            .map_err(|e| easel::generate::GenerateError::Failed(e.to_string()))
    };
    let (mut easel_ms, mut side_ms) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS * 2 {
        tokio::time::sleep(Duration::from_millis(30)).await;
        let files = files.clone();
        let easels = round % 4 == 0 || round % 4 == 3;
        let started = Instant::now();
        let kept = tokio::task::spawn_blocking(move || {
            if easels {
                keep_each(&files, Vec::len, |f, _| decoded(f))
            } else {
                easel::images::parallel::side_by_side(&files, |i, f| {
                    keep_output(decoded(f)?, &format!("image {}", i + 1))
                })
                .into_iter()
                .collect()
            }
        })
        .await??;
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        if kept.len() != 4 || kept.iter().any(|k| k.size() != (size, size)) {
            bail!("keeping {size} px answers: not four of that size");
        }
        if easels {
            easel_ms.push(ms);
        } else {
            side_ms.push(ms);
        }
    }
    Ok((easel_ms, side_ms, files[0].len()))
}
