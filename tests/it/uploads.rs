//! Images from the caller (`POST /api/v1/upload`, `data:` URLs, image prompts), through the HTTP
//! API of a spawned server: each format's round trip, every kind of bad upload refused with
//! nothing stored, uploads used by describe, blend and an image prompt, another account's upload
//! refused, the daily limit, and removal after `upload_retention`.

use std::io::Cursor;
use std::time::Duration;

use crate::common::{split, wait_for, TestApp};
use base64::Engine;
use image::{DynamicImage, ImageFormat, RgbaImage};
use serde_json::{json, Value};

fn picture(w: u32, h: u32) -> RgbaImage {
    RgbaImage::from_fn(w, h, |x, y| {
        image::Rgba([(x * 7) as u8, (y * 5) as u8, ((x + y) * 3) as u8, 255])
    })
}

fn encoded(format: ImageFormat, w: u32, h: u32) -> Vec<u8> {
    let img = DynamicImage::ImageRgba8(picture(w, h));
    let img = match format {
        ImageFormat::Jpeg => DynamicImage::ImageRgb8(img.to_rgb8()),
        _ => img,
    };
    let mut out = Cursor::new(Vec::new());
    img.write_to(&mut out, format).unwrap();
    out.into_inner()
}

fn png(w: u32, h: u32) -> Vec<u8> {
    encoded(ImageFormat::Png, w, h)
}

fn data_url(mime: &str, bytes: &[u8]) -> String {
    format!(
        "data:{mime};base64,{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    )
}

async fn upload_part(app: &TestApp, key: &str, part: &str, bytes: Vec<u8>) -> (u16, Value) {
    let form = reqwest::multipart::Form::new().part(
        part.to_string(),
        reqwest::multipart::Part::bytes(bytes).file_name("picture.png"),
    );
    let res = app
        .http
        .post(app.url("/api/v1/upload"))
        .header("Authorization", key)
        .multipart(form)
        .send()
        .await
        .unwrap();
    split(res).await
}

async fn upload_raw(app: &TestApp, mime: &str, bytes: Vec<u8>) -> (u16, Value) {
    let res = app
        .http
        .post(app.url("/api/v1/upload"))
        .header("Authorization", &app.key)
        .header("Content-Type", mime)
        .body(bytes)
        .send()
        .await
        .unwrap();
    split(res).await
}

/// Files kept under the uploads folder of the local blob store.
fn stored_uploads(app: &TestApp) -> usize {
    let root = app.dir.path().join("files").join("uploads");
    walk(&root)
}

fn walk(dir: &std::path::Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| {
            if e.path().is_dir() {
                walk(&e.path())
            } else {
                1
            }
        })
        .sum()
}

#[tokio::test]
async fn each_format_round_trips_through_multipart_and_raw_uploads() {
    let app = TestApp::spawn().await;
    let formats = [
        (ImageFormat::Png, "image/png"),
        (ImageFormat::Jpeg, "image/jpeg"),
        (ImageFormat::WebP, "image/webp"),
        (ImageFormat::Gif, "image/gif"),
    ];
    for (format, mime) in formats {
        let bytes = encoded(format, 40, 30);
        for how in ["image", "file", "raw"] {
            let (status, body) = if how == "raw" {
                // The declared type is not trusted: the bytes say what they are.
                upload_raw(&app, "image/png", bytes.clone()).await
            } else {
                upload_part(&app, &app.key, how, bytes.clone()).await
            };
            assert_eq!(status, 201, "{mime} {how}: {body}");
            assert_eq!(body["content_type"], mime, "{how}");
            assert_eq!(body["byte_size"], bytes.len(), "{how}");
            assert_eq!(
                (body["width"].clone(), body["height"].clone()),
                (json!(40), json!(30))
            );
            assert_eq!(body["url"], body["imageURL"]);
            assert!(uuid::Uuid::parse_str(body["id"].as_str().unwrap()).is_ok());
            let expires =
                chrono::DateTime::parse_from_rfc3339(body["expires_at"].as_str().unwrap()).unwrap();
            let left = expires.timestamp() - chrono::Utc::now().timestamp();
            assert!((86_000..=86_400).contains(&left), "{left}");
            let res = app
                .http
                .get(body["url"].as_str().unwrap())
                .send()
                .await
                .unwrap();
            assert_eq!(res.status(), 200);
            assert_eq!(res.headers()["content-type"], mime);
            assert_eq!(res.bytes().await.unwrap().to_vec(), bytes, "{mime} {how}");
        }
    }
    assert_eq!(stored_uploads(&app), 12);
    app.stop().await;
}

