//! The comfyui adapter on its own (no easel server around it) against the shared ComfyUI mock:
//! what it writes into the graph and uploads for each operation, and how it sorts the
//! backend's failures.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::backend_mocks::comfyui::ComfyMock;
use crate::backend_mocks::Fault;
use easel::domain::operation::{ImageInput, PanDirection, StoredImage, VariationOf};
use easel::domain::{AspectRatio, OpKind, Operation, Settings};
use easel::generate::backends::comfyui::ComfyUi;
use easel::generate::backends::edits::size_for;
use easel::generate::backends::BackendConfig;
use easel::generate::{GenerateError, Generator, Job, Product, Progress};
use easel::images::{decode_png, RgbaImage};

fn fixture() -> String {
    format!(
        "{}/tests/fixtures/comfyui/txt2img.json",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn config(url: &str) -> BackendConfig {
    serde_json::from_value(json!({
        "name": "comfy", "kind": "comfyui", "url": url, "timeout": "20s",
        "workflow": fixture(),
    }))
    .unwrap()
}

/// The mock, started; its base URL.
async fn serve(mock: ComfyMock) -> (Arc<ComfyMock>, String) {
    let mock = Arc::new(mock);
    let url = mock.start().await;
    (mock, url)
}

/// A mock whose every job meets `fault`.
async fn serve_with(fault: Fault) -> (Arc<ComfyMock>, String) {
    let (mock, url) = serve(ComfyMock::default()).await;
    mock.script.set(fault);
    (mock, url)
}

fn backend(config: &BackendConfig) -> ComfyUi {
    ComfyUi::new(config).unwrap()
}

fn job(operation: Operation, inputs: Vec<RgbaImage>) -> Job {
    Job {
        operation,
        prompt: "a red fox in the snow".into(),
        seed: 12345,
        aspect: AspectRatio {
            width: 3,
            height: 2,
        },
        image_size: 64,
        inputs: inputs.into(),
        mask: None,
        references: Vec::<easel::images::RgbaImage>::new().into(),
        reservation: None,
        extras: Default::default(),
    }
}

fn source() -> StoredImage {
    StoredImage {
        key: "k".into(),
        width: 48,
        height: 32,
    }
}

/// A workflow file in a temporary folder.
fn write_workflow(dir: &tempfile::TempDir, name: &str, graph: Value) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, serde_json::to_vec_pretty(&graph).unwrap()).unwrap();
    path.display().to_string()
}

/// An image-to-image graph: LoadImage -> VAEEncode -> KSampler (denoise 0.6) -> SaveImage.
fn img2img() -> Value {
    let mut graph: Value = serde_json::from_slice(&std::fs::read(fixture()).unwrap()).unwrap();
    graph["10"] = json!({ "class_type": "LoadImage", "inputs": { "image": "example.png" } });
    graph["11"] =
        json!({ "class_type": "VAEEncode", "inputs": { "pixels": ["10", 0], "vae": ["4", 2] } });
    graph["3"]["inputs"]["latent_image"] = json!(["11", 0]);
    graph["3"]["inputs"]["denoise"] = json!(0.6);
    graph.as_object_mut().unwrap().remove("5");
    graph
}

fn with_workflow(config: &mut BackendConfig, op: &str, path: String) {
    config.workflows.insert(op.into(), path.into());
}

