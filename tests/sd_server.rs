//! easel's `openai` and `sdwebui` backends against a real model server: stable-diffusion.cpp's
//! `sd-server`, built from source and loaded with a Stable Diffusion 1.5 checkpoint of random
//! weights by scripts/sd-server.sh (which the test command sources; it exports
//! `EASEL_TEST_SD_SERVER` and `EASEL_TEST_SD_MODEL`). Without them the tests say so and pass,
//! except under `CI=true`, where they fail.
//!
//! The images are noise, but every byte goes through the server's loader, sampler, VAE and PNG
//! encoder, so what is asserted is what can be of noise: sizes, counts, decodable images, distinct
//! images for distinct seeds, the same bytes for the same seed, the record and the webhook. Each
//! test starts its own server, as some kill and restart it.
//!
//! They are `#[ignore]`d in a plain `cargo test`; scripts/test.sh runs them with `--ignored`
//! after the rest of the suite (`cargo test --test sd_server -- --ignored` alone). They are a
//! test binary of their own, not a module of tests/it, so that run's `--ignored` and
//! `--test-threads 2` apply to these tests alone, whatever else is ever `#[ignore]`d there.

mod common;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};

use common::receiver::{Behaviour, Receiver};
use common::TestApp;
use easel::config::models::ModelDefaults;
use easel::config::ModelConfig;
use easel::generate::backends::BackendConfig;
use easel::images::{decode_png, encode_png, RgbaImage};

/// Steps of the task that is still running when it is canceled or its server killed.
const SLOW_STEPS: u32 = 8;
/// Long enough for a task of a few steps at 64 px on a loaded 2-core machine.
const WITHIN: Duration = Duration::from_secs(240);
const SIZE: u32 = 64;
/// Steps of an ordinary task: the fewest the sampler runs.
const STEPS: u32 = 1;

/// The server binary and the checkpoint, or `None` (with one line) where they were not made.
fn paths() -> Option<(PathBuf, PathBuf)> {
    match (
        std::env::var_os("EASEL_TEST_SD_SERVER"),
        std::env::var_os("EASEL_TEST_SD_MODEL"),
    ) {
        (Some(bin), Some(model)) => Some((bin.into(), model.into())),
        _ if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("CI=true: EASEL_TEST_SD_SERVER and EASEL_TEST_SD_MODEL must be set (scripts/sd-server.sh)")
        }
        _ => {
            eprintln!(
                "skipped: no sd-server (scripts/test.sh builds one with scripts/sd-server.sh)"
            );
            None
        }
    }
}

/// A free port on 127.0.0.1 (free when asked; the server binds it moments later).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One `sd-server` process on a port of its own.
struct SdServer {
    bin: PathBuf,
    model: PathBuf,
    port: u16,
    log: tempfile::NamedTempFile,
    child: Option<Child>,
}

impl SdServer {
    fn new(bin: PathBuf, model: PathBuf) -> SdServer {
        SdServer {
            bin,
            model,
            port: free_port(),
            log: tempfile::NamedTempFile::new().unwrap(),
            child: None,
        }
    }

    fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Start it and wait until it answers (it listens only once the checkpoint is loaded).
    async fn start(&mut self) {
        let log = self.log.reopen().unwrap();
        let child = Command::new(&self.bin)
            .args(["--listen-ip", "127.0.0.1", "--listen-port"])
            .arg(self.port.to_string())
            .arg("-m")
            .arg(&self.model)
            // One thread: ggml's threads spin at every barrier, which on a machine busy with
            // other tests makes two threads many times slower than one.
            .args(["--steps", &STEPS.to_string(), "-t", "1"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        let http = reqwest::Client::new();
        let url = format!("{}/sdapi/v1/options", self.base());
        let started = Instant::now();
        loop {
            if let Ok(res) = http.get(&url).send().await {
                if res.status() == 200 {
                    break;
                }
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("sd-server exited with {status}: {}", self.log_text());
            }
            assert!(
                started.elapsed() < Duration::from_secs(180),
                "sd-server did not answer within 180 s: {}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn log_text(&self) -> String {
        let text = std::fs::read_to_string(self.log.path()).unwrap_or_default();
        let tail: Vec<char> = text.chars().rev().take(4000).collect();
        tail.into_iter().rev().collect()
    }
}

impl Drop for SdServer {
    fn drop(&mut self) {
        self.kill();
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    OpenAi,
    WebUi,
}

/// The server as a backend of `kind`. The openai kind makes no upscales, which pan and inpaint
/// start from: the procedural generator makes those (`upscale-1x` is a crop of the grid).
fn backends(kind: Kind, server: &SdServer) -> Vec<BackendConfig> {
    let configs = match kind {
        Kind::OpenAi => vec![
            json!({
                "name": "sdcpp", "kind": "openai", "url": format!("{}/v1", server.base()),
                "dialect": "sd-cpp", "timeout": "200s",
            }),
            json!({ "name": "crop", "kind": "procedural", "operations": ["upscale-1x"] }),
        ],
        Kind::WebUi => vec![json!({
            "name": "sdcpp", "kind": "sdwebui", "url": server.base(), "timeout": "200s",
        })],
    };
    configs
        .into_iter()
        .map(|c| serde_json::from_value(c).unwrap())
        .collect()
}

/// easel with the server as its backend, serving one model of `STEPS` steps.
async fn easel(kind: Kind, server: &SdServer) -> TestApp {
    let backends = backends(kind, server);
    TestApp::spawn_with(move |c| {
        c.models = vec![ModelConfig {
            name: "sd15-random".into(),
            backends: backends.iter().map(|b| b.name.clone()).collect(),
            defaults: ModelDefaults {
                steps: Some(STEPS),
                // Guidance 1 leaves out the unconditioned pass: half the work of each step.
                cfg_scale: Some(1.0),
                ..ModelDefaults::default()
            },
            ..ModelConfig::default()
        }];
        c.backends = backends;
        c.worker.image_size = SIZE;
        c.worker.workers = 2;
    })
    .await
}

async fn finished(app: &TestApp, server: &SdServer, op: &str, body: Value) -> Value {
    let id = app.submit(op, body).await;
    let record = app.wait_final(&id, WITHIN).await;
    assert_eq!(
        record["status"],
        "finished",
        "{op}: {record}\nsd-server said: {}",
        server.log_text()
    );
    record
}

/// The four images of a grid task, each decoded and checked to be `w` x `h`.
async fn four(app: &TestApp, record: &Value, (w, h): (u32, u32)) -> Vec<Vec<u8>> {
    let urls = record["image_urls"].as_array().unwrap();
    assert_eq!(urls.len(), 4, "{record}");
    let mut files = Vec::new();
    for url in urls {
        let file = app.bytes(url).await;
        let image = decode_png(&file).unwrap();
        assert_eq!((image.width, image.height), (w, h), "{url}");
        assert!(no_text_chunks(&file), "{url} carries the server's metadata");
        files.push(file);
    }
    let grid = decode_png(&app.bytes(&record["original_image_url"]).await).unwrap();
    // The grid is the four at half size, the size of one.
    assert_eq!((grid.width, grid.height), (w, h));
    files
}

/// Whether a PNG has no tEXt, iTXt or zTXt chunk (sd-server writes its parameters in one).
fn no_text_chunks(png: &[u8]) -> bool {
    let mut at = 8;
    while at + 8 <= png.len() {
        let len = u32::from_be_bytes(png[at..at + 4].try_into().unwrap()) as usize;
        if matches!(&png[at + 4..at + 8], b"tEXt" | b"iTXt" | b"zTXt") {
            return false;
        }
        at += 12 + len;
    }
    true
}

fn distinct(files: &[Vec<u8>]) -> bool {
    let set: std::collections::HashSet<&Vec<u8>> = files.iter().collect();
    set.len() == files.len()
}

/// A mask the parent's size: the right half redrawn.
fn right_half(w: u32, h: u32) -> String {
    let mut mask = RgbaImage::new(w, h);
    for y in 0..h {
        for x in 0..w {
            let v = if x >= w / 2 { 255 } else { 0 };
            let i = ((y * w + x) * 4) as usize;
            mask.data[i..i + 4].copy_from_slice(&[v, v, v, 255]);
        }
    }
    let png = encode_png(&mask);
    format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(png)
    )
}

/// Every operation the backend kind runs, through easel's API, on the real server.
async fn operations(kind: Kind) {
    let Some((bin, model)) = paths() else { return };
    let mut server = SdServer::new(bin, model);
    server.start().await;
    let app = easel(kind, &server).await;
    let hooks = Receiver::start(vec![Behaviour::Status(200)]).await;

    // imagine: four distinct images of the asked size, the model's settings recorded.
    let imagine = json!({
        "prompt": "a lighthouse at dusk", "seed": 1234, "webhook_url": hooks.url,
    });
    let first = finished(&app, &server, "imagine", imagine.clone()).await;
    assert_eq!(first["seed"], 1234, "{first}");
    assert_eq!(first["model"], "sd15-random");
    assert_eq!(first["steps"], STEPS);
    let images = four(&app, &first, (SIZE, SIZE)).await;
    assert!(
        distinct(&images),
        "a batch of four made the same image twice"
    );

    // The same seed again: the server is deterministic on one machine, so the same bytes.
    let again = finished(&app, &server, "imagine", imagine).await;
    assert_eq!(four(&app, &again, (SIZE, SIZE)).await, images);

    // reroll: a new seed, so new images.
    let parent = first["task_id"].as_str().unwrap();
    let reroll = finished(&app, &server, "reroll", json!({ "parent_task_id": parent })).await;
    assert_ne!(reroll["seed"], first["seed"]);
    let rerolled = four(&app, &reroll, (SIZE, SIZE)).await;
    assert!(
        rerolled.iter().all(|f| !images.contains(f)),
        "reroll drew the parent's images"
    );

    // variations of one image of the grid.
    let body = json!({ "parent_task_id": parent, "index": 2 });
    let variations = finished(&app, &server, "variations", body).await;
    let varied = four(&app, &variations, (SIZE, SIZE)).await;
    assert!(varied.iter().all(|f| !images.contains(f)));

    // upscale-1x: the image itself, full size.
    let body = json!({ "parent_task_id": parent, "index": 1 });
    let upscale = finished(&app, &server, "upscale-1x", body).await;
    let image = decode_png(&app.bytes(&upscale["image_url"]).await).unwrap();
    assert_eq!((image.width, image.height), (SIZE, SIZE));
    let upscaled = upscale["task_id"].as_str().unwrap();

    // pan: the image extended by half toward the right.
    let body = json!({ "parent_task_id": upscaled, "direction": "right" });
    let pan = finished(&app, &server, "pan", body).await;
    // The WebUI kind asks for the extended canvas (96 x 64; the server draws 128 x 64, its
    // multiple of 64, and easel resizes it back); the openai kind asks a local model for the
    // canvas's shape at image_size in multiples of 64, which at 64 px is square.
    let panned = match kind {
        Kind::WebUi => (SIZE * 3 / 2, SIZE),
        Kind::OpenAi => (SIZE, SIZE),
    };
    four(&app, &pan, panned).await;

    // inpaint: the right half redrawn.
    let body = json!({ "parent_task_id": upscaled, "mask": right_half(SIZE, SIZE) });
    let inpaint = finished(&app, &server, "inpaint", body).await;
    four(&app, &inpaint, (SIZE, SIZE)).await;

    webhook_said(&hooks, &first).await;
}

/// The webhook of `record`'s task came, saying it finished with its images.
async fn webhook_said(hooks: &Receiver, record: &Value) {
    let id = record["task_id"].as_str().unwrap();
    let said = common::wait_for(Duration::from_secs(30), || async {
        hooks.received().into_iter().find_map(|r| {
            let body: Value = serde_json::from_slice(&r.body).ok()?;
            (body["task_id"] == id && body["status"] == "finished").then_some(body)
        })
    })
    .await
    .expect("the finished webhook");
    assert_eq!(said["image_urls"], record["image_urls"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs a model server for minutes: scripts/test.sh runs it after the rest"]
async fn the_openai_backend_runs_its_operations_on_a_real_sd_server() {
    operations(Kind::OpenAi).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs a model server for minutes: scripts/test.sh runs it after the rest"]
async fn the_sdwebui_backend_runs_its_operations_on_a_real_sd_server() {
    operations(Kind::WebUi).await;
}

/// Wait until the task is running on the server (a second after easel marks it processing,
/// the request is there).
async fn running(app: &TestApp, id: &str) {
    let seen = common::wait_for(WITHIN, || async {
        (app.fetch(id).await["status"] == "processing").then_some(())
    })
    .await;
    assert!(seen.is_some(), "{id} never ran: {}", app.fetch(id).await);
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// The server started after easel, a cancel the server cannot be told of, and the server killed
/// in the middle of a job.
async fn lifecycle(kind: Kind) {
    let Some((bin, model)) = paths() else { return };
    let mut server = SdServer::new(bin, model);

    // easel first: the probe finds nothing, and the task waits for the backend.
    let app = easel(kind, &server).await;
    let early = app
        .submit("imagine", json!({ "prompt": "a harbour", "seed": 7 }))
        .await;
    let waiting = common::wait_for(Duration::from_secs(20), || async {
        let record = app.fetch(&early).await;
        (record["waiting_for"] == "backend").then_some(record)
    })
    .await;
    assert!(waiting.is_some(), "{}", app.fetch(&early).await);
    // Then the server comes up; a probe (every 5 s while a backend is out) brings it in.
    server.start().await;
    let record = app.wait_final(&early, WITHIN).await;
    assert_eq!(record["status"], "finished", "{record}");
    four(&app, &record, (SIZE, SIZE)).await;

    // A cancel: sd-server has no interrupt (404) and its images API has no cancel, so easel
    // stops waiting at once and the server finishes the job for no one. The next task waits
    // for that, then runs.
    let slow = json!({ "prompt": "a long road", "steps": SLOW_STEPS });
    let canceled = app.submit("imagine", slow.clone()).await;
    running(&app, &canceled).await;
    let asked = Instant::now();
    let (status, record) = app
        .post(&format!("/api/v1/tasks/{canceled}/cancel"), &json!({}))
        .await;
    assert_eq!(
        (status, &record["status"]),
        (200, &json!("canceled")),
        "{record}"
    );
    // The server's job takes half a minute more; the cancel does not wait for it.
    assert!(
        asked.elapsed() < Duration::from_secs(15),
        "{:?}",
        asked.elapsed()
    );
    let next = finished(&app, &server, "imagine", json!({ "prompt": "a bridge" })).await;
    four(&app, &next, (SIZE, SIZE)).await;
    assert_eq!(app.fetch(&canceled).await["status"], "canceled");

    // The server killed mid-job: the job fails over the connection, is tried again while the
    // backend is out, and finishes once the server is back (within generation_budget).
    let doomed = app.submit("imagine", slow).await;
    running(&app, &doomed).await;
    server.kill();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let record = app.fetch(&doomed).await;
    assert!(
        matches!(
            record["status"].as_str(),
            Some("pending" | "starting" | "processing")
        ),
        "a lost backend failed the task: {record}"
    );
    server.start().await;
    let record = app.wait_final(&doomed, WITHIN).await;
    assert_eq!(record["status"], "finished", "{record}");
    assert_eq!(record["steps"], SLOW_STEPS);
    four(&app, &record, (SIZE, SIZE)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs a model server for minutes: scripts/test.sh runs it after the rest"]
async fn the_openai_backend_waits_for_a_late_or_restarted_sd_server_and_cancels() {
    lifecycle(Kind::OpenAi).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs a model server for minutes: scripts/test.sh runs it after the rest"]
async fn the_sdwebui_backend_waits_for_a_late_or_restarted_sd_server_and_cancels() {
    lifecycle(Kind::WebUi).await;
}
