//! The sdwebui adapter against a fake of the WebUI's API.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde_json::{json, Value};

use super::answer::*;
use super::plan::*;
use super::*;
use crate::domain::operation::PanDirection;
use crate::domain::operation::{AltKind, ImageInput, StoredImage, VariationOf};
use crate::domain::{AspectRatio, Operation};
use crate::generate::raster::{decode_png, encode_png, RgbaImage};

const PASSWORD: &str = "s3cret-pw";

/// How the mock server misbehaves on its next job requests.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Normal,
    Status(u16),
    TooMany,
    Hang,
    BadJson,
    BadBase64,
    NotImage,
    Count(usize),
    Extras,
    Drop,
    NoModels,
}

struct Mock {
    mode: Mutex<Mode>,
    /// Every job request: its path and body.
    seen: Mutex<Vec<(String, Value)>>,
    interrupts: AtomicUsize,
    polls: AtomicUsize,
}

impl Mock {
    fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    fn last(&self) -> (String, Value) {
        self.seen
            .lock()
            .unwrap()
            .last()
            .cloned()
            .expect("a request")
    }
}

fn png(w: u32, h: u32, colour: [u8; 3]) -> String {
    let mut image = RgbaImage::new(w, h);
    for px in image.data.chunks_exact_mut(4) {
        px[..3].copy_from_slice(&colour);
    }
    STANDARD.encode(encode_png(&image))
}

fn unpng(text: &Value) -> RgbaImage {
    let bytes = STANDARD.decode(text.as_str().expect("a string")).unwrap();
    decode_png(&bytes).unwrap()
}

fn reject(why: String) -> Response {
    (StatusCode::UNPROCESSABLE_ENTITY, why).into_response()
}