#[tokio::test]
async fn imagine_fills_the_graph_and_makes_a_grid() {
    let (mock, url) = serve(ComfyMock::default()).await;
    let backend = backend(&config(&url));
    let progress = Progress::default();
    let job = job(Operation::Imagine, vec![]);
    let product = backend.run(&job, &progress).await.unwrap();
    let (w, h) = size_for(&job, 8);
    assert_eq!((w % 8, h % 8), (0, 0));
    match product {
        Product::Grid {
            images,
            width,
            height,
            ..
        } => {
            assert_eq!((width, height), (w, h));
            for stored in &images {
                let image = decode_png(&stored.bytes).unwrap();
                assert_eq!((image.width, image.height), (w, h));
            }
        }
        other => panic!("expected a grid, got {other:?}"),
    }
    assert!(progress.get() >= 95);
    let body = mock.prompts.lock().unwrap()[0].clone();
    assert!(body["client_id"].as_str().is_some_and(|c| !c.is_empty()));
    let graph = &body["prompt"];
    assert_eq!(graph["6"]["inputs"]["text"], "a red fox in the snow");
    assert_eq!(
        graph["7"]["inputs"]["text"], "bad hands",
        "the negative stays"
    );
    assert_eq!(graph["3"]["inputs"]["seed"], 12345);
    assert_eq!(graph["5"]["inputs"]["width"], w);
    assert_eq!(graph["5"]["inputs"]["height"], h);
    assert_eq!(graph["5"]["inputs"]["batch_size"], 4);
    assert!(mock.uploads.lock().unwrap().is_empty());
    assert!(mock.deletes.lock().unwrap().is_empty());
    assert!(mock.interrupts.lock().unwrap().is_empty());
}

/// Image prompts on the text-to-image workflow: the image (at the new image's size) is
/// uploaded, loaded and encoded into the sampler's latent for the four, denoised from `--iw`.
#[tokio::test]
async fn image_prompts_start_the_imagine_graph_from_the_encoded_image() {
    let (mock, url) = serve(ComfyMock::default()).await;
    let backend = backend(&config(&url));
    let mut job = job(Operation::Imagine, vec![RgbaImage::new(30, 20)]);
    job.extras.parameters.iw = Some(3.0);
    let product = backend.run(&job, &Progress::default()).await.unwrap();
    let (w, h) = size_for(&job, 8);
    assert!(matches!(product, Product::Grid { width, height, .. } if (width, height) == (w, h)));
    let uploads = mock.uploads.lock().unwrap().clone();
    assert_eq!(uploads.len(), 1);
    assert_eq!((uploads[0].1.width, uploads[0].1.height), (w, h));
    let graph = mock.prompts.lock().unwrap()[0]["prompt"].clone();
    let (repeat, _) = graph["3"]["inputs"]["latent_image"][0]
        .as_str()
        .map(|id| (id.to_string(), ()))
        .unwrap();
    assert_eq!(graph[&repeat]["class_type"], "RepeatLatentBatch");
    assert_eq!(graph[&repeat]["inputs"]["amount"], 4);
    let encode = graph[&repeat]["inputs"]["samples"][0].as_str().unwrap();
    assert_eq!(graph[encode]["class_type"], "VAEEncode");
    assert_eq!(graph[encode]["inputs"]["vae"], json!(["4", 2]));
    let load = graph[encode]["inputs"]["pixels"][0].as_str().unwrap();
    assert_eq!(graph[load]["class_type"], "LoadImage");
    assert_eq!(
        graph[load]["inputs"]["image"].as_str(),
        Some(uploads[0].0.as_str())
    );
    assert!((graph["3"]["inputs"]["denoise"].as_f64().unwrap() - 0.4).abs() < 1e-9);
}

#[tokio::test]
async fn the_tasks_settings_go_into_the_sampler_negative_and_checkpoint_nodes() {
    let (mock, url) = serve(ComfyMock::default()).await;
    let checkpoints = [("dream".to_string(), "dreamshaper_8.safetensors".to_string())].into();
    let backend = backend(&config(&url)).with_checkpoints(checkpoints);
    let mut job = job(Operation::Imagine, vec![]);
    job.extras.settings = Settings {
        model: Some("dream".into()),
        negative_prompt: Some("trees, fog".into()),
        steps: Some(14),
        cfg_scale: Some(4.5),
        sampler: Some("dpmpp_2m_karras".into()),
    };
    backend.run(&job, &Progress::default()).await.unwrap();
    let graph = mock.prompts.lock().unwrap()[0]["prompt"].clone();
    let sampler = &graph["3"]["inputs"];
    assert_eq!(sampler["steps"], 14);
    assert_eq!(sampler["cfg"], 4.5);
    assert_eq!(sampler["sampler_name"], "dpmpp_2m");
    assert_eq!(sampler["scheduler"], "karras");
    assert_eq!(graph["7"]["inputs"]["text"], "trees, fog");
    assert_eq!(graph["6"]["inputs"]["text"], "a red fox in the snow");
    assert_eq!(
        graph["4"]["inputs"]["ckpt_name"],
        "dreamshaper_8.safetensors"
    );
    // A model without a checkpoint of its own keeps the workflow's.
    job.extras.settings.model = Some("other".into());
    backend.run(&job, &Progress::default()).await.unwrap();
    let graph = mock.prompts.lock().unwrap()[1]["prompt"].clone();
    assert_eq!(
        graph["4"]["inputs"]["ckpt_name"],
        "v1-5-pruned-emaonly.safetensors"
    );
}

