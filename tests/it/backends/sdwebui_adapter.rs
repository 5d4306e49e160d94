//! The sdwebui adapter on its own (no easel server around it) against the shared WebUI mock:
//! what it asks of the WebUI for each operation (and with which credentials), how it polls
//! progress and interrupts a job past its timeout, and how it sorts the WebUI's failures.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::backend_mocks::sdwebui::{start_webui, WebUi};
use crate::backend_mocks::{flat, Fault};
use easel::domain::operation::{AltKind, ImageInput, PanDirection, StoredImage, VariationOf};
use easel::domain::{AspectRatio, Operation, Settings};
use easel::generate::backends::sdwebui::{
    SdWebUi, CHAOS_SUBSEED_MOST, EXTRA, IMG2IMG, INTERROGATE, STRONG, SUBTLE, TXT2IMG,
};
use easel::generate::backends::BackendConfig;
use easel::generate::{GenerateError, Generator, Job, Product, Progress};
use easel::images::preview::PreviewImage;
use easel::images::{decode_png, RgbaImage};

const PASSWORD: &str = "s3cret-pw";

/// A WebUI asking for the tests' credentials, started; the mock and its base URL (with the
/// trailing `/` a configured URL may have).
async fn serve() -> (Arc<WebUi>, String) {
    let mock = Arc::new(WebUi {
        credentials: Some(("user".into(), PASSWORD.into())),
        ..WebUi::default()
    });
    let url = start_webui(mock.clone()).await;
    (mock, format!("{url}/"))
}

fn unpng(text: &Value) -> RgbaImage {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text.as_str().expect("a string"))
        .unwrap();
    decode_png(&bytes).unwrap()
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
        inputs: inputs.into(),
        mask: None,
        references: Vec::<easel::images::RgbaImage>::new().into(),
        reservation: None,
        extras: Default::default(),
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
            for stored in images {
                let i = decode_png(&stored.bytes).unwrap();
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
    // A task stored without settings leaves them to the WebUI: no adapter has its own.
    for field in ["steps", "cfg_scale", "sampler_name", "subseed"] {
        assert!(body.get(field).is_none(), "{field}: {body}");
    }
    assert_eq!(body["negative_prompt"], "");
    assert_eq!(body["tiling"], false);
    assert_eq!(
        body["override_settings"]["sd_model_checkpoint"],
        "sd_xl_base_1.0"
    );
    // Without a model, no override.
    let b = backend(&url, json!({}));
    run(&b, &job(Operation::Reroll, vec![])).await.unwrap();
    assert!(mock.last().1.get("override_settings").is_none());
}

/// Image prompts: img2img from them at the new image's size, denoised as `--iw` asks.
#[tokio::test]
async fn image_prompts_are_img2img_weighed_by_iw() {
    let (mock, url) = serve().await;
    let b = backend(&url, json!({}));
    for (iw, denoising) in [(None, 0.6), (Some(3.0), 0.4)] {
        let mut j = job(Operation::Imagine, vec![parent(30, 20)]);
        j.aspect = AspectRatio {
            width: 16,
            height: 9,
        };
        j.extras.parameters.iw = iw;
        let product = run(&b, &j).await.unwrap();
        assert_eq!(grid_size(&product), (64, 40));
        let (path, body) = mock.last();
        assert_eq!(path, IMG2IMG);
        assert!((body["denoising_strength"].as_f64().unwrap() - denoising).abs() < 1e-9);
        assert_eq!(body["prompt"], "a lighthouse at dusk");
        let init = unpng(&body["init_images"][0]);
        assert_eq!((init.width, init.height), (64, 40));
    }
}

