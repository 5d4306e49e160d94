//! The command-line client (the real `easel` binary) against a server of the suite, on either
//! store (EASEL_TEST_STORE=postgres): a command for every operation, each with `--metadata` and
//! `--wait --output`; `imagine --repeat`; `easel batch FILE.jsonl`.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};

use crate::common::{self, TestApp};
use crate::fairness::queue_only;
use easel::images::{encode_png, RgbaImage};

/// Run `easel ARGS` against `app` with its key: whether it succeeded, its stdout and stderr.
async fn easel(app: &TestApp, args: Vec<String>) -> (bool, String, String) {
    let dir = app.dir.path().to_path_buf();
    let env = [
        ("EASEL_API_KEY", app.key.clone()),
        ("EASEL_URL", app.base.clone()),
    ];
    tokio::task::spawn_blocking(move || {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let out = common::binary::command(&dir, &env)
            .args(&args)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    })
    .await
    .unwrap()
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// `easel OP ... --wait --json --output DIR --metadata {"op": OP}`: the finished record, and
/// the files it saved.
async fn made(app: &TestApp, op_args: &[&str], out: &Path) -> (Value, Vec<PathBuf>) {
    let op = op_args[0];
    let mut all = args(op_args);
    all.extend(args(&["--wait", "--json", "--timeout", "60s", "--output"]));
    all.push(out.join(op).display().to_string());
    all.push("--metadata".into());
    all.push(json!({ "op": op }).to_string());
    let (ok, stdout, stderr) = easel(app, all).await;
    assert!(ok, "easel {op_args:?}: {stderr}");
    let record: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("easel {op_args:?}: {e}: {stdout}"));
    assert_eq!(record["status"], "finished", "{record}");
    assert_eq!(record["metadata"], json!({ "op": op }), "{record}");
    let files = std::fs::read_dir(out.join(op))
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    (record, files)
}

