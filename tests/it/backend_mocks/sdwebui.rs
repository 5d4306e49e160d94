//! Stable Diffusion WebUI (`/sdapi/v1`) as easel uses it: txt2img, img2img,
//! extra-single-image, interrogate, progress, interrupt and the model list, with flat-colour
//! images, HTTP Basic credentials when given, a record of what it was sent, and counts of the
//! jobs it ran at once.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{OriginalUri, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Json;
use base64::Engine;
use serde_json::{json, Value};

use super::{common_answer, flat, png_b64, Fault, Script};
use easel::images::{decode_png, RgbaImage};

/// A Stable Diffusion WebUI as far as easel uses it: txt2img, img2img, extra-single-image,
/// interrogate, progress, interrupt and the model list. Its images are flat colours: `shade`
/// (and the three after it) for new images.
#[derive(Default)]
pub struct WebUi {
    pub shade: u8,
    /// The user name and password it asks for (HTTP Basic) on every route; `None` asks none.
    pub credentials: Option<(String, String)>,
    /// How it answers its job requests (txt2img, img2img, extra-single-image, interrogate).
    pub script: Script,
    /// Answer 503 to everything while set; a job in flight when it is set fails with 503 at
    /// the end of its time, as a server restarted under it would (its connection lost).
    pub down: AtomicBool,
    /// txt2img and img2img answer a grid before the batch and a stray image after it, and the
    /// batch's first image as a data URL, as some WebUI versions and extensions do.
    pub extra_images: AtomicBool,
    /// Answer 404 at `sd-models` (a server without the models list) while set.
    pub no_models: AtomicBool,
    /// Jobs it ran, and the most it ran at once.
    pub jobs: AtomicUsize,
    pub running: AtomicUsize,
    pub most: AtomicUsize,
    /// The init images and upscale inputs it was sent, decoded.
    pub received: Mutex<Vec<RgbaImage>>,
    /// Every job request: its path and JSON body.
    pub seen: Mutex<Vec<(String, Value)>>,
    /// Calls to `progress` and to `interrupt`.
    pub polls: AtomicUsize,
    pub interrupts: AtomicUsize,
    /// How long each job takes (a test may change it between jobs).
    pub delay_ms: AtomicU64,
    /// The `current_image` of each progress answer in turn (a live preview: base64 of a PNG, or
    /// whatever a test puts there; left out when `Value::Null` is not wanted), then `null`. Given
    /// only when asked with `skip_current_image=false`, as the WebUI does.
    pub current_images: Mutex<std::collections::VecDeque<Option<Value>>>,
    /// Answer 404 at `progress`, as stable-diffusion.cpp's sd-server does.
    pub no_progress: AtomicBool,
    /// Draw at sides rounded up to a multiple of this (when not 0), whatever was asked, as
    /// stable-diffusion.cpp does (64 for Stable Diffusion 1.x).
    pub align: u32,
}

fn b64(img: &RgbaImage) -> String {
    png_b64(img)
}

fn unb64(s: &Value) -> RgbaImage {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(
            s.as_str()
                .expect("a base64 string")
                .trim_start_matches("data:image/png;base64,"),
        )
        .unwrap();
    decode_png(&bytes).unwrap()
}

/// The WebUI's answer to a request it cannot take (FastAPI's 422).
fn reject(why: String) -> Response {
    (StatusCode::UNPROCESSABLE_ENTITY, why).into_response()
}

impl WebUi {
    /// The last job request it was sent.
    pub fn last(&self) -> (String, Value) {
        self.seen
            .lock()
            .unwrap()
            .last()
            .cloned()
            .expect("a request")
    }

