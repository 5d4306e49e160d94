//! A backend's files kept as it sent them, less their metadata: through easel's HTTP API, with
//! an OpenAI-protocol mock answering PNGs that carry a workflow in text chunks, or JPEGs that
//! carry Exif with a place. What a caller fetches back has none of it, and is otherwise the
//! backend's file byte for byte.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use super::{openai, WITHIN};
use crate::backend_mocks::{b64, serve};
use crate::common::TestApp;
use easel::images::stored::{jpeg_header_markers, png_chunk_types};
use easel::images::{encode_png, RgbaImage};

/// Four files answered in turn, and how many requests came to each endpoint.
struct Files {
    answers: Vec<Vec<u8>>,
    next: AtomicUsize,
    edits: AtomicUsize,
}

impl Files {
    fn answer(&self, n: usize) -> Json<Value> {
        let data: Vec<Value> = (0..n)
            .map(|_| {
                let k = self.next.fetch_add(1, Ordering::SeqCst) % self.answers.len();
                json!({"b64_json": b64(&self.answers[k])})
            })
            .collect();
        Json(json!({"created": 1_700_000_000, "data": data}))
    }
}

async fn start(answers: Vec<Vec<u8>>) -> (Arc<Files>, String) {
    let files = Arc::new(Files {
        answers,
        next: AtomicUsize::new(0),
        edits: AtomicUsize::new(0),
    });
    let app = Router::new()
        .route("/v1/models", get(|| async { Json(json!({"data": []})) }))
        .route(
            "/v1/images/generations",
            post(
                |State(f): State<Arc<Files>>, Json(body): Json<Value>| async move {
                    f.answer(body["n"].as_u64().unwrap_or(1) as usize)
                },
            ),
        )
        .route(
            "/v1/images/edits",
            post(
                |State(f): State<Arc<Files>>, _body: axum::body::Bytes| async move {
                    f.edits.fetch_add(1, Ordering::SeqCst);
                    f.answer(4)
                },
            ),
        )
        .with_state(files.clone());
    let url = format!("{}/v1", serve(app).await);
    (files, url)
}

/// A 64 x 48 picture with some texture, different for each `k`.
fn picture(k: u8) -> RgbaImage {
    let mut img = RgbaImage::new(64, 48);
    for (i, px) in img.data.chunks_exact_mut(4).enumerate() {
        let (x, y) = ((i % 64) as u8, (i / 64) as u8);
        px[..3].copy_from_slice(&[x.wrapping_mul(4), y.wrapping_mul(5), k.wrapping_mul(60) ^ x]);
    }
    img
}

