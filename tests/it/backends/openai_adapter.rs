//! The openai adapter on its own (no easel server around it) against the shared OpenAI mock:
//! the requests it makes for each model and operation (JSON fields, multipart forms and the
//! images in them), and how it sorts the backend's failures.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};

use crate::backend_mocks::openai::OpenAiMock;
use crate::backend_mocks::Fault;
use easel::config::backends::Dialect;
use easel::domain::operation::{Dimension, ImageInput, PanDirection, StoredImage, VariationOf};
use easel::domain::{AspectRatio, OpKind, Operation};
use easel::generate::backends::openai::{OpenAi, BLEND_PROMPT};
use easel::generate::backends::BackendConfig;
use easel::generate::{GenerateError, Generator, Job, Product, Progress};
use easel::images::RgbaImage;

/// The key the tests give the adapter; a server may echo it.
const KEY: &str = "sk-secret-123";

/// How the mock answers, as the failures test names it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Status(u16),
    RateLimited,
    Refuse(&'static str),
    KeyEcho,
    BadJson,
    BadBase64,
    NotImage,
    Count(usize),
    MixedSizes,
}

fn error_body(message: &str, kind: &str) -> String {
    json!({ "error": { "message": message, "type": kind } }).to_string()
}

fn fault(mode: Mode) -> Fault {
    match mode {
        Mode::Status(code) => Fault::Status {
            code,
            retry_after: None,
            body: error_body("boom", "server_error"),
        },
        Mode::RateLimited => Fault::Status {
            code: 429,
            retry_after: Some(7),
            body: error_body("slow down", "requests"),
        },
        Mode::Refuse(code) => Fault::Refuse(code),
        Mode::KeyEcho => Fault::Status {
            code: 401,
            retry_after: None,
            body: json!({ "error": {
                "message": format!("Incorrect API key provided: {KEY}."),
                "type": "invalid_request_error",
                "code": "invalid_api_key",
            } })
            .to_string(),
        },
        Mode::BadJson => Fault::BadJson,
        Mode::BadBase64 => Fault::BadBase64,
        Mode::NotImage => Fault::NotImage,
        Mode::Count(k) => Fault::Count(k),
        Mode::MixedSizes => Fault::MixedSizes,
    }
}

/// The mock, started; its API base (`.../v1`).
async fn serve(mock: OpenAiMock) -> (Arc<OpenAiMock>, String) {
    let mock = Arc::new(mock);
    let url = mock.start().await;
    (mock, url)
}

/// A mock that accepts `key` (any request when `None`) and answers images of `made`.
async fn serve_making(key: Option<&str>, made: Option<(u32, u32)>) -> (Arc<OpenAiMock>, String) {
    let mock = OpenAiMock {
        key: key.map(str::to_string),
        ..OpenAiMock::default()
    };
    *mock.made.lock().unwrap() = made;
    serve(mock).await
}

fn config(url: &str, model: Option<&str>, key: Option<&str>) -> BackendConfig {
    let mut config: BackendConfig = serde_json::from_value(json!({
        "name": "oa",
        "kind": "openai",
        "url": url,
    }))
    .unwrap();
    config.model = model.map(str::to_string);
    config.api_key = key.map(str::to_string);
    config.timeout = Duration::from_secs(20);
    config
}

fn backend(url: &str, model: Option<&str>, key: Option<&str>) -> OpenAi {
    OpenAi::new(&config(url, model, key)).unwrap()
}

fn source(image: &RgbaImage) -> StoredImage {
    StoredImage {
        key: "parent".into(),
        width: image.width,
        height: image.height,
    }
}

fn job(operation: Operation, aspect: (u32, u32), image_size: u32) -> Job {
    Job {
        operation,
        prompt: "a red fox in snow".into(),
        seed: 7,
        aspect: AspectRatio {
            width: aspect.0,
            height: aspect.1,
        },
        image_size,
        inputs: Vec::new().into(),
        mask: None,
        references: Vec::<easel::images::RgbaImage>::new().into(),
        reservation: None,
        extras: Default::default(),
    }
}

