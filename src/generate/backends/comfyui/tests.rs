//! Building a ComfyUI backend, and writing a job into its workflows, without a server; its runs
//! against the shared mock of ComfyUI are in tests/it/backends/comfyui_adapter.rs.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};

use super::inputs::{prepare_inputs, KEEP, REDRAW};
use super::*;
use crate::domain::operation::{PanDirection, StoredImage, VariationOf};
use crate::domain::{AspectRatio, Operation};
use crate::generate::backends::edits::size_for;
use crate::generate::backends::BackendKind;
use crate::images::{decode_png, RgbaImage};

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/comfyui/txt2img.json")
}

fn config(url: &str) -> BackendConfig {
    BackendConfig {
        name: "comfy".into(),
        kind: BackendKind::Comfyui,
        url: Some(url.into()),
        concurrency: 1,
        timeout: Duration::from_secs(20),
        api_key_env: None,
        api_key: None,
        model: None,
        username: None,
        password_env: None,
        password: None,
        workflow: Some(fixture()),
        workflows: BTreeMap::new(),
        nodes: BTreeMap::new(),
        operations: None,
        tls_ca_file: None,
        dialect: None,
    }
}

fn job(operation: Operation, inputs: Vec<RgbaImage>) -> Job {
    Job {
        aspect: AspectRatio {
            width: 3,
            height: 2,
        },
        inputs: inputs.into(),
        ..Job::for_tests(operation, "a red fox in the snow", 12345)
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
fn write_workflow(dir: &tempfile::TempDir, name: &str, graph: Value) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, serde_json::to_vec_pretty(&graph).unwrap()).unwrap();
    path
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

/// The graph `workflow` becomes for `job`, with `uploaded` as the names of its files.
fn filled(workflow: &Workflow, job: &Job, count: usize, uploaded: &[String]) -> Value {
    let prepared = prepare_inputs(job).unwrap();
    let mut graph = workflow.graph.clone();
    let mask = prepared.mask.as_ref().map(|_| "mask.png");
    workflow
        .fill(&mut graph, job, count, &prepared, uploaded, mask)
        .unwrap();
    Value::Object(graph)
}

#[test]
fn imagine_writes_the_prompt_seed_size_and_batch_into_the_graph() {
    let wf = Workflow::load(&fixture(), OpKind::Imagine, &BTreeMap::new()).unwrap();
    let job = job(Operation::Imagine, vec![]);
    let graph = filled(&wf, &job, 4, &[]);
    let (w, h) = size_for(&job, 8);
    assert_eq!(graph["6"]["inputs"]["text"], "a red fox in the snow");
    assert_eq!(
        graph["7"]["inputs"]["text"], "bad hands",
        "the negative stays"
    );
    assert_eq!(graph["3"]["inputs"]["seed"], 12345);
    assert_eq!(graph["5"]["inputs"]["width"], w);
    assert_eq!(graph["5"]["inputs"]["height"], h);
    assert_eq!(graph["5"]["inputs"]["batch_size"], 4);
}

#[test]
fn an_image_to_image_grid_repeats_the_encoded_latent_and_loads_the_upload() {
    let graph = img2img().as_object().cloned().unwrap();
    let wf = Workflow::resolve(graph, OpKind::Variations, &BTreeMap::new()).unwrap();
    let op = Operation::Variations {
        of: VariationOf::Index(2),
        source: source(),
    };
    let job = job(op, vec![RgbaImage::new(48, 32)]);
    let graph = filled(&wf, &job, 4, &["up.png".to_string()]);
    assert_eq!(graph["10"]["inputs"]["image"], "up.png");
    let repeat = graph["3"]["inputs"]["latent_image"][0].as_str().unwrap();
    assert_eq!(graph[repeat]["class_type"], "RepeatLatentBatch");
    assert_eq!(graph[repeat]["inputs"]["amount"], 4);
    assert_eq!(graph[repeat]["inputs"]["samples"], json!(["11", 0]));
}

#[test]
fn a_pan_uploads_the_parent_on_a_larger_canvas_with_the_strip_to_draw_masked() {
    let op = Operation::Pan {
        direction: PanDirection::Left,
        source: source(),
    };
    let prepared = prepare_inputs(&job(op, vec![RgbaImage::new(48, 32)])).unwrap();
    assert_eq!(prepared.size, Some((72, 32)));
    let image = decode_png(&prepared.images[0]).unwrap();
    let mask = decode_png(prepared.mask.as_ref().unwrap()).unwrap();
    assert_eq!((image.width, image.height), (72, 32));
    assert_eq!(image.data[3], 0, "the new strip on the left is to be drawn");
    assert_eq!(image.data[71 * 4 + 3], 255, "the parent sits on the right");
    assert_eq!(&mask.data[0..4], &REDRAW);
    assert_eq!(&mask.data[71 * 4..72 * 4], &KEEP);
}

#[test]
fn broken_workflows_are_named_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config("http://127.0.0.1:8188");
    let expect = |config: &BackendConfig, what: &str| {
        let err = ComfyUi::new(config).err().expect("an error");
        assert!(err.starts_with("backends.comfy.workflow"), "{err}");
        assert!(err.contains(what), "{err}");
    };
    config.workflow = Some(dir.path().join("missing.json"));
    expect(&config, "missing.json: cannot read it");
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{ not json").unwrap();
    config.workflow = Some(bad);
    expect(&config, "bad.json: is not valid JSON");
    config.workflow = Some(write_workflow(
        &dir,
        "ui.json",
        json!({ "nodes": [], "links": [] }),
    ));
    expect(&config, "Save (API Format)");
    let mut graph = img2img();
    graph.as_object_mut().unwrap().remove("3");
    config.workflow = Some(write_workflow(&dir, "nosampler.json", graph));
    expect(&config, "has no sampler");
    config.workflow = Some(write_workflow(&dir, "img2img.json", img2img()));
    expect(&config, "no empty latent");

    let mut config = self::config("http://127.0.0.1:8188");
    config.workflows.insert("describe".into(), fixture());
    let err = ComfyUi::new(&config).err().unwrap();
    assert!(
        err.starts_with("backends.comfy.workflows.describe"),
        "{err}"
    );
    let mut config = self::config("http://127.0.0.1:8188");
    config.nodes.insert("prompt".into(), "99".into());
    let err = ComfyUi::new(&config).err().unwrap();
    assert!(err.contains("nodes.prompt names node 99"), "{err}");
    let mut config = self::config("http://127.0.0.1:8188");
    config.workflows.insert("upscale-1x".into(), fixture());
    let err = ComfyUi::new(&config).err().unwrap();
    assert!(
        err.contains("workflows.upscale-1x") && err.contains("no image loader"),
        "{err}"
    );
}

#[test]
fn operations_limit_what_it_supports() {
    let mut config = config("http://127.0.0.1:8188");
    config.operations = Some(vec!["reroll".into()]);
    let backend = ComfyUi::new(&config).unwrap();
    assert!(!backend.supports(OpKind::Imagine));
    assert!(backend.supports(OpKind::Reroll));
    assert_eq!(backend.name(), "comfy");
}

/// Preview frames as a real ComfyUI 0.3.64 sends them (../shared/fixtures: event type 1, image
/// type 1, a JPEG); other event types, unknown image types and short frames are no preview.
#[test]
fn preview_frames_are_read_and_others_ignored() {
    use super::client::preview_frame;
    let frame = |event: u32, image: u32, bytes: &[u8]| {
        let mut f = event.to_be_bytes().to_vec();
        f.extend(image.to_be_bytes());
        f.extend(bytes);
        f
    };
    let jpeg = [0xff, 0xd8, 0xff, 0xe0, 0x00, 0x10];
    assert_eq!(preview_frame(&frame(1, 1, &jpeg)), Some(&jpeg[..]));
    assert_eq!(
        preview_frame(&frame(1, 2, b"\x89PNG")),
        Some(&b"\x89PNG"[..])
    );
    assert_eq!(
        preview_frame(&frame(2, 1, &jpeg)),
        None,
        "unencoded preview"
    );
    assert_eq!(preview_frame(&frame(3, 1, &jpeg)), None, "text event");
    assert_eq!(
        preview_frame(&frame(1, 9, &jpeg)),
        None,
        "unknown image type"
    );
    assert_eq!(preview_frame(&frame(1, 1, &[])), None, "no image");
    assert_eq!(preview_frame(&[0, 0, 0, 1, 0]), None, "short");
    assert_eq!(preview_frame(&[]), None);
}

#[test]
fn a_ca_file_that_is_missing_or_no_pem_stops_the_backend_naming_the_setting() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config("https://comfy.example:8188");
    c.tls_ca_file = Some(dir.path().join("missing.pem"));
    let err = ComfyUi::new(&c).err().expect("refused");
    assert!(
        err.starts_with("backends.comfy.tls_ca_file: ") && err.contains("missing.pem"),
        "{err}"
    );
    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "not a certificate").unwrap();
    c.tls_ca_file = Some(junk);
    let err = ComfyUi::new(&c).err().expect("refused");
    assert!(
        err.starts_with("backends.comfy.tls_ca_file: ") && err.contains("no PEM certificate"),
        "{err}"
    );
}