/// A PNG chunk: length, type, data, CRC.
fn chunk(kind: &[u8; 4], data: &[u8]) -> Vec<u8> {
    let mut out = (data.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let crc = crc32fast::hash(&out[4..]);
    out.extend_from_slice(&crc.to_be_bytes());
    out
}

/// A task's images, fetched over HTTP: the grid and the four, with their URLs.
async fn fetched(app: &TestApp, record: &Value) -> Vec<(String, Vec<u8>)> {
    let mut urls = vec![record["original_image_url"].as_str().unwrap().to_string()];
    for url in record["image_urls"].as_array().unwrap() {
        urls.push(url.as_str().unwrap().to_string());
    }
    let mut files = Vec::new();
    for url in urls {
        let res = app.http.get(&url).send().await.unwrap();
        assert_eq!(res.status(), 200, "{url}");
        let bytes = res.bytes().await.unwrap().to_vec();
        files.push((url, bytes));
    }
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backends_png_is_stored_as_it_came_without_its_text_chunks() {
    let workflow = json!({"3": {"class_type": "KSampler", "inputs": {"seed": 7}}}).to_string();
    let (mut plain, mut sent) = (Vec::new(), Vec::new());
    for k in 0..4 {
        let png = encode_png(&picture(k));
        // After IHDR (8 + 25 bytes): the workflow as ComfyUI writes it, and sd-server's text.
        let mut with = png[..33].to_vec();
        with.extend(chunk(b"tEXt", format!("prompt\0{workflow}").as_bytes()));
        with.extend(chunk(
            b"iTXt",
            format!("workflow\0\0\0\0\0{workflow}").as_bytes(),
        ));
        with.extend_from_slice(&png[33..]);
        assert!(with.windows(8).any(|w| w == b"KSampler"));
        plain.push(png);
        sent.push(with);
    }
    let (_files, url) = start(sent).await;
    let app = TestApp::spawn_with(|c| c.backends = vec![openai("oa", &url, "k", json!({}))]).await;
    let record = app
        .finished("imagine", json!({"prompt": "kept as sent"}), WITHIN)
        .await;
    let files = fetched(&app, &record).await;
    for (url, bytes) in &files {
        assert!(url.ends_with(".png"), "{url}");
        let types = png_chunk_types(bytes).expect("a PNG's chunks");
        for text in [b"tEXt", b"iTXt", b"zTXt"] {
            assert!(!types.contains(text), "{url}: {types:?}");
        }
        assert!(!bytes.windows(8).any(|w| w == b"KSampler"), "{url}");
    }
    // Each of the four is one of the backend's files less the two chunks: the very bytes, and
    // so the very pixels.
    for (url, bytes) in &files[1..] {
        let k = plain.iter().position(|p| p == bytes);
        let k = k.unwrap_or_else(|| panic!("{url} is none of the backend's files, stripped"));
        let decoded = image::load_from_memory(bytes).unwrap().to_rgba8();
        assert_eq!(decoded.as_raw(), &picture(k as u8).data, "{url}");
    }
}

/// A JPEG of `img` as the image crate writes it (SOI, JFIF, tables, frame, scan, EOI).
fn jpeg(img: &RgbaImage) -> Vec<u8> {
    let rgb: Vec<u8> = img
        .data
        .chunks_exact(4)
        .flat_map(|p| [p[0], p[1], p[2]])
        .collect();
    let mut out = Vec::new();
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 92)
        .encode(&rgb, img.width, img.height, image::ExtendedColorType::Rgb8)
        .unwrap();
    out
}

/// An APP1 Exif segment as a phone writes one: IFD0 with the orientation (upright) and a
/// pointer to a GPS IFD holding a latitude reference and a latitude.
fn exif_with_gps() -> Vec<u8> {
    let mut tiff = b"MM\0\x2a\0\0\0\x08".to_vec();
    // IFD0 at 8: two entries (orientation 1, GPS IFD at 38), no next IFD.
    tiff.extend_from_slice(&[0, 2]);
    tiff.extend_from_slice(&[0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, 1, 0, 0]);
    tiff.extend_from_slice(&[0x88, 0x25, 0, 4, 0, 0, 0, 1, 0, 0, 0, 38]);
    tiff.extend_from_slice(&[0, 0, 0, 0]);
    // GPS IFD at 38: GPSLatitudeRef "N", GPSLatitude (three rationals at 68); no next IFD.
    tiff.extend_from_slice(&[0, 2]);
    tiff.extend_from_slice(&[0, 1, 0, 2, 0, 0, 0, 2, b'N', 0, 0, 0]);
    tiff.extend_from_slice(&[0, 2, 0, 5, 0, 0, 0, 3, 0, 0, 0, 68]);
    tiff.extend_from_slice(&[0, 0, 0, 0]);
    for (n, d) in [(48u32, 1u32), (51, 1), (2407, 100)] {
        tiff.extend_from_slice(&n.to_be_bytes());
        tiff.extend_from_slice(&d.to_be_bytes());
    }
    let mut payload = b"Exif\0\0".to_vec();
    payload.extend(tiff);
    let mut segment = vec![0xFF, 0xE1];
    segment.extend_from_slice(&(payload.len() as u16 + 2).to_be_bytes());
    segment.extend(payload);
    segment
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backends_jpeg_is_stored_as_jpeg_without_its_exif_and_a_follow_up_reads_it() {
    let (mut plain, mut sent) = (Vec::new(), Vec::new());
    for k in 0..4 {
        let file = jpeg(&picture(k));
        let mut with = file[..2].to_vec();
        with.extend(exif_with_gps());
        with.extend_from_slice(&file[2..]);
        plain.push(file);
        sent.push(with);
    }
    let decoded = |bytes: &[u8]| image::load_from_memory(bytes).unwrap().to_rgba8();
    let (files, url) = start(sent.clone()).await;
    let app = TestApp::spawn_with(|c| c.backends = vec![openai("oa", &url, "k", json!({}))]).await;
    let record = app
        .finished("imagine", json!({"prompt": "kept as sent"}), WITHIN)
        .await;
    let stored = fetched(&app, &record).await;
    for (url, bytes) in &stored {
        assert!(
            url.ends_with(".jpg"),
            "a grid of JPEGs is a JPEG too: {url}"
        );
        assert!(bytes.starts_with(&[0xFF, 0xD8]), "{url}");
        let markers: Vec<u8> = jpeg_header_markers(bytes).iter().map(|m| m.0).collect();
        assert!(!markers.contains(&0xE1), "{url}: {markers:X?}");
        assert!(!bytes.windows(4).any(|w| w == b"Exif"), "{url}");
    }
    for (url, bytes) in &stored[1..] {
        let k = plain.iter().position(|p| p == bytes);
        let k = k.unwrap_or_else(|| panic!("{url} is none of the backend's files, stripped"));
        assert_eq!(decoded(bytes), decoded(&sent[k]), "{url}: the same pixels");
    }
    // A follow-up reads its parent, a JPEG, back from storage.
    let variation = app
        .finished(
            "variations",
            json!({"parent_task_id": record["task_id"], "index": 2}),
            WITHIN,
        )
        .await;
    assert_eq!(files.edits.load(Ordering::SeqCst), 1, "{variation}");
    assert!(variation["image_urls"][0]
        .as_str()
        .unwrap()
        .ends_with(".jpg"));
}

/// Where the test app's local store keeps the file of one of its image URLs.
fn stored_path(app: &TestApp, url: &str, base: &str) -> std::path::PathBuf {
    let key = url.strip_prefix(base).unwrap_or_else(|| panic!("{url}"));
    app.dir
        .path()
        .join("files")
        .join(key.trim_start_matches('/'))
}

/// The mean of each channel over a `w` x `h` rectangle at (`x`, `y`).
fn mean(img: &image::RgbaImage, (x, y, w, h): (u32, u32, u32, u32)) -> [f64; 3] {
    let mut sum = [0f64; 3];
    for py in y..y + h {
        for px in x..x + w {
            let p = img.get_pixel(px, py);
            for c in 0..3 {
                sum[c] += f64::from(p[c]);
            }
        }
    }
    sum.map(|s| s / f64::from(w * h))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backends_grid_follows_its_task_and_is_made_when_asked_for_before_it_is_there() {
    let sent: Vec<Vec<u8>> = (0..4).map(|k| jpeg(&picture(k))).collect();
    let decoded = |bytes: &[u8]| image::load_from_memory(bytes).unwrap().to_rgba8();
    let (_files, url) = start(sent.clone()).await;
    let token = "metrics-token-for-the-grid-test";
    let app = TestApp::spawn_with(|c| {
        c.backends = vec![openai("oa", &url, "k", json!({}))];
        c.server.metrics_token = Some(token.into());
    })
    .await;
    let record = app
        .finished("imagine", json!({"prompt": "a grid that follows"}), WITHIN)
        .await;
    let grid_url = record["original_image_url"].as_str().unwrap();
    assert!(grid_url.ends_with("/grid.jpg"), "{grid_url}");
    let files_base = format!("{}/files", app.base);
    let path = stored_path(&app, grid_url, &files_base);

    // The worker stores it once the task is recorded.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !path.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the grid was never stored"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let made = std::fs::read(&path).unwrap();
    let grid = decoded(&made);
    assert_eq!(grid.dimensions(), (64, 48));
    // Each quarter is its image, halved: the same colour on average, give or take what two
    // JPEG encodings lose.
    for (k, quarter) in [(0, 0), (32, 0), (0, 24), (32, 24)].into_iter().enumerate() {
        let (q, whole) = (
            mean(&grid, (quarter.0, quarter.1, 32, 24)),
            mean(&decoded(&sent[k]), (0, 0, 64, 48)),
        );
        for c in 0..3 {
            assert!(
                (q[c] - whole[c]).abs() < 6.0,
                "quarter {k}: {q:?} against {whole:?}"
            );
        }
    }

    // Asked for when it is not there (a node stopped between the task and its grid): made from
    // the four files, the same bytes, and stored again.
    std::fs::remove_file(&path).unwrap();
    let res = app.http.get(grid_url).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "image/jpeg");
    assert_eq!(res.bytes().await.unwrap().to_vec(), made);
    assert_eq!(std::fs::read(&path).unwrap(), made);
    // Counted for the operators (other tests in this process may add to it, never take away).
    let on_request = app
        .metric(token, "easel_grids_total{outcome=\"on_request\"}")
        .await;
    assert!(on_request >= 1.0, "{on_request}");
    let after = app
        .metric(token, "easel_grids_total{outcome=\"after_task\"}")
        .await;
    assert!(after >= 1.0, "{after}");

    // No grid where there are no four images of it: a PNG grid of JPEGs, another folder.
    let png_grid = grid_url.replace("/grid.jpg", "/grid.png");
    let (folder, _) = grid_url.rsplit_once('/').unwrap();
    let (task, _) = folder.rsplit_once('/').unwrap();
    let elsewhere = format!("{task}/{}/grid.jpg", "0".repeat(32));
    for missing in [png_grid, elsewhere] {
        let res = app.http.get(&missing).send().await.unwrap();
        assert_eq!(res.status(), 404, "{missing}");
    }
    assert!(!stored_path(
        &app,
        &grid_url.replace("/grid.jpg", "/grid.png"),
        &files_base
    )
    .exists());
}

/// `png` with its image data garbled and its chunks' CRCs still right: a file whose structure
/// parses and whose pixels do not decode.
fn with_garbled_pixels(png: &[u8]) -> Vec<u8> {
    let mut out = png[..8].to_vec();
    let mut at = 8;
    while at < png.len() {
        let len = u32::from_be_bytes(png[at..at + 4].try_into().unwrap()) as usize;
        let kind: [u8; 4] = png[at + 4..at + 8].try_into().unwrap();
        let mut data = png[at + 8..at + 8 + len].to_vec();
        if &kind == b"IDAT" {
            // Past zlib's two-byte header: deflate blocks of a reserved type.
            for b in &mut data[2..] {
                *b = 0xFF;
            }
        }
        out.extend(chunk(&kind, &data));
        at += 12 + len;
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_blobs_public_url_the_grid_is_stored_before_the_task_and_a_bad_file_fails_it() {
    let good: Vec<Vec<u8>> = (0..4).map(|k| encode_png(&picture(k))).collect();
    let cdn = "https://cdn.example.com/easel";
    let (_files, url) = start(good).await;
    let app = TestApp::spawn_with(|c| {
        c.backends = vec![openai("oa", &url, "k", json!({}))];
        c.blobs.public_url = Some(cdn.into());
    })
    .await;
    let record = app
        .finished("imagine", json!({"prompt": "a grid first"}), WITHIN)
        .await;
    // Nothing of easel's answers the CDN's misses: the grid is there when the task is.
    let grid_url = record["original_image_url"].as_str().unwrap();
    assert!(grid_url.ends_with("/grid.png"), "{grid_url}");
    assert!(stored_path(&app, grid_url, cdn).exists(), "{grid_url}");

    let mut sent: Vec<Vec<u8>> = (0..4).map(|k| encode_png(&picture(k))).collect();
    sent[1] = with_garbled_pixels(&sent[1]);
    assert!(png_chunk_types(&sent[1]).is_some());
    assert!(image::load_from_memory(&sent[1]).is_err());
    let (_files, url) = start(sent).await;
    let app = TestApp::spawn_with(|c| {
        c.backends = vec![openai("oa", &url, "k", json!({}))];
        c.blobs.public_url = Some(cdn.into());
    })
    .await;
    let (status, answer) = app
        .post("/api/v1/imagine", &json!({"prompt": "a bad file"}))
        .await;
    assert_eq!(status, 200, "{answer}");
    let record = app
        .wait_final(
            answer["task_id"].as_str().unwrap(),
            std::time::Duration::from_secs(60),
        )
        .await;
    assert_eq!(record["status"], "failed", "{record}");
    let error = record["error"].as_str().unwrap();
    assert!(
        error.starts_with("generation failed: the backend's image 2 does not decode"),
        "{error}"
    );
}