fn solid(w: u32, h: u32, rgba: [u8; 4]) -> RgbaImage {
    let mut image = RgbaImage::new(w, h);
    for px in image.data.chunks_exact_mut(4) {
        px.copy_from_slice(&rgba);
    }
    image
}

fn px(image: &RgbaImage, x: u32, y: u32) -> [u8; 4] {
    let i = ((y * image.width + x) * 4) as usize;
    image.data[i..i + 4].try_into().unwrap()
}

async fn run(backend: &OpenAi, job: &Job) -> Result<Product, GenerateError> {
    backend.run(job, &Progress::default()).await
}

fn grid_size(product: &Product) -> (u32, u32) {
    match product {
        Product::Grid { width, height, .. } => (*width, *height),
        other => panic!("not a grid: {other:?}"),
    }
}

#[tokio::test]
async fn gpt_image_imagine_asks_four_at_its_size_and_keeps_what_it_made() {
    let (mock, url) = serve_making(Some(KEY), Some((48, 32))).await;
    let backend = backend(&url, Some("gpt-image-1"), Some(KEY));
    let product = run(&backend, &job(Operation::Imagine, (3, 2), 64))
        .await
        .unwrap();
    assert_eq!(grid_size(&product), (48, 32));
    let seen = mock.seen_at("/images/generations");
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0].authorization.as_deref(),
        Some(&format!("Bearer {KEY}")[..])
    );
    let body = seen[0].json.as_ref().unwrap();
    assert_eq!(body["model"], "gpt-image-1");
    assert_eq!(body["prompt"], "a red fox in snow");
    assert_eq!(body["n"], 4);
    assert_eq!(body["size"], "1536x1024");
    assert!(body.get("response_format").is_none(), "{body}");
}

#[tokio::test]
async fn a_local_model_gets_the_jobs_size_and_base64_without_a_key() {
    let (mock, url) = serve_making(None, None).await;
    let backend = backend(&url, Some("sd-turbo"), None);
    let progress = Progress::default();
    let product = backend
        .run(&job(Operation::Reroll, (16, 9), 128), &progress)
        .await
        .unwrap();
    assert_eq!(grid_size(&product), (128, 64));
    assert!(progress.get() >= 80);
    let seen = mock.seen_at("/images/generations");
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].authorization, None);
    let body = seen[0].json.as_ref().unwrap();
    assert_eq!(body["model"], "sd-turbo");
    assert_eq!(body["size"], "128x64");
    assert_eq!(body["n"], 4);
    assert_eq!(body["response_format"], "b64_json");
}

/// The base64 of an answer is read where it lies in the body when it needs no unescaping; an
/// answer whose base64 does (`\/`) gives the same files.
#[tokio::test]
async fn escaped_base64_in_an_answer_gives_the_same_images() {
    let (mock, url) = serve_making(None, None).await;
    let backend = backend(&url, Some("sd-turbo"), None);
    let job = job(Operation::Imagine, (1, 1), 96);
    let files = |product: Product| match product {
        Product::Grid { images, .. } => images.map(|i| i.bytes),
        other => panic!("not a grid: {other:?}"),
    };
    let plain = files(run(&backend, &job).await.unwrap());
    mock.script.set(Fault::Escaped);
    let escaped = files(run(&backend, &job).await.unwrap());
    assert_eq!(plain, escaped);
    assert!(plain.iter().all(|f| f.starts_with(b"\x89PNG")));
    // The answer did carry escapes: these files' base64 has a `/`.
    let b64 = |f: &Vec<u8>| base64::engine::general_purpose::STANDARD.encode(f);
    assert!(plain.iter().any(|f| b64(f).contains('/')));
}

