//! Model backends through easel's HTTP API: easel configured with `[[backends]]` pointing at
//! local servers that speak a backend's documented protocol, check what easel sends, and
//! misbehave on request. The adapters' own protocol details are tested beside them
//! (src/generate/backends/*.rs); here is what a caller sees: tasks finishing on the images the
//! backend made, the pool spreading work, failing over and running follow-ups anywhere.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Json;
use base64::Engine;
use serde_json::{json, Value};

use common::TestApp;
use easel::generate::backends::{BackendConfig, BackendKind};
use easel::generate::raster::{decode_png, encode_png, RgbaImage};

const WITHIN: Duration = Duration::from_secs(60);

/// A Stable Diffusion WebUI as far as easel uses it: txt2img, img2img, extra-single-image,
/// progress, interrupt and the model list. Its images are flat colours: `shade` for new images.
#[derive(Default)]
struct WebUi {
    shade: u8,
    /// Answer 503 to everything while set.
    down: AtomicBool,
    /// Jobs it ran, and the most it ran at once.
    jobs: AtomicUsize,
    running: AtomicUsize,
    most: AtomicUsize,
    /// The init images and upscale inputs it was sent, decoded.
    received: Mutex<Vec<RgbaImage>>,
    /// How long each job takes.
    delay_ms: u64,
}

fn flat(w: u32, h: u32, shade: u8) -> RgbaImage {
    let mut img = RgbaImage::new(w, h);
    for px in img.data.chunks_exact_mut(4) {
        px[..3].copy_from_slice(&[shade, 255 - shade, 128]);
    }
    img
}

fn b64(img: &RgbaImage) -> String {
    base64::engine::general_purpose::STANDARD.encode(encode_png(img))
}

fn unb64(s: &str) -> RgbaImage {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(s.trim_start_matches("data:image/png;base64,"))
        .unwrap();
    decode_png(&bytes).unwrap()
}

impl WebUi {
    async fn job(&self) -> Option<Response> {
        if self.down.load(Ordering::SeqCst) {
            return Some((StatusCode::SERVICE_UNAVAILABLE, "loading").into_response());
        }
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(self.delay_ms)).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        self.jobs.fetch_add(1, Ordering::SeqCst);
        None
    }
}

async fn txt2img(State(ui): State<Arc<WebUi>>, Json(body): Json<Value>) -> Response {
    if let Some(refused) = ui.job().await {
        return refused;
    }
    let (w, h) = (
        body["width"].as_u64().unwrap() as u32,
        body["height"].as_u64().unwrap() as u32,
    );
    assert!(w % 8 == 0 && h % 8 == 0, "sizes are multiples of 8: {body}");
    assert_eq!(body["batch_size"], 4, "{body}");
    assert!(
        body["prompt"].as_str().is_some_and(|p| !p.is_empty()),
        "{body}"
    );
    let seed = body["seed"].as_i64().unwrap();
    let images: Vec<String> = (0..4).map(|k| b64(&flat(w, h, ui.shade + k))).collect();
    Json(json!({
        "images": images,
        "parameters": {},
        "info": json!({"seed": seed, "all_seeds": [seed, seed + 1, seed + 2, seed + 3]}).to_string(),
    }))
    .into_response()
}

async fn img2img(State(ui): State<Arc<WebUi>>, Json(body): Json<Value>) -> Response {
    if let Some(refused) = ui.job().await {
        return refused;
    }
    let init = unb64(body["init_images"][0].as_str().unwrap());
    let (w, h) = (
        body["width"].as_u64().unwrap() as u32,
        body["height"].as_u64().unwrap() as u32,
    );
    ui.received.lock().unwrap().push(init);
    let images: Vec<String> = (0..4)
        .map(|k| b64(&flat(w, h, ui.shade + 10 + k)))
        .collect();
    Json(json!({"images": images, "parameters": {}, "info": "{}"})).into_response()
}

async fn extras(State(ui): State<Arc<WebUi>>, Json(body): Json<Value>) -> Response {
    if let Some(refused) = ui.job().await {
        return refused;
    }
    let input = unb64(body["image"].as_str().unwrap());
    let factor = body["upscaling_resize"].as_f64().unwrap_or(1.0) as u32;
    let out = flat(input.width * factor, input.height * factor, ui.shade + 20);
    ui.received.lock().unwrap().push(input);
    Json(json!({"image": b64(&out), "html_info": ""})).into_response()
}