    /// A 401 unless the request has the credentials asked for; a 503 while down.
    fn check(&self, headers: &HeaderMap) -> Result<(), Response> {
        if let Some((user, password)) = &self.credentials {
            let expected = format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
            );
            let got = headers.get("authorization").and_then(|v| v.to_str().ok());
            if got != Some(expected.as_str()) {
                return Err((
                    StatusCode::UNAUTHORIZED,
                    [("www-authenticate", "Basic")],
                    r#"{"detail":"Incorrect username or password"}"#,
                )
                    .into_response());
            }
        }
        if self.down.load(Ordering::SeqCst) {
            return Err((StatusCode::SERVICE_UNAVAILABLE, "loading").into_response());
        }
        Ok(())
    }

    /// A job request: checked, recorded, and run for its time; the fault it meets, or the
    /// answer to send instead of the job's.
    async fn job(&self, path: &str, headers: &HeaderMap, body: &Value) -> Result<Fault, Response> {
        self.check(headers)?;
        self.seen
            .lock()
            .unwrap()
            .push((path.to_string(), body.clone()));
        let fault = self.script.next();
        if let Some(response) = common_answer(&fault).await {
            return Err(response);
        }
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(self.delay_ms.load(Ordering::SeqCst))).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        if self.down.load(Ordering::SeqCst) {
            return Err((StatusCode::SERVICE_UNAVAILABLE, "went down").into_response());
        }
        self.jobs.fetch_add(1, Ordering::SeqCst);
        Ok(fault)
    }

    /// The four images of a batch, as `fault` and `extra_images` say.
    fn batch(&self, (w, h): (u32, u32), shade: u8, fault: &Fault) -> Vec<String> {
        let up = |v: u32| match self.align {
            0 => v,
            a => v.div_ceil(a) * a,
        };
        let (w, h) = (up(w), up(h));
        let mut out: Vec<String> = (0..4).map(|k| b64(&flat(w, h, shade + k))).collect();
        match fault {
            Fault::BadBase64 => out[2] = "!!not base64!!".into(),
            Fault::NotImage => {
                out[1] = base64::engine::general_purpose::STANDARD.encode(b"GIF? no, just text")
            }
            Fault::Count(n) => out.truncate(*n),
            _ => {}
        }
        if self.extra_images.load(Ordering::SeqCst) {
            out.insert(0, b64(&flat(w * 2, h * 2, 200)));
            out.push(b64(&flat(w, h / 2, 201)));
            out[1] = format!("data:image/png;base64,{}", out[1]);
        }
        out
    }
}

/// The size asked for, checked as the WebUI needs it.
fn size(body: &Value) -> Result<(u32, u32), Response> {
    let (Some(w), Some(h)) = (body["width"].as_u64(), body["height"].as_u64()) else {
        return Err(reject("width and height".into()));
    };
    let (w, h) = (w as u32, h as u32);
    if w % 8 != 0 || h % 8 != 0 {
        return Err(reject(format!("{w}x{h} is not in multiples of 8")));
    }
    if body["batch_size"] != 4 || body["n_iter"] != 1 || !body["prompt"].is_string() {
        return Err(reject("batch_size, n_iter, prompt".into()));
    }
    Ok((w, h))
}

async fn txt2img(
    State(ui): State<Arc<WebUi>>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let fault = match ui.job(uri.path(), &headers, &body).await {
        Ok(fault) => fault,
        Err(answer) => return answer,
    };
    let (w, h) = match size(&body) {
        Ok(size) => size,
        Err(refused) => return refused,
    };
    let seed = body["seed"].as_i64().unwrap();
    let images = ui.batch((w, h), ui.shade, &fault);
    Json(json!({
        "images": images,
        "parameters": {},
        "info": json!({"seed": seed, "all_seeds": [seed, seed + 1, seed + 2, seed + 3]}).to_string(),
    }))
    .into_response()
}

async fn img2img(
    State(ui): State<Arc<WebUi>>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let fault = match ui.job(uri.path(), &headers, &body).await {
        Ok(fault) => fault,
        Err(answer) => return answer,
    };
    let (w, h) = match size(&body) {
        Ok(size) => size,
        Err(refused) => return refused,
    };
    let Some([init]) = body["init_images"].as_array().map(Vec::as_slice) else {
        return reject("one init image".into());
    };
    let init = unb64(init);
    if (init.width, init.height) != (w, h) {
        return reject("init image size".into());
    }
    if !body["mask"].is_null() {
        let mask = unb64(&body["mask"]);
        if (mask.width, mask.height) != (w, h) {
            return reject("mask size".into());
        }
    }
    ui.received.lock().unwrap().push(init);
    let images = ui.batch((w, h), ui.shade + 10, &fault);
    Json(json!({"images": images, "parameters": {}, "info": "{}"})).into_response()
}