#[tokio::test]
async fn a_models_checkpoint_is_the_model_asked_for_with_what_that_model_accepts() {
    let (mock, url) = serve_making(Some(KEY), None).await;
    let checkpoints = [("openai-3".to_string(), "dall-e-3".to_string())].into();
    let backend = OpenAi::new(&config(&url, Some("sd-turbo"), Some(KEY)))
        .unwrap()
        .with_checkpoints(checkpoints)
        .unwrap();
    let mut job = job(Operation::Imagine, (1, 1), 64);
    job.extras.settings.model = Some("openai-3".into());
    // Settings the images API has no field for are not sent.
    job.extras.settings.steps = Some(20);
    job.extras.settings.negative_prompt = Some("trees".into());
    run(&backend, &job).await.unwrap();
    let seen = mock.seen_at("/images/generations");
    // dall-e-3 makes one image a request, at its own sizes.
    assert_eq!(seen.len(), 4);
    let body = seen[0].json.as_ref().unwrap();
    assert_eq!(body["model"], "dall-e-3");
    assert_eq!(body["size"], "1024x1024");
    assert!(body.get("steps").is_none() && body.get("negative_prompt").is_none());
    // A job of another model runs on the backend's own.
    job.extras.settings.model = Some("sd-turbo".into());
    run(&backend, &job).await.unwrap();
    let seen = mock.seen_at("/images/generations");
    assert_eq!(
        seen.last().unwrap().json.as_ref().unwrap()["model"],
        "sd-turbo"
    );
}

#[tokio::test]
async fn dall_e_3_makes_four_requests_and_url_answers_are_fetched() {
    let mock = OpenAiMock {
        key: Some(KEY.into()),
        urls: true,
        ..OpenAiMock::default()
    };
    *mock.made.lock().unwrap() = Some((32, 18));
    let (mock, url) = serve(mock).await;
    let backend = backend(&url, Some("dall-e-3"), Some(KEY));
    let product = run(&backend, &job(Operation::Imagine, (16, 9), 64))
        .await
        .unwrap();
    assert_eq!(grid_size(&product), (32, 18));
    let seen = mock.seen_at("/images/generations");
    assert_eq!(seen.len(), 4);
    for s in &seen {
        let body = s.json.as_ref().unwrap();
        assert_eq!(body["n"], 1);
        assert_eq!(body["size"], "1792x1024");
        assert_eq!(body["model"], "dall-e-3");
        assert_eq!(body["response_format"], "b64_json");
    }
    let files = mock.file_fetches.lock().unwrap().len();
    assert_eq!(files, 4);
    // dall-e-3 has no edits.
    assert!(backend.supports(OpKind::Imagine) && backend.supports(OpKind::Reroll));
    for kind in [
        OpKind::Variations,
        OpKind::Pan,
        OpKind::Inpaint,
        OpKind::Blend,
    ] {
        assert!(!backend.supports(kind), "{kind}");
    }
}

#[tokio::test]
async fn dall_e_2_is_square_and_varies_through_the_variations_endpoint() {
    let (mock, url) = serve_making(Some(KEY), Some((16, 16))).await;
    let backend = backend(&url, Some("dall-e-2"), Some(KEY));
    run(&backend, &job(Operation::Imagine, (16, 9), 64))
        .await
        .unwrap();
    let seen = mock.seen_at("/images/generations");
    assert_eq!(seen[0].json.as_ref().unwrap()["size"], "256x256");

    let parent = solid(40, 30, [10, 200, 30, 255]);
    let mut j = job(
        Operation::Variations {
            of: VariationOf::Index(2),
            source: source(&parent),
        },
        (4, 3),
        512,
    );
    j.inputs = vec![parent].into();
    let product = run(&backend, &j).await.unwrap();
    assert_eq!(grid_size(&product), (16, 16));
    let seen = mock.seen_at("/images/variations");
    assert_eq!(seen.len(), 1);
    let s = &seen[0];
    assert_eq!(
        s.authorization.as_deref(),
        Some(&format!("Bearer {KEY}")[..])
    );
    assert_eq!(s.text("model").as_deref(), Some("dall-e-2"));
    assert_eq!(s.text("n").as_deref(), Some("4"));
    assert_eq!(s.text("size").as_deref(), Some("512x512"));
    assert_eq!(s.text("response_format").as_deref(), Some("b64_json"));
    assert!(!s.has("prompt") && !s.has("mask"));
    let image = s.png("image");
    assert_eq!((image.width, image.height), (512, 512));
}