#[tokio::test]
async fn the_tasks_settings_and_its_models_checkpoint_are_sent() {
    let (mock, url) = serve().await;
    let checkpoints = [("sd15".to_string(), "v1-5-pruned-emaonly".to_string())].into();
    let b = backend(&url, json!({"model": "sd_xl_base_1.0"})).with_checkpoints(checkpoints);
    let mut j = job(Operation::Imagine, vec![]);
    j.aspect = AspectRatio {
        width: 2,
        height: 3,
    };
    j.extras.settings = Settings {
        model: Some("sd15".into()),
        negative_prompt: Some("trees, fog".into()),
        steps: Some(17),
        cfg_scale: Some(5.5),
        sampler: Some("dpmpp_2m_karras".into()),
    };
    j.extras.parameters.tile = true;
    j.extras.parameters.chaos = Some(50);
    run(&b, &j).await.unwrap();
    let (path, body) = mock.last();
    assert_eq!(path, TXT2IMG);
    assert_eq!(body["negative_prompt"], "trees, fog");
    assert_eq!(body["steps"], 17);
    assert_eq!(body["cfg_scale"], 5.5);
    assert_eq!(body["sampler_name"], "DPM++ 2M Karras");
    assert_eq!(body["tiling"], true);
    assert_eq!(body["subseed"], 1235);
    assert_eq!(body["subseed_strength"], 0.5 * CHAOS_SUBSEED_MOST);
    // 64 * 2/3 = 42.7, to the nearest multiple of 8.
    assert_eq!(
        (body["width"].clone(), body["height"].clone()),
        (json!(40), json!(64))
    );
    assert_eq!(
        body["override_settings"]["sd_model_checkpoint"],
        "v1-5-pruned-emaonly"
    );
    // img2img carries them too.
    let op = Operation::Variations {
        of: VariationOf::Subtle,
        source: stored(64, 64),
    };
    let mut j2 = job(op, vec![parent(64, 64)]);
    j2.extras = j.extras.clone();
    run(&b, &j2).await.unwrap();
    let (path, body) = mock.last();
    assert_eq!(path, IMG2IMG);
    assert_eq!(
        (
            &body["steps"],
            &body["sampler_name"],
            &body["negative_prompt"]
        ),
        (&json!(17), &json!("DPM++ 2M Karras"), &json!("trees, fog"))
    );
    // Another model of the backend's runs on the backend's own checkpoint.
    j.extras.settings.model = Some("other".into());
    run(&b, &j).await.unwrap();
    assert_eq!(
        mock.last().1["override_settings"]["sd_model_checkpoint"],
        "sd_xl_base_1.0"
    );
}

