//! Stable Diffusion WebUI (`/sdapi/v1`) as easel uses it: txt2img, img2img,
//! extra-single-image, progress, interrupt and the model list, with flat-colour images and
//! counts of the jobs it ran at once.

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

use super::{flat, png_b64};
use easel::generate::raster::{decode_png, RgbaImage};

/// A Stable Diffusion WebUI as far as easel uses it: txt2img, img2img, extra-single-image,
/// progress, interrupt and the model list. Its images are flat colours: `shade` for new images.
#[derive(Default)]
pub struct WebUi {
    pub shade: u8,
    /// Answer 503 to everything while set.
    pub down: AtomicBool,
    /// Jobs it ran, and the most it ran at once.
    pub jobs: AtomicUsize,
    pub running: AtomicUsize,
    pub most: AtomicUsize,
    /// The init images and upscale inputs it was sent, decoded.
    pub received: Mutex<Vec<RgbaImage>>,
    /// How long each job takes.
    pub delay_ms: u64,
}

fn b64(img: &RgbaImage) -> String {
    png_b64(img)
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
pub async fn start_webui(ui: Arc<WebUi>) -> String {
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
    super::serve(app).await
}