#[tokio::test]
async fn inpaint_sends_the_parent_and_easels_mask_as_transparency() {
    let (mock, url) = serve_making(None, None).await;
    let backend = backend(&url, Some("sd-turbo"), None);
    let parent = solid(64, 64, [200, 20, 20, 255]);
    // easel's mask: white (redrawn) on the left half, black (kept) on the right.
    let mut mask = solid(64, 64, [0, 0, 0, 255]);
    for y in 0..64 {
        for x in 0..32 {
            let i = ((y * 64 + x) * 4) as usize;
            mask.data[i..i + 4].copy_from_slice(&[255, 255, 255, 255]);
        }
    }
    let mut j = job(
        Operation::Inpaint {
            source: source(&parent),
            mask: String::new(),
        },
        (1, 1),
        64,
    );
    j.inputs = vec![parent.clone()].into();
    j.mask = Some(mask.into());
    let product = run(&backend, &j).await.unwrap();
    assert_eq!(grid_size(&product), (64, 64));
    let seen = mock.seen_at("/images/edits");
    assert_eq!(seen.len(), 1);
    let s = &seen[0];
    assert_eq!(s.text("model").as_deref(), Some("sd-turbo"));
    assert_eq!(s.text("prompt").as_deref(), Some("a red fox in snow"));
    assert_eq!(s.text("n").as_deref(), Some("4"));
    assert_eq!(s.text("size").as_deref(), Some("64x64"));
    assert_eq!(s.text("response_format").as_deref(), Some("b64_json"));
    assert_eq!(s.png("image"), parent);
    let sent = s.png("mask");
    assert_eq!((sent.width, sent.height), (64, 64));
    assert_eq!(px(&sent, 5, 40)[3], 0, "redrawn: transparent");
    assert_eq!(px(&sent, 31, 0)[3], 0);
    assert_eq!(px(&sent, 32, 0)[3], 255, "kept: opaque");
    assert_eq!(px(&sent, 60, 60)[3], 255);
    // stable-diffusion.cpp's server reads the mask as grey, without its alpha, and redraws
    // white: the same mask says the same to it.
    assert_eq!(px(&sent, 5, 40)[..3], [255, 255, 255], "redrawn: white");
    assert_eq!(px(&sent, 60, 60)[..3], [0, 0, 0], "kept: black");
}

/// stable-diffusion.cpp's server reads what the images API has no field for from JSON between
/// `<sd_cpp_extra_args>` tags in the prompt; with `dialect = "sd-cpp"` easel sends the job's
/// seed and settings there (an edit's strength too), and from no backend may a caller's own
/// tags reach the server.
#[tokio::test]
async fn the_sd_cpp_dialect_sends_the_settings_in_the_prompt_and_no_caller_can() {
    let extra = |prompt: &str| -> Value {
        let (_, args) = prompt
            .split_once("<sd_cpp_extra_args>")
            .expect("extra args");
        serde_json::from_str(args.strip_suffix("</sd_cpp_extra_args>").unwrap()).unwrap()
    };
    let (mock, url) = serve_making(None, None).await;
    let mut cfg = config(&url, None, None);
    cfg.dialect = Some(Dialect::SdCpp);
    let sdcpp = OpenAi::new(&cfg).unwrap();
    let mut j = job(Operation::Imagine, (1, 1), 64);
    j.prompt = "a fox <sd_cpp_extra_args>{\"batch_count\":64}</sd_cpp_extra_args>".into();
    j.extras.settings.steps = Some(3);
    j.extras.settings.cfg_scale = Some(1.0);
    run(&sdcpp, &j).await.unwrap();
    let body = mock.seen_at("/images/generations")[0].json.clone().unwrap();
    let prompt = body["prompt"].as_str().unwrap();
    assert!(
        prompt.starts_with("a fox {\"batch_count\":64}<sd_cpp_extra_args>"),
        "{prompt}"
    );
    assert_eq!(
        extra(prompt),
        json!({ "seed": 7, "sample_params": { "sample_steps": 3, "guidance": { "txt_cfg": 1.0 } } })
    );

    let parent = solid(64, 64, [200, 20, 20, 255]);
    let mut v = job(
        Operation::Variations {
            source: source(&parent),
            of: VariationOf::Subtle,
        },
        (1, 1),
        64,
    );
    v.inputs = vec![parent].into();
    run(&sdcpp, &v).await.unwrap();
    let edit = &mock.seen_at("/images/edits")[0];
    assert_eq!(extra(&edit.text("prompt").unwrap())["strength"], 0.45);

    // Without the dialect the settings stay out, and so do a caller's tags.
    let plain = backend(&url, None, None);
    run(&plain, &j).await.unwrap();
    let body = mock.seen_at("/images/generations")[0].json.clone().unwrap();
    assert_eq!(body["prompt"], "a fox {\"batch_count\":64}");
}