fn id(record: &Value) -> String {
    record["task_id"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_has_a_command_that_waits_and_downloads() {
    let app = TestApp::spawn_with(|c| c.worker.workers = 2).await;
    let out = tempfile::tempdir().unwrap();
    let (grid, files) = made(
        &app,
        &["imagine", "a harbour at dawn", "--ar", "1:1"],
        out.path(),
    )
    .await;
    assert_eq!(files.len(), 5, "the grid and its four images: {files:?}");
    let (up, files) = made(&app, &["upscale", &id(&grid), "1"], out.path()).await;
    assert_eq!(up["task_type"], "upscale-1x");
    assert_eq!(files.len(), 1, "{files:?}");
    for (op_args, task_type) in [
        (vec!["variations", &id(&grid), "2"], "variations"),
        (
            vec!["reroll", &id(&grid), "--prompt", "a harbour at dusk"],
            "reroll",
        ),
        (vec!["pan", &id(&up), "left"], "pan"),
        (vec!["zoom", &id(&up), "1.5"], "outpaint"),
    ] {
        let (record, files) = made(&app, &op_args, out.path()).await;
        assert_eq!(record["task_type"], task_type, "{record}");
        assert!(!files.is_empty(), "{op_args:?} saved its images");
    }
    // inpaint --mask FILE: a PNG the size of the parent's image.
    let parent = app.image(&up["image_url"]).await;
    let mut mask = RgbaImage::new(parent.width, parent.height);
    for px in mask.data.chunks_mut(4).take((parent.width * 8) as usize) {
        px.copy_from_slice(&[255, 255, 255, 255]);
    }
    let mask_file = out.path().join("mask.png");
    std::fs::write(&mask_file, encode_png(&mask)).unwrap();
    let (inpaint, _) = made(
        &app,
        &["inpaint", &id(&up), "--mask", mask_file.to_str().unwrap()],
        out.path(),
    )
    .await;
    assert_eq!(inpaint["task_type"], "inpaint");
    // blend and describe take files (sent as data: URLs) or URLs.
    let (one, two) = (
        out.path()
            .join("imagine")
            .join(format!("{}-1.png", id(&grid))),
        out.path()
            .join("imagine")
            .join(format!("{}-2.png", id(&grid))),
    );
    let url = up["image_url"].as_str().unwrap();
    let (blend, files) = made(
        &app,
        &["blend", one.to_str().unwrap(), two.to_str().unwrap(), url],
        out.path(),
    )
    .await;
    assert_eq!(blend["task_type"], "blend");
    assert_eq!(files.len(), 5, "{files:?}");
    let (describe, _) = made(&app, &["describe", one.to_str().unwrap()], out.path()).await;
    assert_eq!(describe["task_type"], "describe");
    assert_eq!(
        describe["content"].as_array().unwrap().len(),
        4,
        "{describe}"
    );

    // A refusal says what the API said; a file that is not an image is refused before sending.
    let (ok, _, stderr) = easel(&app, args(&["pan", &id(&up), "sideways"])).await;
    assert!(!ok && stderr.contains("direction"), "{stderr}");
    let (ok, _, stderr) = easel(
        &app,
        args(&[
            "describe",
            mask_file
                .parent()
                .unwrap()
                .join("none.png")
                .to_str()
                .unwrap(),
        ]),
    )
    .await;
    assert!(!ok && stderr.contains("cannot read"), "{stderr}");
    let (ok, _, stderr) = easel(&app, args(&["imagine", "x", "--metadata", "[1]"])).await;
    assert!(
        !ok && stderr.contains("--metadata must be a JSON object"),
        "{stderr}"
    );
}

#[tokio::test]
async fn imagine_repeat_and_batch_files_make_several_tasks() {
    let app = queue_only(|c| c.plans.default_mut().batch_max = 4).await;
    let before = app.stored_tasks().await;
    let (ok, stdout, stderr) = easel(
        &app,
        args(&[
            "imagine",
            "a {red, blue} kite",
            "--repeat",
            "2",
            "--metadata",
            "{\"n\": 1}",
        ]),
    )
    .await;
    assert!(ok, "{stderr}");
    let ids: Vec<&str> = stdout.lines().collect();
    assert_eq!(ids.len(), 4, "{stdout}");
    let mut prompts = Vec::new();
    for id in &ids {
        let record = app.fetch(id).await;
        assert_eq!(record["metadata"], json!({"n": 1}));
        prompts.push(record["prompt"].as_str().unwrap().to_string());
    }
    assert_eq!(
        prompts,
        ["a red kite", "a red kite", "a blue kite", "a blue kite"]
    );

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("requests.jsonl");
    let lines = [
        json!({"operation": "imagine", "body": {"prompt": "a sail"}}).to_string(),
        String::new(),
        json!({"operation": "shorten", "body": {"prompt": "a sail on a very long sea"}})
            .to_string(),
    ];
    std::fs::write(&file, lines.join("\n")).unwrap();
    let (ok, stdout, stderr) = easel(&app, args(&["batch", file.to_str().unwrap()])).await;
    assert!(ok, "{stderr}");
    let batch: Vec<&str> = stdout.lines().collect();
    assert_eq!(batch.len(), 2, "{stdout}");
    assert_eq!(app.fetch(batch[0]).await["prompt"], "a sail");
    assert_eq!(app.fetch(batch[1]).await["task_type"], "shorten");
    assert_eq!(app.stored_tasks().await, before + 6);

    // A bad request stores none of the file's; the error names it.
    let bad = [
        json!({"operation": "imagine", "body": {"prompt": "fine"}}).to_string(),
        json!({"operation": "imagine", "body": {"prompt": "fine", "aspect_ratio": "x"}})
            .to_string(),
    ];
    std::fs::write(&file, bad.join("\n")).unwrap();
    let (ok, _, stderr) = easel(&app, args(&["batch", file.to_str().unwrap()])).await;
    assert!(
        !ok && stderr.contains("requests[1].aspect_ratio"),
        "{stderr}"
    );
    std::fs::write(&file, "{\"operation\": \"imagine\"\n").unwrap();
    let (ok, _, stderr) = easel(&app, args(&["batch", file.to_str().unwrap()])).await;
    assert!(!ok && stderr.contains("line 1: not JSON"), "{stderr}");
    assert_eq!(app.stored_tasks().await, before + 6);
}