#[tokio::test]
async fn reroll_runs_imagines_workflow() {
    let (mock, url) = serve(ComfyMock::default()).await;
    let backend = backend(&config(&url));
    assert!(backend.supports(OpKind::Reroll));
    assert!(!backend.supports(OpKind::Variations), "no workflow for it");
    let product = backend
        .run(&job(Operation::Reroll, vec![]), &Progress::default())
        .await
        .unwrap();
    assert!(matches!(product, Product::Grid { .. }));
    assert_eq!(mock.prompts.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn variations_upload_the_parent_and_repeat_its_latent() {
    let (mock, url) = serve(ComfyMock::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(&url);
    with_workflow(
        &mut config,
        "variations",
        write_workflow(&dir, "var.json", img2img()),
    );
    let backend = backend(&config);
    assert!(backend.supports(OpKind::Variations));
    let parent = RgbaImage::new(48, 32);
    let op = Operation::Variations {
        of: VariationOf::Index(2),
        source: source(),
    };
    let product = backend
        .run(&job(op, vec![parent]), &Progress::default())
        .await
        .unwrap();
    match product {
        Product::Grid { width, height, .. } => assert_eq!((width, height), (48, 32)),
        other => panic!("expected a grid, got {other:?}"),
    }
    let uploads = mock.uploads.lock().unwrap().clone();
    assert_eq!(uploads.len(), 1);
    let fields = mock.upload_fields.lock().unwrap()[0].clone();
    assert_eq!(fields["overwrite"], "true");
    assert_eq!(fields["type"], "input");
    let (filename, sent) = &uploads[0];
    assert_eq!((sent.width, sent.height), (48, 32));
    let graph = mock.prompts.lock().unwrap()[0]["prompt"].clone();
    assert_eq!(graph["10"]["inputs"]["image"], filename.as_str());
    // The sampler now reads a RepeatLatentBatch of four over the encoded image.
    let repeat = graph["3"]["inputs"]["latent_image"][0].as_str().unwrap();
    assert_eq!(graph[repeat]["class_type"], "RepeatLatentBatch");
    assert_eq!(graph[repeat]["inputs"]["amount"], 4);
    assert_eq!(graph[repeat]["inputs"]["samples"], json!(["11", 0]));
    assert_eq!(graph["6"]["inputs"]["text"], "a red fox in the snow");
}

#[tokio::test]
async fn inpaint_sends_the_masked_area_transparent_and_a_mask() {
    let (mock, url) = serve(ComfyMock::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let mut graph = img2img();
    graph["12"] = json!({ "class_type": "LoadImageMask", "inputs": { "image": "mask.png", "channel": "red" } });
    let mut config = config(&url);
    with_workflow(
        &mut config,
        "inpaint",
        write_workflow(&dir, "inpaint.json", graph),
    );
    let backend = backend(&config);
    let parent = RgbaImage::new(48, 32);
    // The left half is redrawn.
    let mut mask = RgbaImage::new(48, 32);
    for (i, px) in mask.data.chunks_exact_mut(4).enumerate() {
        if i % 48 < 24 {
            px.copy_from_slice(&[255, 255, 255, 255]);
        }
    }
    let mut job = job(
        Operation::Inpaint {
            source: source(),
            mask: String::new(),
        },
        vec![parent],
    );
    job.mask = Some(mask.into());
    backend.run(&job, &Progress::default()).await.unwrap();
    let uploads = mock.uploads.lock().unwrap().clone();
    assert_eq!(uploads.len(), 2);
    let (image_name, image) = &uploads[0];
    let (mask_name, mask) = &uploads[1];
    assert_eq!(image.data[3], 0, "a redrawn pixel is transparent");
    assert_eq!(image.data[47 * 4 + 3], 255, "a kept pixel is opaque");
    // White and transparent where the model draws, opaque black where it keeps.
    assert_eq!(&mask.data[0..4], &[255, 255, 255, 0]);
    assert_eq!(&mask.data[47 * 4..48 * 4], &[0, 0, 0, 255]);
    let graph = mock.prompts.lock().unwrap()[0]["prompt"].clone();
    assert_eq!(graph["10"]["inputs"]["image"], image_name.as_str());
    assert_eq!(graph["12"]["inputs"]["image"], mask_name.as_str());
}

#[tokio::test]
async fn pan_sends_a_larger_canvas() {
    let (mock, url) = serve(ComfyMock::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(&url);
    with_workflow(
        &mut config,
        "pan",
        write_workflow(&dir, "pan.json", img2img()),
    );
    let backend = backend(&config);
    let op = Operation::Pan {
        direction: PanDirection::Left,
        source: source(),
    };
    let product = backend
        .run(&job(op, vec![RgbaImage::new(48, 32)]), &Progress::default())
        .await
        .unwrap();
    let sent = mock.uploads.lock().unwrap()[0].1.clone();
    assert_eq!((sent.width, sent.height), (72, 32));
    assert_eq!(sent.data[3], 0, "the new strip on the left is to be drawn");
    assert_eq!(sent.data[71 * 4 + 3], 255, "the parent sits on the right");
    assert!(matches!(
        product,
        Product::Grid {
            width: 72,
            height: 32,
            ..
        }
    ));
}

#[tokio::test]
async fn upscale_without_a_sampler_sets_the_factor() {
    let (mock, url) = serve(ComfyMock::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let graph = json!({
        "1": { "class_type": "LoadImage", "inputs": { "image": "in.png" } },
        "2": { "class_type": "ImageScaleBy", "inputs": { "image": ["1", 0], "upscale_method": "lanczos", "scale_by": 1.5 } },
        "9": { "class_type": "SaveImage", "inputs": { "images": ["2", 0], "filename_prefix": "up" } }
    });
    let mut config = config(&url);
    with_workflow(
        &mut config,
        "upscale-highres",
        write_workflow(&dir, "up.json", graph),
    );
    let backend = backend(&config);
    let op = Operation::UpscaleHighres {
        factor: 2,
        index: Some(1),
        image_url: None,
        source: ImageInput::Stored(source()),
    };
    let product = backend
        .run(&job(op, vec![RgbaImage::new(48, 32)]), &Progress::default())
        .await
        .unwrap();
    assert!(matches!(
        product,
        Product::Single {
            width: 96,
            height: 64,
            ..
        }
    ));
    assert_eq!(
        mock.prompts.lock().unwrap()[0]["prompt"]["2"]["inputs"]["scale_by"],
        2.0
    );
}

#[tokio::test]
async fn a_hung_job_is_cancelled_on_the_backend_past_the_timeout() {
    // Without the socket, the job is only polled: seen running, and no finer progress.
    let (mock, url) = serve(ComfyMock {
        socket: false,
        ..ComfyMock::default()
    })
    .await;
    mock.script.set(Fault::Hang);
    let mut config = config(&url);
    config.timeout = Duration::from_millis(400);
    let backend = backend(&config);
    let progress = Progress::default();
    let err = backend
        .run(&job(Operation::Imagine, vec![]), &progress)
        .await
        .unwrap_err();
    match &err {
        GenerateError::Transient { message, .. } => {
            assert!(message.contains("timed out after"), "{message}")
        }
        other => panic!("expected transient, got {other:?}"),
    }
    assert_eq!(progress.get(), 15, "seen running");
    let id = mock.prompts.lock().unwrap()[0]["prompt_id"].clone();
    assert_eq!(
        *mock.deletes.lock().unwrap(),
        vec![id.as_str().unwrap().to_string()]
    );
    assert_eq!(
        *mock.interrupts.lock().unwrap(),
        vec![json!({ "prompt_id": id })]
    );
}

#[tokio::test]
async fn statuses_are_sorted() {
    for (code, transient) in [(429, true), (503, true), (500, true), (403, false)] {
        let (_, url) = serve_with(Fault::Status {
            code,
            retry_after: Some(7),
            body: "busy".into(),
        })
        .await;
        let err = backend(&config(&url))
            .run(&job(Operation::Imagine, vec![]), &Progress::default())
            .await
            .unwrap_err();
        match err {
            GenerateError::Transient { retry_after, .. } if transient => {
                assert_eq!(retry_after, Some(Duration::from_secs(7)), "{code}")
            }
            GenerateError::Failed(m) if !transient => assert!(m.contains("403"), "{m}"),
            other => panic!("{code}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_rejected_workflow_fails_with_the_node_errors() {
    let (_, url) = serve_with(Fault::Refuse("Value not in list")).await;
    let err = backend(&config(&url))
        .run(&job(Operation::Imagine, vec![]), &Progress::default())
        .await
        .unwrap_err();
    let GenerateError::Failed(message) = err else {
        panic!("{err:?}")
    };
    assert!(
        message.contains("Prompt outputs failed validation"),
        "{message}"
    );
    assert!(
        message.contains("node 4 (CheckpointLoaderSimple): Value not in list"),
        "{message}"
    );
}

#[tokio::test]
async fn unusable_answers_fail() {
    for (fault, expect) in [
        (Fault::BadJson, "not JSON"),
        (Fault::NotImage, "image 1 from the backend"),
        (Fault::Count(3), "made 3 images; imagine needs 4"),
        (Fault::Count(0), "made 0 images"),
        (
            Fault::ExecError("RuntimeError"),
            "node 3 (KSampler): RuntimeError it broke",
        ),
    ] {
        let (_, url) = serve_with(fault).await;
        let err = backend(&config(&url))
            .run(&job(Operation::Imagine, vec![]), &Progress::default())
            .await
            .unwrap_err();
        match err {
            GenerateError::Failed(m) => assert!(m.contains(expect), "{m}"),
            other => panic!("{expect}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn an_unreadable_submit_answer_takes_the_proposed_job_off_the_queue() {
    let (mock, url) = serve_with(Fault::BadJson).await;
    backend(&config(&url))
        .run(&job(Operation::Imagine, vec![]), &Progress::default())
        .await
        .unwrap_err();
    let deletes = mock.deletes.lock().unwrap().clone();
    assert_eq!(deletes.len(), 1);
    assert_eq!(deletes[0].len(), 36, "the proposed id: {deletes:?}");
}

#[tokio::test]
async fn running_out_of_gpu_memory_is_transient() {
    let (_, url) = serve_with(Fault::ExecError("torch.OutOfMemoryError")).await;
    let err = backend(&config(&url))
        .run(&job(Operation::Imagine, vec![]), &Progress::default())
        .await
        .unwrap_err();
    assert!(matches!(err, GenerateError::Transient { .. }), "{err:?}");
}

#[tokio::test]
async fn refused_and_dropped_connections_are_transient() {
    // Nothing listens: refused.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let refused = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let backend_refused = backend(&config(&refused));
    let err = backend_refused
        .run(&job(Operation::Imagine, vec![]), &Progress::default())
        .await
        .unwrap_err();
    assert!(matches!(err, GenerateError::Transient { .. }), "{err:?}");
    assert!(backend_refused.probe().await.is_err());

    // A server that accepts and hangs up at once.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dropped = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            drop(socket);
        }
    });
    let err = backend(&config(&dropped))
        .run(&job(Operation::Imagine, vec![]), &Progress::default())
        .await
        .unwrap_err();
    assert!(matches!(err, GenerateError::Transient { .. }), "{err:?}");
}

#[tokio::test]
async fn probe_asks_for_system_stats() {
    let (_, url) = serve(ComfyMock::default()).await;
    assert_eq!(backend(&config(&url)).probe().await, Ok(()));
}