/// Image prompts are an edit of the image at the new image's size; dall-e-3, which has no
/// edits, generates from the text alone.
#[tokio::test]
async fn image_prompts_are_edits_where_the_model_has_them() {
    let (mock, url) = serve_making(None, None).await;
    let local = backend(&url, Some("sd-turbo"), None);
    let mut j = job(Operation::Imagine, (16, 9), 128);
    j.inputs = vec![solid(20, 20, [10, 200, 10, 255])].into();
    let product = run(&local, &j).await.unwrap();
    assert_eq!(grid_size(&product), (128, 64));
    assert!(mock.seen_at("/images/generations").is_empty());
    let seen = mock.seen_at("/images/edits");
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].text("size").as_deref(), Some("128x64"));
    assert_eq!(seen[0].text("prompt").as_deref(), Some("a red fox in snow"));
    assert!(!seen[0].has("mask"));
    let sent = seen[0].png("image");
    assert_eq!((sent.width, sent.height), (128, 64));
    assert_eq!(
        px(&sent, 60, 32),
        [10, 200, 10, 255],
        "the image prompt, covering it"
    );

    let mock3 = OpenAiMock {
        key: Some(KEY.into()),
        ..OpenAiMock::default()
    };
    *mock3.made.lock().unwrap() = Some((32, 32));
    let (mock3, url3) = serve(mock3).await;
    let dalle3 = backend(&url3, Some("dall-e-3"), Some(KEY));
    run(&dalle3, &j).await.unwrap();
    assert!(mock3.seen_at("/images/edits").is_empty());
    assert_eq!(mock3.seen_at("/images/generations").len(), 4);
}