/// A PNG whose header claims `w` x `h` with almost no data: a decompression bomb.
fn bomb_png(w: u32, h: u32) -> Vec<u8> {
    fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        let start = out.len();
        out.extend_from_slice(kind);
        out.extend_from_slice(data);
        let mut crc = !0u32;
        for &b in &out[start..] {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ 0xedb8_8320
                } else {
                    crc >> 1
                };
            }
        }
        out.extend_from_slice(&(!crc).to_be_bytes());
    }
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&w.to_be_bytes());
    ihdr.extend_from_slice(&h.to_be_bytes());
    ihdr.extend_from_slice(&[8, 6, 0, 0, 0]);
    chunk(&mut out, b"IHDR", &ihdr);
    chunk(
        &mut out,
        b"IDAT",
        &[0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01],
    );
    chunk(&mut out, b"IEND", &[]);
    out
}

#[tokio::test]
async fn bad_uploads_are_refused_naming_the_field_and_nothing_is_stored() {
    let app = TestApp::spawn_with(|c| c.limits.input_max_bytes = 64 * 1024).await;
    let good = png(40, 30);
    let mut text = b"\x89PNG\r\n\x1a\n".to_vec();
    text.extend_from_slice(
        b"just some text pretending to be an image\n"
            .repeat(20)
            .as_slice(),
    );
    let mut polyglot = good.clone();
    polyglot.extend_from_slice(b"PK\x03\x04\x14\x00\x00\x00\x08\x00 hidden.zip contents");
    let zip = b"PK\x03\x04\x14\x00\x00\x00\x08\x00\x00\x00\x00\x00 a zip file".to_vec();
    let big = {
        // Noise does not compress: well over the 64 KiB limit.
        let mut rng = 7u32;
        let img = RgbaImage::from_fn(300, 300, |_, _| {
            rng = rng.wrapping_mul(1_103_515_245).wrapping_add(12345);
            image::Rgba([(rng >> 8) as u8, (rng >> 16) as u8, (rng >> 24) as u8, 255])
        });
        let mut out = Cursor::new(Vec::new());
        img.write_to(&mut out, ImageFormat::Png).unwrap();
        out.into_inner()
    };
    let jpeg = encoded(ImageFormat::Jpeg, 40, 30);
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("a PNG header on text", text, "image: "),
        ("a polyglot", polyglot, "follow the end of the image"),
        ("a zip", zip, "not a PNG, JPEG, WebP or GIF image"),
        ("over the byte limit", big, "more than the 65536 bytes"),
        (
            "a decompression bomb",
            bomb_png(100_000, 100_000),
            "100000x100000 is over the 25 megapixel limit",
        ),
        (
            "a bomb within the pixel limit",
            bomb_png(4000, 4000),
            "could not be decoded",
        ),
        (
            "a truncated PNG",
            good[..good.len() / 2].to_vec(),
            "truncated",
        ),
        (
            "a truncated JPEG",
            jpeg[..jpeg.len() - 40].to_vec(),
            "truncated",
        ),
    ];
    for (what, bytes, rule) in cases {
        let (status, body) = upload_part(&app, &app.key, "image", bytes).await;
        assert_eq!(status, 400, "{what}: {body}");
        assert_eq!(body["errors"][0]["code"], "invalid_image", "{what}: {body}");
        let msg = body["errors"][0]["msg"].as_str().unwrap();
        assert!(msg.starts_with("image: "), "{what}: {msg}");
        assert!(msg.contains(rule), "{what}: {msg}");
    }
    // The form itself: no image part, an empty one, a type that is neither.
    let form = reqwest::multipart::Form::new().text("note", "no file here");
    let res = app
        .http
        .post(app.url("/api/v1/upload"))
        .header("Authorization", &app.key)
        .multipart(form)
        .send()
        .await
        .unwrap();
    let (status, body) = split(res).await;
    assert_eq!(
        (status, body["errors"][0]["code"].clone()),
        (400, json!("missing_field"))
    );
    assert!(body["errors"][0]["msg"]
        .as_str()
        .unwrap()
        .starts_with("image: is required"));
    let (status, body) = upload_raw(&app, "text/plain", good.clone()).await;
    assert_eq!(status, 415, "{body}");
    // data: URLs: bad base64, another media type, bad content; each names its field.
    let data_cases = [
        (
            "data:image/png;base64,@@not base64@@",
            "image_url: is not valid base64",
        ),
        (
            &*data_url("text/html", b"<script>"),
            "image_url: must be a data URL of a PNG",
        ),
        (
            &*data_url("image/png", b"hello, not an image"),
            "image_url: not a PNG, JPEG",
        ),
    ];
    for (url, rule) in data_cases {
        let (status, body) = app
            .post("/api/v1/describe", &json!({ "image_url": url }))
            .await;
        assert_eq!(status, 400, "{body}");
        let msg = body["errors"][0]["msg"].as_str().unwrap();
        assert!(msg.starts_with(rule), "{msg}");
    }
    let (status, body) = app
        .post(
            "/api/v1/blend",
            &json!({ "image_urls": [data_url("image/png", &good), data_url("image/png", &good[..100])] }),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(body["errors"][0]["msg"]
        .as_str()
        .unwrap()
        .starts_with("image_urls[1]: "));
    // Without a key, nothing is read: 401 {}.
    let res = app
        .http
        .post(app.url("/api/v1/upload"))
        .header("Content-Type", "image/png")
        .body(good)
        .send()
        .await
        .unwrap();
    assert_eq!(split(res).await, (401, json!({})));
    assert_eq!(stored_uploads(&app), 0, "a refused upload stores nothing");
    app.stop().await;
}