async fn extras(
    State(ui): State<Arc<WebUi>>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    if let Err(answer) = ui.job(uri.path(), &headers, &body).await {
        return answer;
    }
    let input = unb64(&body["image"]);
    let Some(factor) = body["upscaling_resize"].as_f64() else {
        return reject("upscaling_resize".into());
    };
    if body["upscaler_1"].as_str().is_none_or(str::is_empty) {
        return reject("upscaler_1".into());
    }
    let factor = factor as u32;
    let out = flat(input.width * factor, input.height * factor, ui.shade + 20);
    ui.received.lock().unwrap().push(input);
    Json(json!({"image": b64(&out), "html_info": ""})).into_response()
}

async fn interrogate(
    State(ui): State<Arc<WebUi>>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    if let Err(answer) = ui.job(uri.path(), &headers, &body).await {
        return answer;
    }
    unb64(&body["image"]);
    if body["model"] != "clip" {
        return reject("model".into());
    }
    Json(json!({
        "caption": "a red fox in the snow, digital art,  trending on artstation\n"
    }))
    .into_response()
}

async fn models(State(ui): State<Arc<WebUi>>, headers: HeaderMap) -> Response {
    if let Err(refused) = ui.check(&headers) {
        return refused;
    }
    if ui.no_models.load(Ordering::SeqCst) {
        return StatusCode::NOT_FOUND.into_response();
    }
    Json(json!([
        {"title": "test.safetensors", "model_name": "test"},
        {
            "title": "sd_xl_base_1.0.safetensors [31e35c80fc]",
            "model_name": "sd_xl_base_1.0", "hash": "31e35c80fc",
            "filename": "/models/sd_xl_base_1.0.safetensors"
        },
    ]))
    .into_response()
}

async fn options(State(ui): State<Arc<WebUi>>, headers: HeaderMap) -> Response {
    if let Err(refused) = ui.check(&headers) {
        return refused;
    }
    Json(json!({"sd_model_checkpoint": "test.safetensors"})).into_response()
}

async fn progress(
    State(ui): State<Arc<WebUi>>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
) -> Response {
    if let Err(refused) = ui.check(&headers) {
        return refused;
    }
    ui.polls.fetch_add(1, Ordering::SeqCst);
    if ui.no_progress.load(Ordering::SeqCst) {
        return (StatusCode::NOT_FOUND, "Not Found").into_response();
    }
    let mut answer =
        json!({"progress": 0.5, "eta_relative": 1.0, "state": {}, "current_image": null});
    if uri
        .query()
        .is_some_and(|q| q.contains("skip_current_image=false"))
    {
        match ui.current_images.lock().unwrap().pop_front() {
            Some(Some(image)) => answer["current_image"] = image,
            Some(None) => {
                answer.as_object_mut().unwrap().remove("current_image");
            }
            None => {}
        }
    }
    Json(answer).into_response()
}

async fn interrupt(State(ui): State<Arc<WebUi>>, headers: HeaderMap) -> Response {
    if let Err(refused) = ui.check(&headers) {
        return refused;
    }
    ui.interrupts.fetch_add(1, Ordering::SeqCst);
    Json(json!({})).into_response()
}

/// Start a WebUI; its base URL.
pub async fn start_webui(ui: Arc<WebUi>) -> String {
    let app = axum::Router::new()
        .route("/sdapi/v1/txt2img", post(txt2img))
        .route("/sdapi/v1/img2img", post(img2img))
        .route("/sdapi/v1/extra-single-image", post(extras))
        .route("/sdapi/v1/interrogate", post(interrogate))
        .route("/sdapi/v1/sd-models", get(models))
        .route("/sdapi/v1/options", get(options))
        .route("/sdapi/v1/progress", get(progress))
        .route("/sdapi/v1/interrupt", post(interrupt))
        .with_state(ui);
    super::serve(app).await
}