#[tokio::test]
async fn pan_and_outpaint_edit_the_transparent_part_of_a_larger_canvas() {
    let (mock, url) = serve_making(None, None).await;
    let backend = backend(&url, Some("sd-turbo"), None);
    let red = [220, 10, 10, 255];
    let parent = solid(64, 64, red);
    for (direction, kept, drawn) in [
        (PanDirection::Right, (10, 32), (120, 32)),
        (PanDirection::Left, (120, 32), (10, 32)),
    ] {
        let mut j = job(
            Operation::Pan {
                direction,
                source: source(&parent),
            },
            (1, 1),
            128,
        );
        j.inputs = vec![parent.clone()].into();
        run(&backend, &j).await.unwrap();
        let seen = mock.seen_at("/images/edits");
        let s = &seen[0];
        // A 96x64 canvas at 128 on its long side, in multiples of 64.
        assert_eq!(s.text("size").as_deref(), Some("128x64"));
        let (image, mask) = (s.png("image"), s.png("mask"));
        assert_eq!((image.width, image.height), (128, 64));
        assert_eq!((mask.width, mask.height), (128, 64));
        assert_eq!(px(&image, kept.0, kept.1), red, "{direction:?}");
        assert_eq!(px(&mask, kept.0, kept.1)[3], 255, "{direction:?}");
        assert_eq!(px(&image, drawn.0, drawn.1)[3], 0, "{direction:?}");
        assert_eq!(px(&mask, drawn.0, drawn.1)[3], 0, "{direction:?}");
    }
    let mut down = job(
        Operation::Pan {
            direction: PanDirection::Down,
            source: source(&parent),
        },
        (1, 1),
        128,
    );
    down.inputs = vec![parent.clone()].into();
    run(&backend, &down).await.unwrap();
    let seen = mock.seen_at("/images/edits");
    assert_eq!(seen[0].text("size").as_deref(), Some("64x128"));
    let mask = seen[0].png("mask");
    assert_eq!((px(&mask, 32, 5)[3], px(&mask, 32, 125)[3]), (255, 0));

    let mut j = job(
        Operation::Outpaint {
            zoom_ratio: 2.0,
            source: source(&parent),
        },
        (1, 1),
        64,
    );
    j.inputs = vec![parent.clone()].into();
    run(&backend, &j).await.unwrap();
    let seen = mock.seen_at("/images/edits");
    let s = &seen[0];
    assert_eq!(s.text("size").as_deref(), Some("64x64"));
    let (image, mask) = (s.png("image"), s.png("mask"));
    assert_eq!(px(&image, 32, 32), red);
    assert_eq!(px(&mask, 32, 32)[3], 255);
    assert_eq!(px(&mask, 16, 16)[3], 255);
    assert_eq!(px(&mask, 15, 15)[3], 0);
    assert_eq!(px(&mask, 2, 60)[3], 0);
    assert_eq!(px(&image, 2, 60)[3], 0);
}

#[tokio::test]
async fn blend_and_variations_edit_without_a_mask() {
    let (mock, url) = serve_making(Some(KEY), Some((16, 24))).await;
    let backend = backend(&url, Some("gpt-image-1"), Some(KEY));
    let first = solid(30, 30, [1, 2, 3, 255]);
    let mut j = job(
        Operation::Blend {
            dimension: Dimension::Portrait,
            input_image_urls: vec!["a".into(), "b".into()],
            inputs: vec![
                ImageInput::Url { url: "a".into() },
                ImageInput::Url { url: "b".into() },
            ],
        },
        (2, 3),
        64,
    );
    j.prompt = String::new();
    j.inputs = vec![first.clone(), solid(20, 20, [9, 9, 9, 255])].into();
    let product = run(&backend, &j).await.unwrap();
    assert_eq!(grid_size(&product), (16, 24));
    let seen = mock.seen_at("/images/edits");
    let s = &seen[0];
    assert_eq!(s.text("prompt").as_deref(), Some(BLEND_PROMPT));
    assert_eq!(s.text("size").as_deref(), Some("1024x1536"));
    assert_eq!(s.text("model").as_deref(), Some("gpt-image-1"));
    assert!(!s.has("mask") && !s.has("response_format"));
    let image = s.png("image");
    assert_eq!((image.width, image.height), (1024, 1536));

    let mut j = job(
        Operation::Variations {
            of: VariationOf::Strong,
            source: source(&first),
        },
        (1, 1),
        64,
    );
    j.inputs = vec![first].into();
    run(&backend, &j).await.unwrap();
    let seen = mock.seen_at("/images/edits");
    assert_eq!(seen[0].text("prompt").as_deref(), Some("a red fox in snow"));
    assert_eq!(seen[0].text("size").as_deref(), Some("1024x1024"));
    assert!(!seen[0].has("mask"));
}

