//! Every operation end to end through HTTP, checking properties of the real images: their sizes,
//! the parent's pixels kept where an operation keeps them, differences where it varies them, and
//! the same bytes for the same request and seed. Then every parent rule and bad body, and
//! hostile input images. Runs on SQLite, or with `EASEL_TEST_STORE=postgres` on PostgreSQL.

use std::time::Duration;

use base64::Engine;
use serde_json::{json, Value};

use crate::common::receiver::{Behaviour, Receiver};
use crate::common::{self, TestApp};
use easel::generate::ops;
use easel::images::{dimensions, encode_png, RgbaImage};

const WITHIN: Duration = Duration::from_secs(60);

/// Submit `body` to `/api/v1/{op}` and wait for the task to end; its record, of the type asked.
async fn run(app: &TestApp, op: &str, body: Value) -> Value {
    let record = app.finished(op, body, WITHIN).await;
    assert_eq!(record["task_type"], op);
    record
}

/// The four images of a finished grid task, checked to be of one size and to differ.
async fn grid(app: &TestApp, record: &Value) -> Vec<RgbaImage> {
    let urls = record["image_urls"].as_array().unwrap();
    assert_eq!(urls.len(), 4, "{record}");
    assert!(record["original_image_url"].is_string(), "{record}");
    let mut images = Vec::new();
    for url in urls {
        images.push(app.image(url).await);
    }
    for (i, a) in images.iter().enumerate() {
        assert_eq!((a.width, a.height), (images[0].width, images[0].height));
        for b in &images[i + 1..] {
            assert_ne!(a.data, b.data, "the four images differ");
        }
    }
    images
}

/// Mean absolute difference per channel of two images of one size.
fn difference(a: &RgbaImage, b: &RgbaImage) -> f64 {
    assert_eq!((a.width, a.height), (b.width, b.height));
    let total: u64 = a
        .data
        .iter()
        .zip(&b.data)
        .map(|(x, y)| u64::from(x.abs_diff(*y)))
        .sum();
    total as f64 / a.data.len() as f64
}