/// The WebUI's routes, checking what easel sends.
async fn handle(
    State(mock): State<Arc<Mock>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let expected = format!("Basic {}", STANDARD.encode(format!("user:{PASSWORD}")));
    let auth = headers.get("authorization").and_then(|v| v.to_str().ok());
    if auth != Some(expected.as_str()) {
        return (
            StatusCode::UNAUTHORIZED,
            [("www-authenticate", "Basic")],
            r#"{"detail":"Incorrect username or password"}"#,
        )
            .into_response();
    }
    let path = uri.path().to_string();
    let mode = *mock.mode.lock().unwrap();
    match (method.as_str(), path.as_str()) {
        ("GET", "/sdapi/v1/progress") => {
            mock.polls.fetch_add(1, Ordering::SeqCst);
            return axum::Json(json!({
                "progress": 0.5, "eta_relative": 3.0,
                "state": {"job_count": 1, "job_no": 0, "sampling_step": 10, "sampling_steps": 20}
            }))
            .into_response();
        }
        ("POST", "/sdapi/v1/interrupt") => {
            mock.interrupts.fetch_add(1, Ordering::SeqCst);
            return axum::Json(json!({})).into_response();
        }
        ("GET", "/sdapi/v1/sd-models") if mode == Mode::NoModels => {
            return StatusCode::NOT_FOUND.into_response();
        }
        ("GET", "/sdapi/v1/sd-models") => {
            return axum::Json(json!([{
                "title": "sd_xl_base_1.0.safetensors [31e35c80fc]",
                "model_name": "sd_xl_base_1.0", "hash": "31e35c80fc",
                "filename": "/models/sd_xl_base_1.0.safetensors"
            }]))
            .into_response();
        }
        ("GET", "/sdapi/v1/options") => {
            return axum::Json(json!({"sd_model_checkpoint": "x"})).into_response();
        }
        ("POST", _) => {}
        _ => return StatusCode::NOT_FOUND.into_response(),
    }
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return reject("not JSON".into());
    };
    mock.seen.lock().unwrap().push((path.clone(), body.clone()));
    match mode {
        Mode::Status(code) => {
            return (StatusCode::from_u16(code).unwrap(), r#"{"error":"boom"}"#).into_response()
        }
        Mode::TooMany => {
            return (
                StatusCode::TOO_MANY_REQUESTS,
                [("retry-after", "7")],
                "busy",
            )
                .into_response()
        }
        Mode::Hang => {
            tokio::time::sleep(Duration::from_secs(60)).await;
        }
        Mode::BadJson => return "{\"images\": [".into_response(),
        Mode::Drop => {
            let parts: Vec<Result<Bytes, std::io::Error>> = vec![
                Ok(Bytes::from_static(b"{\"images\": [\"iVBOR")),
                Err(std::io::Error::other("dropped")),
            ];
            return Body::from_stream(futures::stream::iter(parts)).into_response();
        }
        _ => {}
    }
    match path.as_str() {
        "/sdapi/v1/txt2img" | "/sdapi/v1/img2img" => images(&path, &body, mode),
        "/sdapi/v1/extra-single-image" => {
            let image = unpng(&body["image"]);
            let Some(factor) = body["upscaling_resize"].as_u64() else {
                return reject("upscaling_resize".into());
            };
            if body["upscaler_1"].as_str().is_none_or(str::is_empty) {
                return reject("upscaler_1".into());
            }
            let f = factor as u32;
            axum::Json(json!({
                "image": png(image.width * f, image.height * f, [9, 9, 9]),
                "html_info": ""
            }))
            .into_response()
        }
        "/sdapi/v1/interrogate" => {
            unpng(&body["image"]);
            if body["model"] != "clip" {
                return reject("model".into());
            }
            axum::Json(json!({
                "caption": "a red fox in the snow, digital art,  trending on artstation\n"
            }))
            .into_response()
        }
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

fn images(path: &str, body: &Value, mode: Mode) -> Response {
    let (Some(w), Some(h)) = (body["width"].as_u64(), body["height"].as_u64()) else {
        return reject("width and height".into());
    };
    let (w, h) = (w as u32, h as u32);
    if w % 8 != 0 || h % 8 != 0 {
        return reject(format!("{w}x{h} is not in multiples of 8"));
    }
    if body["batch_size"] != 4 || body["n_iter"] != 1 || !body["prompt"].is_string() {
        return reject("batch_size, n_iter, prompt".into());
    }
    if path.ends_with("img2img") {
        let Some([init]) = body["init_images"].as_array().map(Vec::as_slice) else {
            return reject("one init image".into());
        };
        let init = unpng(init);
        if (init.width, init.height) != (w, h) {
            return reject("init image size".into());
        }
        if !body["mask"].is_null() {
            let mask = unpng(&body["mask"]);
            if (mask.width, mask.height) != (w, h) {
                return reject("mask size".into());
            }
        }
    }
    let seed = body["seed"].as_i64().unwrap_or(-1);
    let info = json!({"seed": seed, "all_seeds": [seed, seed + 1, seed + 2, seed + 3]});
    let colours = [[255, 0, 0], [0, 255, 0], [0, 0, 255], [255, 255, 0]];
    let mut out: Vec<String> = colours.iter().map(|c| png(w, h, *c)).collect();
    match mode {
        Mode::BadBase64 => out[2] = "!!not base64!!".into(),
        Mode::NotImage => out[1] = STANDARD.encode(b"GIF? no, just text"),
        Mode::Count(n) => out.truncate(n),
        Mode::Extras => {
            out.insert(0, png(w * 2, h * 2, [1, 2, 3]));
            out.push(png(w, h / 2, [4, 5, 6]));
            out[1] = format!("data:image/png;base64,{}", out[1]);
        }
        _ => {}
    }
    axum::Json(json!({ "images": out, "parameters": {}, "info": info.to_string() })).into_response()
}

async fn serve() -> (Arc<Mock>, String) {
    let mock = Arc::new(Mock {
        mode: Mutex::new(Mode::Normal),
        seen: Mutex::new(Vec::new()),
        interrupts: AtomicUsize::new(0),
        polls: AtomicUsize::new(0),
    });
    let app = Router::new().fallback(handle).with_state(mock.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (mock, url)
}

fn config(url: &str, extra: Value) -> BackendConfig {
    let mut c = json!({
        "name": "gpu-a", "kind": "sdwebui", "url": url, "timeout": "5s",
        "username": "user", "password": PASSWORD,
    });
    for (k, v) in extra.as_object().unwrap() {
        c[k] = v.clone();
    }
    serde_json::from_value(c).unwrap()
}

fn backend(url: &str, extra: Value) -> SdWebUi {
    let mut b = SdWebUi::new(&config(url, extra)).unwrap();
    b.poll = Duration::from_millis(20);
    b
}

fn stored(w: u32, h: u32) -> StoredImage {
    StoredImage {
        key: "k".into(),
        width: w,
        height: h,
    }
}

fn job(operation: Operation, inputs: Vec<RgbaImage>) -> Job {
    Job {
        operation,
        prompt: "a lighthouse at dusk".into(),
        seed: 1234,
        aspect: AspectRatio::SQUARE,
        image_size: 64,
        inputs,
        mask: None,
    }
}

fn parent(w: u32, h: u32) -> RgbaImage {
    let mut image = RgbaImage::new(w, h);
    for (i, px) in image.data.chunks_exact_mut(4).enumerate() {
        px[0] = (i % 251) as u8;
        px[1] = (i / 7 % 251) as u8;
    }
    image
}

fn pixel(image: &RgbaImage, x: u32, y: u32) -> [u8; 4] {
    let o = ((y * image.width + x) * 4) as usize;
    image.data[o..o + 4].try_into().unwrap()
}

async fn run(b: &SdWebUi, job: &Job) -> Result<Product, GenerateError> {
    b.run(job, &Progress::default()).await
}

fn grid_size(p: &Product) -> (u32, u32) {
    match p {
        Product::Grid {
            images,
            width,
            height,
            ..
        } => {
            for png in images {
                let i = decode_png(png).unwrap();
                assert_eq!((i.width, i.height), (*width, *height));
            }
            (*width, *height)
        }
        other => panic!("not a grid: {other:?}"),
    }
}

#[tokio::test]
async fn imagine_asks_txt2img_for_four_at_the_job_size() {
    let (mock, url) = serve().await;
    let b = backend(&url, json!({"model": "sd_xl_base_1.0"}));
    let mut j = job(Operation::Imagine, vec![]);
    j.aspect = AspectRatio {
        width: 16,
        height: 9,
    };
    let product = run(&b, &j).await.unwrap();
    // 64 x 36, rounded to multiples of 8.
    assert_eq!(grid_size(&product), (64, 40));
    let (path, body) = mock.last();
    assert_eq!(path, TXT2IMG);
    assert_eq!(body["prompt"], "a lighthouse at dusk");
    assert_eq!(body["seed"], 1234);
    assert_eq!(
        (body["width"].clone(), body["height"].clone()),
        (json!(64), json!(40))
    );
    assert_eq!(body["batch_size"], 4);
    assert_eq!(body["steps"], STEPS);
    assert_eq!(
        body["override_settings"]["sd_model_checkpoint"],
        "sd_xl_base_1.0"
    );
    // Without a model, no override.
    let b = backend(&url, json!({}));
    run(&b, &job(Operation::Reroll, vec![])).await.unwrap();
    assert!(mock.last().1.get("override_settings").is_none());
}

#[tokio::test]
async fn extra_images_are_passed_over() {
    let (mock, url) = serve().await;
    mock.set(Mode::Extras);
    let b = backend(&url, json!({}));
    let product = run(&b, &job(Operation::Imagine, vec![])).await.unwrap();
    assert_eq!(grid_size(&product), (64, 64));
    let Product::Grid { images, .. } = product else {
        unreachable!()
    };
    // The four of the batch, in order, not the grid before them.
    assert_eq!(
        pixel(&decode_png(&images[0]).unwrap(), 0, 0),
        [255, 0, 0, 255]
    );
    assert_eq!(
        pixel(&decode_png(&images[3]).unwrap(), 0, 0),
        [255, 255, 0, 255]
    );
}

#[tokio::test]
async fn variations_are_img2img_on_the_parent() {
    let (mock, url) = serve().await;
    let b = backend(&url, json!({}));
    for (of, strength) in [
        (VariationOf::Subtle, SUBTLE),
        (VariationOf::Strong, STRONG),
        (VariationOf::Index(2), STRONG),
    ] {
        let op = Operation::Variations {
            of,
            source: stored(60, 36),
        };
        let product = run(&b, &job(op, vec![parent(60, 36)])).await.unwrap();
        assert_eq!(grid_size(&product), (64, 40));
        let (path, body) = mock.last();
        assert_eq!(path, IMG2IMG);
        assert_eq!(body["denoising_strength"], strength);
        assert!(body.get("mask").is_none());
        assert_eq!(unpng(&body["init_images"][0]).width, 64);
    }
}

#[tokio::test]
async fn pan_masks_the_new_strip() {
    let (mock, url) = serve().await;
    let b = backend(&url, json!({}));
    let p = parent(64, 64);
    for (direction, size, new, kept) in [
        (PanDirection::Right, (96, 64), (90, 10), (10, 10)),
        (PanDirection::Left, (96, 64), (5, 10), (90, 10)),
        (PanDirection::Up, (64, 96), (10, 5), (10, 90)),
        (PanDirection::Down, (64, 96), (10, 90), (10, 5)),
    ] {
        let op = Operation::Pan {
            direction,
            source: stored(64, 64),
        };
        let product = run(&b, &job(op, vec![p.clone()])).await.unwrap();
        assert_eq!(grid_size(&product), size, "{direction:?}");
        let (_, body) = mock.last();
        let mask = unpng(&body["mask"]);
        assert_eq!(pixel(&mask, new.0, new.1)[..3], [255, 255, 255]);
        assert_eq!(pixel(&mask, kept.0, kept.1)[..3], [0, 0, 0]);
        assert_eq!(body["inpainting_fill"], 1);
        // The parent is on the canvas as it is.
        let init = unpng(&body["init_images"][0]);
        let (dx, dy) = match direction {
            PanDirection::Left => (32, 0),
            PanDirection::Up => (0, 32),
            _ => (0, 0),
        };
        assert_eq!(pixel(&init, dx + 3, dy + 5), pixel(&p, 3, 5));
    }
}

#[tokio::test]
async fn outpaint_centres_the_smaller_parent() {
    let (mock, url) = serve().await;
    let b = backend(&url, json!({}));
    let op = Operation::Outpaint {
        zoom_ratio: 2.0,
        source: stored(64, 64),
    };
    let product = run(&b, &job(op, vec![parent(64, 64)])).await.unwrap();
    assert_eq!(grid_size(&product), (64, 64));
    let mask = unpng(&mock.last().1["mask"]);
    // The parent at half size in the middle: (16, 16) to (48, 48).
    assert_eq!(pixel(&mask, 32, 32)[..3], [0, 0, 0]);
    assert_eq!(pixel(&mask, 17, 17)[..3], [0, 0, 0]);
    assert_eq!(pixel(&mask, 2, 2)[..3], [255, 255, 255]);
    assert_eq!(pixel(&mask, 60, 32)[..3], [255, 255, 255]);
}

#[tokio::test]
async fn inpaint_sends_easels_mask_in_black_and_white() {
    let (mock, url) = serve().await;
    let b = backend(&url, json!({}));
    let mut mask = RgbaImage::new(64, 64);
    for (i, px) in mask.data.chunks_exact_mut(4).enumerate() {
        if i % 64 >= 32 {
            // Bright green redraws; a transparent white pixel would not.
            px.copy_from_slice(&[0, 255, 0, 255]);
        }
    }
    let op = Operation::Inpaint {
        source: stored(64, 64),
        mask: String::new(),
    };
    let mut j = job(op, vec![parent(64, 64)]);
    j.mask = Some(mask);
    run(&b, &j).await.unwrap();
    let sent = unpng(&mock.last().1["mask"]);
    assert_eq!(pixel(&sent, 40, 3)[..3], [255, 255, 255]);
    assert_eq!(pixel(&sent, 10, 3)[..3], [0, 0, 0]);
    // A mask of another size is refused before anything is sent.
    let requests = mock.seen.lock().unwrap().len();
    j.mask = Some(RgbaImage::new(32, 64));
    assert!(matches!(run(&b, &j).await, Err(GenerateError::Failed(_))));
    j.mask = None;
    assert!(matches!(run(&b, &j).await, Err(GenerateError::Failed(_))));
    assert_eq!(mock.seen.lock().unwrap().len(), requests);
}

#[tokio::test]
async fn upscales() {
    let (mock, url) = serve().await;
    let b = backend(&url, json!({}));
    let p = parent(40, 24);
    // 1x is the image as it is, without a request.
    let op = Operation::Upscale1x {
        index: 1,
        source: stored(40, 24),
    };
    match run(&b, &job(op, vec![p.clone()])).await.unwrap() {
        Product::Single { png, width, height } => {
            assert_eq!((width, height), (40, 24));
            assert_eq!(decode_png(&png).unwrap(), p);
        }
        other => panic!("{other:?}"),
    }
    assert!(mock.seen.lock().unwrap().is_empty());
    let alt = Operation::UpscaleAlt {
        kind: AltKind::Creative,
        source: stored(40, 24),
    };
    let highres = Operation::UpscaleHighres {
        factor: 4,
        index: None,
        image_url: None,
        source: ImageInput::Url { url: "x".into() },
    };
    for (op, factor) in [(alt, 2), (highres, 4)] {
        match run(&b, &job(op, vec![p.clone()])).await.unwrap() {
            Product::Single { width, height, .. } => {
                assert_eq!((width, height), (40 * factor, 24 * factor))
            }
            other => panic!("{other:?}"),
        }
        let (path, body) = mock.last();
        assert_eq!(path, EXTRA);
        assert_eq!(body["upscaling_resize"], factor);
        assert_eq!(unpng(&body["image"]), p);
    }
}

#[tokio::test]
async fn describe_gives_four_prompts_from_the_caption() {
    let (mock, url) = serve().await;
    let b = backend(&url, json!({}));
    let op = Operation::Describe {
        image_url: "x".into(),
        input: ImageInput::Url { url: "x".into() },
        scene_words: None,
    };
    let Product::Text(prompts) = run(&b, &job(op, vec![parent(64, 36)])).await.unwrap() else {
        panic!("not text")
    };
    assert_eq!(mock.last().0, INTERROGATE);
    let caption = "a red fox in the snow, digital art, trending on artstation";
    assert_eq!(prompts[0], caption);
    assert_eq!(prompts[1], format!("{caption} --ar 16:9"));
    assert_eq!(prompts[2], "a red fox in the snow --ar 16:9");
    assert_eq!(prompts.len(), 4);
    let distinct: std::collections::HashSet<_> = prompts.iter().collect();
    assert_eq!(distinct.len(), 4);
    assert_eq!(simple_ratio(682, 1024), (2, 3));
    assert_eq!(simple_ratio(1024, 1024), (1, 1));
    assert_eq!(simple_ratio(1000, 999), (1, 1));
}

#[tokio::test]
async fn failures_are_sorted() {
    let (mock, url) = serve().await;
    let b = backend(&url, json!({}));
    let j = job(Operation::Imagine, vec![]);
    let transient = |r: Result<Product, GenerateError>| match r {
        Err(GenerateError::Transient {
            message,
            retry_after,
        }) => (message, retry_after),
        other => panic!("not transient: {other:?}"),
    };
    let failed = |r: Result<Product, GenerateError>| match r {
        Err(GenerateError::Failed(message)) => message,
        other => panic!("not failed: {other:?}"),
    };
    mock.set(Mode::TooMany);
    assert_eq!(transient(run(&b, &j).await).1, Some(Duration::from_secs(7)));
    mock.set(Mode::Status(503));
    assert!(transient(run(&b, &j).await).0.contains("503"));
    mock.set(Mode::Drop);
    transient(run(&b, &j).await);
    mock.set(Mode::Status(422));
    assert!(failed(run(&b, &j).await).contains("422"));
    mock.set(Mode::BadJson);
    assert!(failed(run(&b, &j).await).contains("malformed"));
    mock.set(Mode::BadBase64);
    assert!(failed(run(&b, &j).await).contains("not base64"));
    mock.set(Mode::NotImage);
    assert!(failed(run(&b, &j).await).contains("image 2"));
    mock.set(Mode::Count(3));
    assert!(failed(run(&b, &j).await).contains("3 images"));
    mock.set(Mode::Count(0));
    assert!(failed(run(&b, &j).await).contains("0 images"));
    // Nothing listens: transient.
    let gone = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = gone.local_addr().unwrap();
    drop(gone);
    let b = backend(&format!("http://{addr}"), json!({}));
    transient(run(&b, &j).await);
}

#[tokio::test]
async fn wrong_credentials_fail_without_showing_them() {
    let (_mock, url) = serve().await;
    let b = backend(&url, json!({"password": "wrong-password"}));
    let error = run(&b, &job(Operation::Imagine, vec![])).await.unwrap_err();
    let message = error.to_string();
    assert!(matches!(error, GenerateError::Failed(_)), "{message}");
    assert!(message.contains("401"), "{message}");
    assert!(!message.contains("wrong-password"));
    assert!(b.probe().await.unwrap_err().contains("401"));
}

#[tokio::test]
async fn a_job_past_the_timeout_is_interrupted_and_progress_reported() {
    let (mock, url) = serve().await;
    mock.set(Mode::Hang);
    let b = backend(&url, json!({"timeout": "400ms"}));
    let progress = Progress::default();
    let error = b
        .run(&job(Operation::Imagine, vec![]), &progress)
        .await
        .unwrap_err();
    match error {
        GenerateError::Transient { message, .. } => {
            assert!(message.contains("timed out after 400ms"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(mock.interrupts.load(Ordering::SeqCst), 1);
    assert!(mock.polls.load(Ordering::SeqCst) >= 1);
    assert_eq!(progress.get(), 50);
    // A job that answers in time is not interrupted.
    mock.set(Mode::Normal);
    run(&b, &job(Operation::Imagine, vec![])).await.unwrap();
    assert_eq!(mock.interrupts.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn probe_lists_models_and_checks_the_checkpoint() {
    let (mock, url) = serve().await;
    backend(&url, json!({})).probe().await.unwrap();
    for model in [
        "sd_xl_base_1.0",
        "sd_xl_base_1.0.safetensors",
        "sd_xl_base_1.0.safetensors [31e35c80fc]",
        "31e35c80fc",
    ] {
        backend(&url, json!({ "model": model }))
            .probe()
            .await
            .unwrap();
    }
    let missing = backend(&url, json!({"model": "dreamshaper"}));
    assert!(missing.probe().await.unwrap_err().contains("dreamshaper"));
    // A server without the models list answers its options.
    mock.set(Mode::NoModels);
    backend(&url, json!({})).probe().await.unwrap();
    let gone = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = gone.local_addr().unwrap();
    drop(gone);
    assert!(backend(&format!("http://{addr}"), json!({}))
        .probe()
        .await
        .is_err());
}

#[test]
fn settings_that_cannot_work_are_refused() {
    let url = "http://127.0.0.1:7860";
    let mut c = config(url, json!({"password_env": "EASEL_TEST_SDWEBUI_UNSET"}));
    c.password = None;
    let error = SdWebUi::new(&c).err().unwrap();
    assert!(error.contains("EASEL_TEST_SDWEBUI_UNSET"), "{error}");
    let mut c = config(url, json!({}));
    c.username = None;
    assert!(SdWebUi::new(&c).err().unwrap().contains("username"));
    let mut c = config(url, json!({}));
    c.url = None;
    assert!(SdWebUi::new(&c).err().unwrap().contains("url"));
    c.url = Some("ftp://x".into());
    assert!(SdWebUi::new(&c).err().unwrap().contains("url"));
    // No credentials at all is fine.
    let mut c = config(url, json!({}));
    (c.username, c.password) = (None, None);
    assert!(SdWebUi::new(&c).is_ok());
}

#[test]
fn supports_what_the_webui_can_do_and_the_settings_allow() {
    let b = SdWebUi::new(&config("http://127.0.0.1:7860", json!({}))).unwrap();
    assert_eq!(b.name(), "gpu-a");
    assert!(b.supports(OpKind::Imagine) && b.supports(OpKind::Describe));
    assert!(!b.supports(OpKind::Blend) && !b.supports(OpKind::Faceswap));
    let only = config("http://127.0.0.1:7860", json!({"operations": ["imagine"]}));
    let b = SdWebUi::new(&only).unwrap();
    assert!(b.supports(OpKind::Imagine) && !b.supports(OpKind::Pan));
}

#[test]
fn progress_answers() {
    let p = |v: Value| progress_percent(v.to_string().as_bytes());
    assert_eq!(
        p(json!({"progress": 0.42, "state": {"job_count": 1}})),
        Some(42)
    );
    assert_eq!(
        p(json!({"progress": 1.0, "state": {"job_count": 1}})),
        Some(99)
    );
    assert_eq!(p(json!({"progress": 0.0, "state": {"job_count": 0}})), None);
    assert_eq!(p(json!({"nothing": 1})), None);
}