#[tokio::test]
async fn failures_are_sorted() {
    let (mock, url) = serve_making(None, None).await;
    let backend = backend(&url, Some("sd-turbo"), Some(KEY));
    let imagine = job(Operation::Imagine, (1, 1), 64);
    let mut results = Vec::new();
    for mode in [
        Mode::Status(500),
        Mode::Status(503),
        Mode::RateLimited,
        Mode::Status(400),
        Mode::Status(404),
        Mode::KeyEcho,
        Mode::Refuse("content_policy_violation"),
        Mode::Refuse("moderation_blocked"),
        Mode::BadJson,
        Mode::BadBase64,
        Mode::NotImage,
        Mode::Count(3),
        Mode::MixedSizes,
    ] {
        mock.script.set(fault(mode));
        let error = run(&backend, &imagine).await.unwrap_err();
        assert!(!error.to_string().contains(KEY), "{mode:?}: {error}");
        results.push((mode, error));
    }
    for (mode, error) in results {
        match (mode, &error) {
            (Mode::Status(500 | 503), GenerateError::Transient { retry_after, .. }) => {
                assert_eq!(*retry_after, None)
            }
            (Mode::RateLimited, GenerateError::Transient { retry_after, .. }) => {
                assert_eq!(*retry_after, Some(Duration::from_secs(7)))
            }
            (Mode::Status(400 | 404), GenerateError::Failed(m)) => {
                assert!(m.contains("boom"), "{m}")
            }
            (Mode::KeyEcho, GenerateError::Failed(m)) => {
                assert!(m.contains("refused the key"), "{m}")
            }
            (Mode::Refuse(_), GenerateError::Refused(m)) => {
                assert!(m.contains("safety system"), "{m}")
            }
            (Mode::BadJson, GenerateError::Failed(m)) => {
                assert!(m.contains("not the images JSON"), "{m}")
            }
            (Mode::BadBase64, GenerateError::Failed(m)) => {
                assert!(m.contains("base64"), "{m}")
            }
            (Mode::NotImage, GenerateError::Failed(m)) => {
                assert!(m.contains("image 1"), "{m}")
            }
            (Mode::Count(3), GenerateError::Failed(m)) => {
                assert!(m.contains("3 images"), "{m}")
            }
            (Mode::MixedSizes, GenerateError::Failed(m)) => {
                assert!(m.contains("different sizes"), "{m}")
            }
            (mode, error) => panic!("{mode:?} gave {error:?}"),
        }
    }
}

#[tokio::test]
async fn a_job_past_the_timeout_is_dropped_and_transient() {
    let (mock, url) = serve_making(None, None).await;
    mock.script.set(Fault::Hang);
    let mut config = config(&url, Some("sd-turbo"), None);
    config.timeout = Duration::from_millis(300);
    let backend = OpenAi::new(&config).unwrap();
    let started = Instant::now();
    let error = run(&backend, &job(Operation::Imagine, (1, 1), 64))
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5));
    match error {
        GenerateError::Transient { message, .. } => {
            assert!(message.contains("timed out after 300ms"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    // No cancel endpoint: the request was dropped, and the server saw its connection close.
    let deadline = Instant::now() + Duration::from_secs(3);
    while !mock.hang_dropped.load(Ordering::SeqCst) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(mock.hang_dropped.load(Ordering::SeqCst));
}

#[tokio::test]
async fn refused_and_dropped_connections_are_transient() {
    // A port nobody listens on.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let closed = listener.local_addr().unwrap();
    drop(listener);
    // A server that reads the request and hangs up without answering.
    let rude = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let rude_addr = rude.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = rude.accept().await {
            use tokio::io::AsyncReadExt;
            let mut buf = [0u8; 1024];
            let _ = socket.read(&mut buf).await;
            drop(socket);
        }
    });
    for addr in [closed, rude_addr] {
        let backend = backend(&format!("http://{addr}/v1"), None, Some(KEY));
        let error = run(&backend, &job(Operation::Imagine, (1, 1), 64))
            .await
            .unwrap_err();
        assert!(
            matches!(error, GenerateError::Transient { .. }),
            "{error:?}"
        );
        assert!(backend.probe().await.is_err());
    }
}

#[tokio::test]
async fn probe_lists_the_models() {
    let (mock, url) = serve_making(Some(KEY), None).await;
    let backend = backend(&url, Some("gpt-image-1"), Some(KEY));
    backend.probe().await.unwrap();
    let seen = mock.models_seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].as_deref(), Some(&format!("Bearer {KEY}")[..]));
    *mock.models_status.lock().unwrap() = Some(401);
    let error = backend.probe().await.unwrap_err();
    assert!(error.contains("401"), "{error}");
}