/// The `w` x `h` region of `img` whose top-left corner is (x, y).
fn crop(img: &RgbaImage, x: u32, y: u32, w: u32, h: u32) -> RgbaImage {
    let mut data = Vec::with_capacity((w * h * 4) as usize);
    for row in y..y + h {
        let start = ((row * img.width + x) * 4) as usize;
        data.extend_from_slice(&img.data[start..start + (w * 4) as usize]);
    }
    RgbaImage {
        width: w,
        height: h,
        data,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_draws_what_it_says() {
    let app = TestApp::spawn().await;
    let prompt = "a lighthouse on a rocky coast at sunset";

    // imagine: the same request with the same seed gives the same bytes; `--seed` is the same.
    let first = run(&app, "imagine", json!({"prompt": prompt, "seed": 42})).await;
    assert_eq!(first["seed"], 42);
    let parent = grid(&app, &first).await;
    assert_eq!((parent[0].width, parent[0].height), (128, 128));
    let again = run(
        &app,
        "imagine",
        json!({"prompt": format!("{prompt} --seed 42")}),
    )
    .await;
    assert_eq!(again["seed"], 42);
    assert_eq!(
        app.bytes(&first["image_urls"][2]).await,
        app.bytes(&again["image_urls"][2]).await,
        "same prompt words and seed, same bytes"
    );
    let grid_id = first["task_id"].as_str().unwrap();
    // `--ar` in the prompt sets the aspect ratio when the body does not.
    let wide = run(
        &app,
        "imagine",
        json!({"prompt": format!("{prompt} --ar 2:1")}),
    )
    .await;
    assert_eq!(wide["aspect_ratio"], "2:1");
    let wide_image = &grid(&app, &wide).await[0];
    assert_eq!((wide_image.width, wide_image.height), dimensions(2, 1, 128));

    // upscale-1x: the chosen image, as it is.
    let up = run(
        &app,
        "upscale-1x",
        json!({"parent_task_id": grid_id, "index": "2"}),
    )
    .await;
    assert_eq!(up["parent_task_id"], grid_id);
    assert_eq!(up["index"], 2);
    assert!(up.get("image_urls").is_none(), "a single image: {up}");
    let upscaled = app.image(&up["image_url"]).await;
    assert_eq!(upscaled, parent[1], "upscale-1x is image 2 itself");
    let up_id = up["task_id"].as_str().unwrap();

    // upscale-alt: twice the size, with detail a plain resize does not have; creative adds more.
    let plain = ops::resize(&upscaled, 256, 256);
    let mut alt_differences = Vec::new();
    for kind in ["subtle", "creative"] {
        let alt = run(
            &app,
            "upscale-alt",
            json!({"parent_task_id": up_id, "type": kind}),
        )
        .await;
        assert_eq!(alt["type"], kind);
        let img = app.image(&alt["image_url"]).await;
        assert_eq!((img.width, img.height), (256, 256));
        let d = difference(&img, &plain);
        assert!(d > 0.0, "{kind} is not a plain resize");
        alt_differences.push(d);
    }
    assert!(
        alt_differences[1] > alt_differences[0],
        "creative adds more detail than subtle: {alt_differences:?}"
    );

    // upscale-highres: 4x of an upscale, 2x of a grid's image.
    let high = run(
        &app,
        "upscale-highres",
        json!({"parent_task_id": up_id, "type": "4x"}),
    )
    .await;
    let img = app.image(&high["image_url"]).await;
    assert_eq!((img.width, img.height), (512, 512));
    let high = run(
        &app,
        "upscale-highres",
        json!({"parent_task_id": grid_id, "index": 3, "type": "2x"}),
    )
    .await;
    assert_eq!(high["index"], 3);
    let img = app.image(&high["image_url"]).await;
    assert_eq!((img.width, img.height), (256, 256));

    // variations: of a grid's image, and of an upscale at two strengths.
    let vary = run(
        &app,
        "variations",
        json!({"parent_task_id": grid_id, "index": 1}),
    )
    .await;
    for v in grid(&app, &vary).await {
        assert!(difference(&v, &parent[0]) > 0.0, "a variation differs");
    }
    let mut strengths = Vec::new();
    for strength in ["subtle", "strong"] {
        let vary = run(
            &app,
            "variations",
            json!({"parent_task_id": up_id, "index": strength, "seed": 5}),
        )
        .await;
        let images = grid(&app, &vary).await;
        let d: f64 = images.iter().map(|v| difference(v, &upscaled)).sum::<f64>() / 4.0;
        strengths.push(d);
    }
    assert!(
        strengths[1] > strengths[0],
        "strong varies more than subtle: {strengths:?}"
    );

    // reroll: the prompt again with a new seed.
    let reroll = run(&app, "reroll", json!({"parent_task_id": grid_id})).await;
    assert_eq!(reroll["prompt"], first["prompt"]);
    assert_ne!(reroll["seed"], first["seed"]);
    let rerolled = grid(&app, &reroll).await;
    assert_ne!(rerolled[0], parent[0]);

    // pan: half the size more in that direction, the parent's pixels in their place.
    for (direction, size, at) in [
        ("left", (192, 128), (64, 0)),
        ("right", (192, 128), (0, 0)),
        ("up", (128, 192), (0, 64)),
        ("down", (128, 192), (0, 0)),
    ] {
        let pan = run(
            &app,
            "pan",
            json!({"parent_task_id": up_id, "direction": direction}),
        )
        .await;
        assert_eq!(pan["direction"], direction);
        for img in grid(&app, &pan).await {
            assert_eq!((img.width, img.height), size, "{direction}");
            assert_eq!(
                crop(&img, at.0, at.1, 128, 128),
                upscaled,
                "{direction}: the parent's pixels are kept"
            );
        }
    }

    // outpaint: the parent scaled down by the ratio, centred, with its surroundings drawn.
    let out = run(
        &app,
        "outpaint",
        json!({"parent_task_id": up_id, "zoom_ratio": 2}),
    )
    .await;
    assert_eq!(out["zoom_ratio"], 2.0);
    let (x, y, sw, sh) = ops::outpaint_placement(128, 128, 128, 128, 2.0);
    let scaled = ops::resize(&upscaled, sw, sh);
    for img in grid(&app, &out).await {
        assert_eq!((img.width, img.height), (128, 128));
        assert_eq!(crop(&img, x, y, sw, sh), scaled, "the centre is the parent");
    }
    // With another aspect ratio the canvas takes it, at the parent's long side.
    let out = run(
        &app,
        "outpaint",
        json!({"parent_task_id": up_id, "zoom_ratio": "1", "aspect_ratio": "2:1"}),
    )
    .await;
    let (w, h) = dimensions(2, 1, 128);
    for img in grid(&app, &out).await {
        assert_eq!((img.width, img.height), (w, h));
    }

    // inpaint: only the masked pixels change; every other pixel is the parent's, bit for bit.
    let mut mask = RgbaImage::new(128, 128);
    for y in 32..96u32 {
        for x in 0..64u32 {
            let i = ((y * 128 + x) * 4) as usize;
            mask.data[i..i + 4].copy_from_slice(&[255, 255, 255, 255]);
        }
    }
    let data_url = format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(encode_png(&mask))
    );
    let inpaint = run(
        &app,
        "inpaint",
        json!({"parent_task_id": up_id, "mask": data_url, "prompt": "a red balloon"}),
    )
    .await;
    assert!(
        !inpaint.to_string().contains("base64"),
        "the mask is never shown"
    );
    for img in grid(&app, &inpaint).await {
        let mut changed = 0;
        for (i, (a, b)) in img
            .data
            .chunks_exact(4)
            .zip(upscaled.data.chunks_exact(4))
            .enumerate()
        {
            let m = &mask.data[i * 4..i * 4 + 4];
            if ops::mask_redraws([m[0], m[1], m[2], m[3]]) {
                changed += usize::from(a != b);
            } else {
                assert_eq!(a, b, "pixel {i} outside the mask is unchanged");
            }
        }
        assert!(changed > 0, "the masked area is redrawn");
    }

    // blend: easel's own images (read from storage) mixed, at the dimension's aspect ratio.
    let blend = run(
        &app,
        "blend",
        json!({"image_urls": [first["image_urls"][0], reroll["image_urls"][1]],
               "dimension": "portrait"}),
    )
    .await;
    assert_eq!(blend["dimension"], "portrait");
    assert_eq!(blend["input_image_urls"][0], first["image_urls"][0]);
    let (w, h) = dimensions(2, 3, 128);
    for img in grid(&app, &blend).await {
        assert_eq!((img.width, img.height), (w, h));
    }

    // describe: four prompts; for the caller's own easel image, led by its scene's words.
    let describe = run(&app, "describe", json!({"image_url": up["image_url"]})).await;
    let content = describe["content"].as_array().unwrap();
    assert_eq!(content.len(), 4, "{describe}");
    assert!(
        content
            .iter()
            .all(|p| p.as_str().unwrap().contains("lighthouse")),
        "{describe}"
    );
    assert!(
        describe.get("image_url").is_none(),
        "a text task: {describe}"
    );

    // shorten: shorter prompts that keep the important words.
    let long = "a very beautiful highly detailed painting of a lighthouse on a rocky coast \
                at sunset, trending on artstation --ar 16:9";
    let short = run(&app, "shorten", json!({"prompt": long})).await;
    let content = short["content"].as_array().unwrap();
    assert!((1..=5).contains(&content.len()), "{short}");
    for p in content {
        let p = p.as_str().unwrap();
        assert!(p.len() < long.len() && !p.contains("--ar"), "{p}");
        assert!(p.contains("lighthouse"), "{p}");
    }

    // seed: the parent's seed.
    let seed = run(&app, "seed", json!({"task_id": grid_id})).await;
    assert_eq!(seed["seed"], 42);
    assert_eq!(seed["parent_task_id"], grid_id);

    // faceswap needs a backend that can do it; the procedural one cannot.
    let (status, body) = app
        .post(
            "/api/v1/faceswap",
            &json!({"target_image_url": "https://example.com/a.png",
                    "swap_image_url": "https://example.com/b.png"}),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["errors"][0]["code"], "unsupported_operation");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_ups_webhook_names_its_parent_and_parameters() {
    let receiver = Receiver::start(vec![Behaviour::Status(200)]).await;
    let app = TestApp::spawn().await;
    let parent = run(&app, "imagine", json!({"prompt": "a quiet harbour"})).await;
    let (status, body) = app
        .post(
            "/api/v1/upscale-1x",
            &json!({"parent_task_id": parent["task_id"], "index": 4,
                    "webhook_url": receiver.url}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let id = body["task_id"].as_str().unwrap();
    let record = app.wait_final(id, WITHIN).await;
    let delivery = common::wait_for(WITHIN, || async { receiver.received().into_iter().next() })
        .await
        .expect("the webhook arrives");
    let payload: Value = serde_json::from_slice(&delivery.body).unwrap();
    assert_eq!(
        payload,
        json!({"task_id": id, "task_type": "upscale-1x", "status": "finished",
               "percentage": "100", "parent_task_id": parent["task_id"], "index": 4,
               "image_url": record["image_url"]})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parent_rules_and_bad_bodies_are_refused_naming_the_field() {
    let app =
        TestApp::spawn_with(|c| c.worker.procedural_min_duration = Duration::from_millis(300))
            .await;
    let grid = run(&app, "imagine", json!({"prompt": "a field of tulips"})).await;
    let g = grid["task_id"].as_str().unwrap().to_string();
    let up = run(&app, "upscale-1x", json!({"parent_task_id": g, "index": 1})).await;
    let u = up["task_id"].as_str().unwrap().to_string();
    let text = run(&app, "shorten", json!({"prompt": "a field of red tulips"})).await;
    let t = text["task_id"].as_str().unwrap().to_string();
    // Every task takes at least 300 ms here, so one just submitted has not finished.
    let (_, running) = app
        .post("/api/v1/imagine", &json!({"prompt": "still drawing"}))
        .await;
    let r = running["task_id"].as_str().unwrap().to_string();
    let missing = uuid::Uuid::new_v4().to_string();
    let mask_png = |w: u32, h: u32| {
        let mut m = RgbaImage::new(w, h);
        m.data.iter_mut().for_each(|b| *b = 255);
        format!(
            "data:image/png;base64,{}",
            base64::engine::general_purpose::STANDARD.encode(encode_png(&m))
        )
    };
    let before = app.stored_tasks().await;
    let cases: Vec<(&str, Value, u16, &str)> = vec![
        (
            "upscale-1x",
            json!({"index": 1}),
            400,
            "parent_task_id: is required",
        ),
        (
            "upscale-1x",
            json!({"parent_task_id": "nope", "index": 1}),
            400,
            "parent_task_id: must be a UUID",
        ),
        (
            "upscale-1x",
            json!({"parent_task_id": g}),
            400,
            "index: is required",
        ),
        (
            "upscale-1x",
            json!({"parent_task_id": g, "index": 5}),
            400,
            "index: must be 1, 2, 3 or 4",
        ),
        (
            "upscale-1x",
            json!({"parent_task_id": g, "index": "strong"}),
            400,
            "index: must be 1, 2, 3 or 4",
        ),
        (
            "upscale-1x",
            json!({"parent_task_id": g, "index": [1]}),
            400,
            "index: must be an integer or a string",
        ),
        (
            "upscale-1x",
            json!({"parent_task_id": u, "index": 1}),
            400,
            "parent_task_id: must be a grid task",
        ),
        (
            "upscale-1x",
            json!({"parent_task_id": missing, "index": 1}),
            404,
            "task not found",
        ),
        (
            "upscale-1x",
            json!({"parent_task_id": r, "index": 1}),
            400,
            "parent_task_id: the task is ",
        ),
        (
            "upscale-alt",
            json!({"parent_task_id": g, "type": "subtle"}),
            400,
            "parent_task_id: must be an upscale-1x task",
        ),
        (
            "upscale-alt",
            json!({"parent_task_id": u, "type": "wild"}),
            400,
            "type: must be one of \"subtle\", \"creative\"",
        ),
        (
            "upscale-highres",
            json!({"parent_task_id": u}),
            400,
            "type: is required",
        ),
        (
            "upscale-highres",
            json!({"parent_task_id": u, "type": "3x"}),
            400,
            "type: must be one of \"2x\", \"4x\"",
        ),
        (
            "upscale-highres",
            json!({"type": "2x"}),
            400,
            "parent_task_id: give either parent_task_id or image_url",
        ),
        (
            "upscale-highres",
            json!({"type": "2x", "parent_task_id": g}),
            400,
            "index: is required when the parent is a grid task",
        ),
        (
            "upscale-highres",
            json!({"type": "2x", "parent_task_id": t}),
            400,
            "parent_task_id: must be an image task",
        ),
        (
            "upscale-highres",
            json!({"type": "2x", "image_url": "ftp://example.com/a.png"}),
            400,
            "image_url: ",
        ),
        (
            "variations",
            json!({"parent_task_id": g, "index": "strong"}),
            400,
            "index: must be 1 to 4 when the parent is a grid task",
        ),
        (
            "variations",
            json!({"parent_task_id": u, "index": 1}),
            400,
            "index: must be \"strong\" or \"subtle\"",
        ),
        (
            "variations",
            json!({"parent_task_id": t, "index": 1}),
            400,
            "parent_task_id: must be a grid or upscale task",
        ),
        (
            "variations",
            json!({"parent_task_id": g, "index": 1, "aspect_ratio": "9:1"}),
            400,
            "aspect_ratio: ratio must be between 1:4 and 4:1",
        ),
        (
            "reroll",
            json!({"parent_task_id": u}),
            400,
            "parent_task_id: must be a grid task",
        ),
        (
            "reroll",
            json!({"parent_task_id": g, "prompt": "bell\u{7}"}),
            400,
            "prompt: must not contain control characters",
        ),
        (
            "pan",
            json!({"parent_task_id": g, "direction": "up"}),
            400,
            "parent_task_id: must be an upscale task",
        ),
        (
            "pan",
            json!({"parent_task_id": u, "direction": "north"}),
            400,
            "direction: must be one of",
        ),
        (
            "pan",
            json!({"parent_task_id": u}),
            400,
            "direction: is required",
        ),
        (
            "outpaint",
            json!({"parent_task_id": u, "zoom_ratio": 2.5}),
            400,
            "zoom_ratio: must be a number from 1 to 2",
        ),
        (
            "outpaint",
            json!({"parent_task_id": u}),
            400,
            "zoom_ratio: is required",
        ),
        (
            "outpaint",
            json!({"parent_task_id": u, "zoom_ratio": true}),
            400,
            "zoom_ratio: must be a number",
        ),
        (
            "inpaint",
            json!({"parent_task_id": u}),
            400,
            "mask: is required",
        ),
        (
            "inpaint",
            json!({"parent_task_id": u, "mask": "https://example.com/m.png"}),
            400,
            "mask: must be a data URL of a PNG",
        ),
        (
            "inpaint",
            json!({"parent_task_id": u, "mask": "data:image/png;base64,@@@"}),
            400,
            "mask: is not valid base64",
        ),
        (
            "inpaint",
            json!({"parent_task_id": u, "mask": "data:image/png;base64,aGVsbG8="}),
            400,
            "mask: is not a valid PNG",
        ),
        (
            "inpaint",
            json!({"parent_task_id": u, "mask": mask_png(64, 64)}),
            400,
            "mask: is 64x64; it must be the parent image's size, 128x128",
        ),
        (
            "inpaint",
            json!({"parent_task_id": u, "mask": mask_png(4000, 10)}),
            400,
            "mask: is 4000x10",
        ),
        (
            "inpaint",
            json!({"parent_task_id": g, "mask": mask_png(128, 128)}),
            400,
            "parent_task_id: must be an upscale task",
        ),
        (
            "blend",
            json!({"image_urls": ["https://example.com/a.png"]}),
            400,
            "image_urls: must hold 2 to 5 URLs (got 1)",
        ),
        (
            "blend",
            json!({"image_urls": ["https://example.com/a.png", 3]}),
            400,
            "image_urls[1]: must be a string",
        ),
        (
            "blend",
            json!({"image_urls": ["https://example.com/a.png", "https://example.com/b.png"], "dimension": "round"}),
            400,
            "dimension: must be one of",
        ),
        ("describe", json!({}), 400, "image_url: is required"),
        (
            "describe",
            json!({"image_url": "not a url"}),
            400,
            "image_url: ",
        ),
        (
            "shorten",
            json!({"prompt": ""}),
            400,
            "prompt: must not be empty",
        ),
        (
            "seed",
            json!({"parent_task_id": g}),
            400,
            "task_id: is required",
        ),
        (
            "seed",
            json!({"task_id": t}),
            400,
            "task_id: must be an image task",
        ),
        ("seed", json!({"task_id": missing}), 404, "task not found"),
        (
            "imagine",
            json!({"prompt": "a", "seed": -1}),
            400,
            "seed: must be an integer from 0 to 4294967295",
        ),
        (
            "imagine",
            json!({"prompt": "a --seed x"}),
            400,
            "prompt: --seed must be an integer",
        ),
    ];
    for (op, body, status, msg) in cases {
        let (got, answer) = app.post(&format!("/api/v1/{op}"), &body).await;
        let text = answer.to_string();
        assert_eq!(got, status, "{op} {body}: {text}");
        let first = answer["errors"][0]["msg"].as_str().unwrap_or("");
        assert!(
            first.starts_with(msg),
            "{op} {body}: {first:?} should start with {msg:?}"
        );
    }
    // Another account's parent is unknown to this one: 404, as if it did not exist.
    let other = app.key_for("other@example.com").await;
    let (status, answer) = app
        .post_as(
            &other,
            "/api/v1/upscale-1x",
            &json!({"parent_task_id": g, "index": 1}),
        )
        .await;
    assert_eq!(status, 404, "{answer}");
    // A bad key is still 401 `{}` whatever the body.
    let (status, answer) = app
        .post_as("nope", "/api/v1/pan", &json!({"direction": 3}))
        .await;
    assert_eq!((status, answer), (401, json!({})));
    // Nothing was written by any refused submit.
    assert_eq!(app.stored_tasks().await, before);
}

/// A PNG file with chunks written by hand: a header that claims `width` x `height` RGBA pixels,
/// then `idat` as its only data.
fn handmade_png(width: u32, height: u32, idat: &[u8]) -> Vec<u8> {
    fn crc32(bytes: &[u8]) -> u32 {
        let mut crc = 0xffff_ffffu32;
        for &b in bytes {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 == 1 {
                    (crc >> 1) ^ 0xedb8_8320
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }
    let mut out = vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a];
    let mut chunk = |kind: &[u8; 4], data: &[u8]| {
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        let mut body = kind.to_vec();
        body.extend_from_slice(data);
        out.extend_from_slice(&body);
        out.extend_from_slice(&crc32(&body).to_be_bytes());
    };
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&width.to_be_bytes());
    ihdr.extend_from_slice(&height.to_be_bytes());
    ihdr.extend_from_slice(&[8, 6, 0, 0, 0]);
    chunk(b"IHDR", &ihdr);
    chunk(b"IDAT", idat);
    chunk(b"IEND", &[]);
    out
}

/// A server of hostile images: a decompression bomb, a truncated file, a redirect to the cloud
/// metadata address, one that never answers, and one good image.
async fn hostile_server() -> String {
    use axum::response::IntoResponse;
    use axum::routing::get;
    let good = {
        let mut img = RgbaImage::new(96, 64);
        for (i, px) in img.data.chunks_exact_mut(4).enumerate() {
            px[0] = (i % 251) as u8;
            px[2] = 200;
        }
        encode_png(&img)
    };
    let truncated = good[..good.len() / 2].to_vec();
    // Zlib's empty stream: the data ends long before the pixels it claims.
    let bomb = handmade_png(
        100_000,
        100_000,
        &[0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01],
    );
    let png = |bytes: Vec<u8>| move || async move { ([("content-type", "image/png")], bytes) };
    let app = axum::Router::new()
        .route("/good.png", get(png(good)))
        .route("/truncated.png", get(png(truncated)))
        .route("/bomb.png", get(png(bomb)))
        .route(
            "/redirect.png",
            get(|| async {
                (
                    axum::http::StatusCode::FOUND,
                    [("location", "http://169.254.169.254/latest/meta-data/")],
                )
                    .into_response()
            }),
        )
        .route(
            "/hang.png",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                "never"
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    base
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_input_images_fail_their_task_cleanly_while_others_run() {
    let app = TestApp::spawn_with(|c| c.limits.input_timeout = Duration::from_secs(2)).await;
    let base = hostile_server().await;
    let submit = |op: &'static str, body: Value| {
        let app = &app;
        async move {
            let (status, answer) = app.post(&format!("/api/v1/{op}"), &body).await;
            assert_eq!(status, 200, "{op} {body}: {answer}");
            answer["task_id"].as_str().unwrap().to_string()
        }
    };
    let hostile = [
        (
            submit("describe", json!({"image_url": format!("{base}/bomb.png")})).await,
            "image_url: ",
            "megapixel",
        ),
        (
            submit(
                "upscale-highres",
                json!({"type": "2x", "image_url": format!("{base}/truncated.png")}),
            )
            .await,
            "image_url: ",
            "",
        ),
        (
            submit(
                "blend",
                json!({"image_urls": [format!("{base}/good.png"), format!("{base}/redirect.png")]}),
            )
            .await,
            "image_urls[1]: ",
            "non-public",
        ),
        (
            submit("describe", json!({"image_url": format!("{base}/hang.png")})).await,
            "image_url: ",
            "timed out",
        ),
    ];
    // Others keep running meanwhile.
    let fine = run(&app, "imagine", json!({"prompt": "a calm sea"})).await;
    assert_eq!(fine["status"], "finished");
    for (id, prefix, words) in hostile {
        let record = app.wait_final(&id, WITHIN).await;
        assert_eq!(record["status"], "failed", "{record}");
        let error = record["error"].as_str().unwrap();
        assert!(error.starts_with(prefix), "{error}");
        assert!(error.contains(words), "{error} should say {words:?}");
    }
    // A good input by URL works, and its record names it.
    let described = run(
        &app,
        "describe",
        json!({"image_url": format!("{base}/good.png")}),
    )
    .await;
    assert_eq!(described["input_image_url"], format!("{base}/good.png"));
    assert_eq!(described["content"].as_array().unwrap().len(), 4);
    let high = run(
        &app,
        "upscale-highres",
        json!({"type": "2x", "image_url": format!("{base}/good.png")}),
    )
    .await;
    let img = app.image(&high["image_url"]).await;
    assert_eq!((img.width, img.height), (192, 128));
}