#[tokio::test]
async fn uploads_and_data_urls_feed_describe_blend_and_image_prompts() {
    let app = TestApp::spawn().await;
    let (status, a) = upload_part(&app, &app.key, "image", png(64, 48)).await;
    assert_eq!(status, 201, "{a}");
    let (status, b) = upload_raw(&app, "image/jpeg", encoded(ImageFormat::Jpeg, 50, 50)).await;
    assert_eq!(status, 201, "{b}");
    let (a_url, b_url) = (a["url"].as_str().unwrap(), b["url"].as_str().unwrap());

    let (status, describe) = app
        .post("/api/v1/describe", &json!({ "image_url": a_url }))
        .await;
    assert_eq!(status, 200, "{describe}");
    let described = app
        .wait_final(
            describe["task_id"].as_str().unwrap(),
            Duration::from_secs(30),
        )
        .await;
    assert_eq!(described["status"], "finished", "{described}");
    assert_eq!(described["input_image_url"], a_url);

    // A data: URL is kept as an upload: the record shows its short easel URL.
    let inline = data_url("image/webp", &encoded(ImageFormat::WebP, 30, 30));
    let (status, blend) = app
        .post(
            "/api/v1/blend",
            &json!({ "image_urls": [a_url, b_url, inline] }),
        )
        .await;
    assert_eq!(status, 200, "{blend}");
    let blended = app
        .wait_final(blend["task_id"].as_str().unwrap(), Duration::from_secs(30))
        .await;
    assert_eq!(blended["status"], "finished", "{blended}");
    let inputs = blended["input_image_urls"].as_array().unwrap();
    assert_eq!(
        (inputs[0].as_str(), inputs[1].as_str()),
        (Some(a_url), Some(b_url))
    );
    let kept = inputs[2].as_str().unwrap();
    assert!(
        kept.starts_with(&app.url("/files/uploads/")) && kept.ends_with(".webp"),
        "{kept}"
    );
    let res = app.http.get(kept).send().await.unwrap();
    assert_eq!(res.headers()["content-type"], "image/webp");

    // Image prompts: the URLs at the start of the prompt; the text after them is what is drawn,
    // and the image is blended in (the same prompt and seed without it draws something else).
    let prompt = format!(
        "{a_url} {} a lighthouse at dusk",
        data_url("image/png", &png(20, 20))
    );
    let with = app.imagine(json!({ "prompt": prompt, "seed": 7 })).await;
    let without = app
        .imagine(json!({ "prompt": "a lighthouse at dusk", "seed": 7 }))
        .await;
    let with = app.wait_final(&with, Duration::from_secs(30)).await;
    let without = app.wait_final(&without, Duration::from_secs(30)).await;
    assert_eq!(with["status"], "finished", "{with}");
    assert_eq!(with["prompt"], "a lighthouse at dusk");
    let prompts = with["image_prompts"].as_array().unwrap();
    assert_eq!(prompts[0], a_url);
    assert!(prompts[1]
        .as_str()
        .unwrap()
        .starts_with(&app.url("/files/uploads/")));
    assert!(without.get("image_prompts").is_none(), "{without}");
    // A reroll draws the same prompt again, its image prompts included.
    let (status, reroll) = app
        .post(
            "/api/v1/reroll",
            &json!({ "parent_task_id": with["task_id"] }),
        )
        .await;
    assert_eq!(status, 200, "{reroll}");
    let rerolled = app
        .wait_final(reroll["task_id"].as_str().unwrap(), Duration::from_secs(30))
        .await;
    assert_eq!(rerolled["status"], "finished", "{rerolled}");
    assert_eq!(rerolled["image_prompts"], with["image_prompts"]);
    let first = |t: &Value| t["image_urls"][0].as_str().unwrap().to_string();
    let drawn_with = app
        .http
        .get(first(&with))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let drawn_without = app
        .http
        .get(first(&without))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_ne!(
        drawn_with, drawn_without,
        "the image prompt changes the image"
    );
    // `--iw 0` gives the image no weight: the text's images, byte for byte.
    let unweighted = app
        .imagine(json!({ "prompt": format!("{a_url} a lighthouse at dusk --iw 0"), "seed": 7 }))
        .await;
    let unweighted = app.wait_final(&unweighted, Duration::from_secs(30)).await;
    assert_eq!(unweighted["parameters"]["iw"], 0.0, "{unweighted}");
    let drawn_unweighted = app
        .http
        .get(first(&unweighted))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(drawn_unweighted, drawn_without);

    // Another account cannot use this account's upload: 404, nothing revealed.
    let (_, other) = app.account_with("other@example.com", None).await;
    for (path, body) in [
        ("/api/v1/describe", json!({ "image_url": a_url })),
        (
            "/api/v1/imagine",
            json!({ "prompt": format!("{a_url} a fox") }),
        ),
    ] {
        let (status, body) = app.post_as(&other, path, &body).await;
        assert_eq!(status, 404, "{path}: {body}");
        assert_eq!(body["errors"][0]["code"], "upload_not_found");
    }
    app.stop().await;
}