#[tokio::test]
async fn extra_images_are_passed_over() {
    let (mock, url) = serve().await;
    mock.extra_images.store(true, Ordering::SeqCst);
    let b = backend(&url, json!({}));
    let product = run(&b, &job(Operation::Imagine, vec![])).await.unwrap();
    assert_eq!(grid_size(&product), (64, 64));
    let Product::Grid { images, .. } = product else {
        unreachable!()
    };
    // The four of the batch, in order, not the grid before them.
    assert_eq!(
        pixel(&decode_png(&images[0].bytes).unwrap(), 0, 0),
        pixel(&flat(1, 1, mock.shade), 0, 0)
    );
    assert_eq!(
        pixel(&decode_png(&images[3].bytes).unwrap(), 0, 0),
        pixel(&flat(1, 1, mock.shade + 3), 0, 0)
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

/// stable-diffusion.cpp draws at sides rounded up to 64 (a 96 x 64 pan comes back 128 x 64):
/// the images are resized back to the shape asked for.
#[tokio::test]
async fn images_drawn_at_another_size_are_resized_to_the_one_asked() {
    let mock = Arc::new(WebUi {
        align: 64,
        ..WebUi::default()
    });
    let url = start_webui(mock.clone()).await;
    let b = SdWebUi::new(
        &serde_json::from_value(json!({
            "name": "sdcpp", "kind": "sdwebui", "url": url, "timeout": "5s",
        }))
        .unwrap(),
    )
    .unwrap();
    let op = Operation::Pan {
        direction: PanDirection::Right,
        source: stored(64, 64),
    };
    let product = run(&b, &job(op, vec![flat(64, 64, 90)])).await.unwrap();
    assert_eq!(grid_size(&product), (96, 64));
    let (_, body) = mock.last();
    assert_eq!(
        (body["width"].as_u64(), body["height"].as_u64()),
        (Some(96), Some(64))
    );
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
    j.mask = Some(mask.into());
    run(&b, &j).await.unwrap();
    let sent = unpng(&mock.last().1["mask"]);
    assert_eq!(pixel(&sent, 40, 3)[..3], [255, 255, 255]);
    assert_eq!(pixel(&sent, 10, 3)[..3], [0, 0, 0]);
    // A mask of another size is refused before anything is sent.
    let requests = mock.seen.lock().unwrap().len();
    j.mask = Some(RgbaImage::new(32, 64).into());
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
        Product::Single {
            image,
            width,
            height,
        } => {
            assert_eq!((width, height), (40, 24));
            assert_eq!(decode_png(&image.bytes).unwrap(), p);
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
    mock.script.set(Fault::Status {
        code: 429,
        retry_after: Some(7),
        body: "busy".into(),
    });
    assert_eq!(transient(run(&b, &j).await).1, Some(Duration::from_secs(7)));
    mock.script.set(Fault::status(503));
    assert!(transient(run(&b, &j).await).0.contains("503"));
    mock.script.set(Fault::Drop);
    transient(run(&b, &j).await);
    mock.script.set(Fault::status(422));
    assert!(failed(run(&b, &j).await).contains("422"));
    mock.script.set(Fault::BadJson);
    assert!(failed(run(&b, &j).await).contains("malformed"));
    mock.script.set(Fault::BadBase64);
    assert!(failed(run(&b, &j).await).contains("not base64"));
    mock.script.set(Fault::NotImage);
    assert!(failed(run(&b, &j).await).contains("image 2"));
    mock.script.set(Fault::Count(3));
    assert!(failed(run(&b, &j).await).contains("3 images"));
    mock.script.set(Fault::Count(0));
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
    mock.script.set(Fault::Hang);
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
    mock.script.set(Fault::Ok);
    run(&b, &job(Operation::Imagine, vec![])).await.unwrap();
    assert_eq!(mock.interrupts.load(Ordering::SeqCst), 1);
}

/// Run `job` on `b`, taking each preview as it arrives; the result and the previews seen.
async fn run_watching(b: &SdWebUi, job: &Job) -> (Result<Product, GenerateError>, Vec<Vec<u8>>) {
    let progress = Progress::default();
    let mut seen = Vec::new();
    let run = b.run(job, &progress);
    tokio::pin!(run);
    let result = loop {
        tokio::select! {
            result = &mut run => break result,
            () = progress.changed() => {}
        }
        if let Some(PreviewImage::Encoded(bytes)) = progress.take_preview() {
            seen.push(bytes);
        }
    };
    if let Some(PreviewImage::Encoded(bytes)) = progress.take_preview() {
        seen.push(bytes);
    }
    (result, seen)
}

/// A WebUI with the tests' credentials whose jobs take `delay_ms`, started; its base URL.
async fn serve_slow(delay_ms: u64) -> (Arc<WebUi>, String) {
    let mock = Arc::new(WebUi {
        credentials: Some(("user".into(), PASSWORD.into())),
        delay_ms: AtomicU64::new(delay_ms),
        ..WebUi::default()
    });
    let url = start_webui(mock.clone()).await;
    (mock, url)
}

#[tokio::test]
async fn the_live_preview_reaches_progress_and_null_absent_or_garbage_is_none() {
    let (mock, url) = serve_slow(1000).await;
    let png = |shade| easel::images::encode_png(&flat(8, 8, shade));
    let (first, second) = (png(10), png(200));
    let b64 = |bytes: &[u8]| Value::from(crate::backend_mocks::b64(bytes));
    // The second preview, then only answers that are no preview: had any been taken, it
    // would have replaced the second.
    *mock.current_images.lock().unwrap() = [
        Some(Value::Null),
        Some(b64(&first)),
        Some(b64(&first)),
        Some(b64(&second)),
        Some(json!("%%% not base64 %%%")),
        Some(b64(b"base64 of text that is no image")),
        Some(json!(42)),
        None,
    ]
    .into();
    let b = backend(&url, json!({}));
    let (result, seen) = run_watching(&b, &job(Operation::Imagine, vec![])).await;
    assert!(matches!(result, Ok(Product::Grid { .. })), "{result:?}");
    assert!(
        mock.current_images.lock().unwrap().is_empty(),
        "all answers polled"
    );
    assert!(!seen.is_empty(), "the live preview reaches Progress");
    assert!(
        seen.iter().all(|p| *p == first || *p == second),
        "only the WebUI's previews"
    );
    assert_eq!(seen.last(), Some(&second), "garbage is no preview");
}

/// stable-diffusion.cpp's sd-server answers 404 at `progress`: its jobs run all the same.
#[tokio::test]
async fn a_server_without_progress_runs_its_jobs_without_progress_or_previews() {
    let (mock, url) = serve_slow(300).await;
    mock.no_progress.store(true, Ordering::SeqCst);
    let b = backend(&url, json!({}));
    let (result, seen) = run_watching(&b, &job(Operation::Imagine, vec![])).await;
    assert!(matches!(result, Ok(Product::Grid { .. })), "{result:?}");
    assert!(mock.polls.load(Ordering::SeqCst) >= 1, "progress was asked");
    assert!(seen.is_empty());
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
    mock.no_models.store(true, Ordering::SeqCst);
    backend(&url, json!({})).probe().await.unwrap();
    let gone = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = gone.local_addr().unwrap();
    drop(gone);
    assert!(backend(&format!("http://{addr}"), json!({}))
        .probe()
        .await
        .is_err());
}