async fn models(State(ui): State<Arc<WebUi>>) -> Response {
    if ui.down.load(Ordering::SeqCst) {
        return (StatusCode::SERVICE_UNAVAILABLE, "loading").into_response();
    }
    Json(json!([{"title": "test.safetensors", "model_name": "test"}])).into_response()
}

/// Start a WebUI; its base URL.
async fn start_webui(ui: Arc<WebUi>) -> String {
    let app = axum::Router::new()
        .route("/sdapi/v1/txt2img", post(txt2img))
        .route("/sdapi/v1/img2img", post(img2img))
        .route("/sdapi/v1/extra-single-image", post(extras))
        .route("/sdapi/v1/sd-models", get(models))
        .route("/sdapi/v1/options", get(models))
        .route(
            "/sdapi/v1/progress",
            get(|| async { Json(json!({"progress": 0.5, "eta_relative": 1.0, "state": {}})) }),
        )
        .route("/sdapi/v1/interrupt", post(|| async { Json(json!({})) }))
        .with_state(ui);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

fn webui(name: &str, url: &str, concurrency: usize, operations: Option<&[&str]>) -> BackendConfig {
    let mut cfg: BackendConfig = serde_json::from_value(json!({
        "name": name,
        "kind": "sdwebui",
        "url": url,
        "concurrency": concurrency,
        "timeout": "20s",
    }))
    .unwrap();
    cfg.operations = operations.map(|ops| ops.iter().map(|o| o.to_string()).collect());
    assert_eq!(cfg.kind, BackendKind::Sdwebui);
    cfg
}

async fn run(app: &TestApp, op: &str, body: Value) -> Value {
    let (status, answer) = app.post(&format!("/api/v1/{op}"), &body).await;
    assert_eq!(status, 200, "{op} {body}: {answer}");
    let record = app
        .wait_final(answer["task_id"].as_str().unwrap(), WITHIN)
        .await;
    assert_eq!(record["status"], "finished", "{op}: {record}");
    record
}

async fn image(app: &TestApp, url: &Value) -> RgbaImage {
    let res = app.http.get(url.as_str().unwrap()).send().await.unwrap();
    assert_eq!(res.status(), 200);
    decode_png(&res.bytes().await.unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webui_draws_the_tasks_and_a_follow_up_runs_on_another_backend() {
    let a = Arc::new(WebUi {
        shade: 10,
        ..WebUi::default()
    });
    let b = Arc::new(WebUi {
        shade: 100,
        ..WebUi::default()
    });
    let (url_a, url_b) = (start_webui(a.clone()).await, start_webui(b.clone()).await);
    let app = TestApp::spawn_with(|c| {
        c.backends = vec![
            webui("draws", &url_a, 1, Some(&["imagine"])),
            webui(
                "upscales",
                &url_b,
                1,
                Some(&["upscale-highres", "variations"]),
            ),
        ];
    })
    .await;
    let (status, ready) = app.get("/readyz").await;
    assert_eq!(status, 200, "{ready}");
    assert_eq!(ready["backends"].as_array().unwrap().len(), 2, "{ready}");

    // imagine on the WebUI: the images are the ones it made, at the size easel asked for.
    let grid = run(
        &app,
        "imagine",
        json!({"prompt": "a harbour", "aspect_ratio": "3:2"}),
    )
    .await;
    let first = image(&app, &grid["image_urls"][0]).await;
    assert_eq!(first, flat(first.width, first.height, 10));
    assert_eq!(first.width % 8, 0);
    assert!(first.width > first.height, "3:2 is wide");
    assert_eq!(a.jobs.load(Ordering::SeqCst), 1);

    // A follow-up of A's image runs on B, which receives A's image from easel's storage.
    let up = run(
        &app,
        "upscale-highres",
        json!({"parent_task_id": grid["task_id"], "index": 1, "type": "2x"}),
    )
    .await;
    let upscaled = image(&app, &up["image_url"]).await;
    assert_eq!(
        (upscaled.width, upscaled.height),
        (first.width * 2, first.height * 2)
    );
    assert_eq!(b.received.lock().unwrap()[0], first);
    assert_eq!(a.jobs.load(Ordering::SeqCst), 1, "A ran no upscale");

    // An operation no backend runs is refused at submit.
    let (status, body) = app
        .post("/api/v1/shorten", &json!({"prompt": "a very long prompt"}))
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["errors"][0]["code"], "unsupported_operation");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_down_at_start_is_skipped_concurrency_holds_and_it_comes_back() {
    let down = Arc::new(WebUi {
        shade: 30,
        delay_ms: 30,
        ..WebUi::default()
    });
    down.down.store(true, Ordering::SeqCst);
    let up = Arc::new(WebUi {
        shade: 60,
        delay_ms: 30,
        ..WebUi::default()
    });
    let (url_down, url_up) = (
        start_webui(down.clone()).await,
        start_webui(up.clone()).await,
    );
    let app = TestApp::spawn_with(|c| {
        c.backends = vec![
            webui("down", &url_down, 1, None),
            webui("up", &url_up, 2, None),
        ];
    })
    .await;
    let mut ids = Vec::new();
    for i in 0..8 {
        let (status, body) = app
            .post("/api/v1/imagine", &json!({"prompt": format!("task {i}")}))
            .await;
        assert_eq!(status, 200, "{body}");
        ids.push(body["task_id"].as_str().unwrap().to_string());
    }
    for id in &ids {
        let record = app.wait_final(id, WITHIN).await;
        assert_eq!(record["status"], "finished", "{record}");
    }
    assert_eq!(up.jobs.load(Ordering::SeqCst), 8);
    assert!(
        up.most.load(Ordering::SeqCst) <= 2,
        "concurrency 2 is never exceeded"
    );
    let (_, ready) = app.get("/readyz").await;
    let states: Vec<(String, bool)> = ready["backends"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["name"].as_str().unwrap().to_string(),
                b["up"].as_bool().unwrap(),
            )
        })
        .collect();
    assert!(states.contains(&("down".to_string(), false)), "{ready}");

    // It comes back: the probe finds it, and work reaches it again.
    down.down.store(false, Ordering::SeqCst);
    common::wait_for(Duration::from_secs(20), || async {
        let (_, ready) = app.get("/readyz").await;
        ready["backends"]
            .as_array()
            .unwrap()
            .iter()
            .all(|b| b["up"] == true)
            .then_some(())
    })
    .await
    .expect("the backend is probed back in");
    let mut ids = Vec::new();
    for i in 0..6 {
        let (_, body) = app
            .post("/api/v1/imagine", &json!({"prompt": format!("again {i}")}))
            .await;
        ids.push(body["task_id"].as_str().unwrap().to_string());
    }
    for id in &ids {
        app.wait_final(id, WITHIN).await;
    }
    assert!(
        down.jobs.load(Ordering::SeqCst) > 0,
        "work reaches it again"
    );
    assert_eq!(down.most.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_configuration_that_cannot_work_stops_easel_naming_the_setting() {
    let dir = tempfile::tempdir().unwrap();
    let cases: Vec<(Value, &str)> = vec![
        (
            json!([{"name": "Gpu A", "kind": "sdwebui", "url": "http://127.0.0.1:1"}]),
            "backends: name \"Gpu A\" must be",
        ),
        (
            json!([{"name": "a", "kind": "sdwebui"}]),
            "backends.a.url: is required",
        ),
        (
            json!([{"name": "a", "kind": "sdwebui", "url": "ftp://x"}]),
            "backends.a.url: must be an http or https URL",
        ),
        (
            json!([{"name": "a", "kind": "sdwebui", "url": "http://x", "concurrency": 0}]),
            "backends.a.concurrency: must be at least 1",
        ),
        (
            json!([{"name": "a", "kind": "openai", "url": "http://x", "operations": ["upscale-1x"]}]),
            "backends.a.operations: a openai backend cannot run upscale-1x",
        ),
        (
            json!([{"name": "a", "kind": "procedural"}, {"name": "a", "kind": "procedural"}]),
            "backends: the name \"a\" is used twice",
        ),
        (
            json!([{"name": "a", "kind": "openai", "url": "http://x",
                    "api_key_env": "EASEL_TEST_NO_SUCH_VARIABLE"}]),
            "backends.a.api_key_env: the environment variable EASEL_TEST_NO_SUCH_VARIABLE is not set",
        ),
    ];
    for (backends, message) in cases {
        let mut config = common::test_config(dir.path());
        config.backends = serde_json::from_value(backends.clone()).unwrap();
        let err = match easel::Application::build(config).await {
            Ok(_) => panic!("{backends} was accepted"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(message), "{backends}: {err}");
    }
    // An unknown kind is refused when the file is read.
    let file = dir.path().join("easel.toml");
    std::fs::write(&file, "[[backends]]\nname = \"a\"\nkind = \"dalle\"\n").unwrap();
    let err = easel::config::Config::load(Some(file), &Default::default())
        .expect_err("an unknown kind is refused")
        .to_string();
    assert!(err.contains("dalle"), "{err}");
}
