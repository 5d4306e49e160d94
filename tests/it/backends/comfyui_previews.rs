//! The comfyui adapter's previews and progress over its WebSocket, against the shared ComfyUI
//! mock: binary preview frames reach `Progress` (and frames of other kinds do not), over `ws://`
//! and over `wss://` behind a certificate that only `tls_ca_file` makes trusted.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::backend_mocks::comfyui::ComfyMock;
use crate::backend_mocks::{self_signed, Fault};
use easel::domain::{AspectRatio, Operation};
use easel::generate::backends::comfyui::ComfyUi;
use easel::generate::backends::BackendConfig;
use easel::generate::{GenerateError, Generator, Job, Product, Progress};
use easel::images::preview::PreviewImage;

fn config(url: &str, ca_file: Option<&std::path::Path>) -> BackendConfig {
    let workflow = format!(
        "{}/tests/fixtures/comfyui/txt2img.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut config = json!({
        "name": "comfy", "kind": "comfyui", "url": url, "timeout": "20s", "workflow": workflow,
    });
    if let Some(path) = ca_file {
        config["tls_ca_file"] = json!(path);
    }
    serde_json::from_value(config).unwrap()
}

fn imagine() -> Job {
    Job {
        operation: Operation::Imagine,
        prompt: "a red fox in the snow".into(),
        seed: 12345,
        aspect: AspectRatio {
            width: 1,
            height: 1,
        },
        image_size: 64,
        inputs: Vec::new().into(),
        mask: None,
        references: Vec::<easel::images::RgbaImage>::new().into(),
        reservation: None,
        extras: Default::default(),
    }
}

/// Run `job` on `backend`, taking each preview as it arrives; the result and the previews.
async fn run_watching(
    backend: &ComfyUi,
    job: &Job,
) -> (Result<Product, GenerateError>, Vec<Vec<u8>>, i64) {
    let progress = Progress::default();
    let mut seen = Vec::new();
    let run = backend.run(job, &progress);
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
    let percent = progress.get();
    (result, seen, percent)
}

/// Every preview seen is one the mock sent, as it sent it; the last one sent is seen (the
/// frames that are no preview come after it, so they would have replaced it).
fn assert_previews(mock: &ComfyMock, seen: &[Vec<u8>]) {
    let sent = mock.sent_previews.lock().unwrap().clone();
    assert_eq!(
        sent.len(),
        STEPS,
        "one preview per step of the workflow's sampler"
    );
    assert!(!seen.is_empty(), "previews reach Progress");
    for preview in seen {
        assert!(sent.contains(preview), "only the mock's previews");
    }
    assert_eq!(seen.last(), sent.last(), "the junk frames are ignored");
    let last = image::load_from_memory_with_format(seen.last().unwrap(), image::ImageFormat::Jpeg)
        .expect("a JPEG");
    // ComfyUI fits a preview into 512 x 512 (its `--preview-size`), whatever the image's size.
    assert_eq!((last.width(), last.height()), (512, 512));
}

/// The sampler steps of tests/fixtures/comfyui/txt2img.json.
const STEPS: usize = 20;

#[tokio::test]
async fn preview_frames_reach_progress_and_other_frames_do_not() {
    let mock = Arc::new(ComfyMock {
        delay: Duration::from_millis(400),
        junk_frames: true,
        ..ComfyMock::default()
    });
    let url = mock.start().await;
    let backend = ComfyUi::new(&config(&url, None)).unwrap();
    let (result, seen, percent) = run_watching(&backend, &imagine()).await;
    assert!(matches!(result, Ok(Product::Grid { .. })), "{result:?}");
    assert_previews(&mock, &seen);
    assert!(percent >= 95);
}

#[tokio::test]
async fn a_tls_comfyui_gives_progress_and_previews_over_wss_with_its_ca_file() {
    let (pem, tls) = self_signed();
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, pem).unwrap();
    let mock = Arc::new(ComfyMock {
        delay: Duration::from_millis(400),
        junk_frames: true,
        ..ComfyMock::default()
    });
    let url = mock.start_tls(tls).await;
    assert!(url.starts_with("https://"));
    let backend = ComfyUi::new(&config(&url, Some(&ca_file))).unwrap();
    let (result, seen, percent) = run_watching(&backend, &imagine()).await;
    assert!(matches!(result, Ok(Product::Grid { .. })), "{result:?}");
    // The socket was opened (over wss://) and its progress and previews arrived.
    assert_eq!(mock.sockets.lock().unwrap().len(), 1);
    assert_previews(&mock, &seen);
    assert!(percent >= 95);

    // Without the CA file the server's certificate is not trusted: nothing gets through.
    mock.script.set(Fault::Ok);
    let untrusting = ComfyUi::new(&config(&url, None)).unwrap();
    let failed = untrusting.run(&imagine(), &Progress::default()).await;
    let Err(GenerateError::Transient { message, .. }) = failed else {
        panic!("an untrusted certificate is a connection failure, got {failed:?}");
    };
    assert!(message.contains("could not connect"), "{message}");
    assert_eq!(
        mock.sockets.lock().unwrap().len(),
        1,
        "no socket without trust"
    );
}