#[tokio::test]
async fn the_daily_limit_counts_uploads_and_data_urls_per_account() {
    let image = png(40, 30);
    let size = image.len() as u64;
    let app = TestApp::spawn_with(|c| c.limits.max_upload_bytes_per_day = 2 * size + 10).await;
    for _ in 0..2 {
        let (status, body) = upload_part(&app, &app.key, "image", image.clone()).await;
        assert_eq!(status, 201, "{body}");
    }
    let res = app
        .http
        .post(app.url("/api/v1/upload"))
        .header("Authorization", &app.key)
        .header("Content-Type", "image/png")
        .body(image.clone())
        .send()
        .await
        .unwrap();
    let retry: u64 = res.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=86_400).contains(&retry), "{retry}");
    let (status, body) = split(res).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["errors"][0]["code"], "quota_exceeded");
    // A data: URL counts the same, and its refused submit stores nothing.
    let (status, body) = app
        .post(
            "/api/v1/describe",
            &json!({ "image_url": data_url("image/png", &image) }),
        )
        .await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(stored_uploads(&app), 2);
    // Another account has its own day.
    let (_, other) = app.account_with("other@example.com", None).await;
    let (status, body) = upload_part(&app, &other, "file", image).await;
    assert_eq!(status, 201, "{body}");
    app.stop().await;
}

#[tokio::test]
async fn uploads_are_removed_after_upload_retention() {
    let app = TestApp::spawn_with(|c| {
        c.retention.upload_retention = Duration::from_secs(1);
        c.retention.sweep_interval = Duration::from_millis(200);
    })
    .await;
    let (status, body) = upload_part(&app, &app.key, "image", png(40, 30)).await;
    assert_eq!(status, 201, "{body}");
    let url = body["url"].as_str().unwrap().to_string();
    assert_eq!(app.http.get(&url).send().await.unwrap().status(), 200);
    let gone = wait_for(Duration::from_secs(10), || async {
        let status = app.http.get(&url).send().await.unwrap().status();
        (status == 404 && stored_uploads(&app) == 0).then_some(())
    })
    .await;
    assert!(gone.is_some(), "the expired upload's file is removed");
    let (status, body) = app
        .post("/api/v1/describe", &json!({ "image_url": url }))
        .await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["errors"][0]["msg"], "image_url: upload not found");
    app.stop().await;
}
