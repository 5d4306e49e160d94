//! Model backends through easel's HTTP API: easel configured with `[[backends]]` pointing at
//! local servers that speak a backend's documented protocol, check what easel sends, and
//! misbehave on request (one mock per protocol, in tests/it/backend_mocks). The adapters' own
//! request building and answer parsing are tested beside them (src/generate/backends/*/), and
//! each adapter on its own against its mock in backends/{comfyui,openai,sdwebui}_adapter.rs;
//! here is what a caller sees: tasks
//! finishing on the images the backend made, the pool spreading work, failing over and running
//! follow-ups anywhere.

mod comfyui_adapter;
mod comfyui_previews;
mod comfyui_transcript;
mod kept_files;
mod openai_adapter;
mod sdwebui_adapter;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::backend_mocks::flat;
use crate::backend_mocks::openai::OpenAiMock;
use crate::backend_mocks::sdwebui::{start_webui, WebUi};
use crate::backend_mocks::Fault;
use crate::backend_mocks::{self, comfyui::ComfyMock};
use crate::common::{self, TestApp};
use crate::events::Events;
use easel::generate::backends::{BackendConfig, BackendKind};

const WITHIN: Duration = Duration::from_secs(60);

fn webui(name: &str, url: &str, concurrency: usize, operations: Option<&[&str]>) -> BackendConfig {
    let mut cfg: BackendConfig = serde_json::from_value(json!({
        "name": name,
        "kind": "sdwebui",
        "url": url,
        "concurrency": concurrency,
        "timeout": "20s",
    }))
    .unwrap();
    cfg.operations = operations.map(|ops| ops.iter().map(|o| o.to_string()).collect());
    assert_eq!(cfg.kind, BackendKind::Sdwebui);
    cfg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webui_draws_the_tasks_and_a_follow_up_runs_on_another_backend() {
    let a = Arc::new(WebUi {
        shade: 10,
        ..WebUi::default()
    });
    let b = Arc::new(WebUi {
        shade: 100,
        ..WebUi::default()
    });
    let (url_a, url_b) = (start_webui(a.clone()).await, start_webui(b.clone()).await);
    let app = TestApp::spawn_with(|c| {
        c.backends = vec![
            webui("draws", &url_a, 1, Some(&["imagine"])),
            webui(
                "upscales",
                &url_b,
                1,
                Some(&["upscale-highres", "variations"]),
            ),
        ];
    })
    .await;
    let (status, ready) = app.get("/readyz").await;
    assert_eq!(status, 200, "{ready}");
    assert_eq!(ready["backends"].as_array().unwrap().len(), 2, "{ready}");

    // imagine on the WebUI: the images are the ones it made, at the size easel asked for.
    let grid = app
        .finished(
            "imagine",
            json!({"prompt": "a harbour", "aspect_ratio": "3:2"}),
            WITHIN,
        )
        .await;
    let first = app.image(&grid["image_urls"][0]).await;
    assert_eq!(first, flat(first.width, first.height, 10));
    assert_eq!(first.width % 8, 0);
    assert!(first.width > first.height, "3:2 is wide");
    assert_eq!(a.jobs.load(Ordering::SeqCst), 1);

    // A follow-up of A's image runs on B, which receives A's image from easel's storage.
    let up = app
        .finished(
            "upscale-highres",
            json!({"parent_task_id": grid["task_id"], "index": 1, "type": "2x"}),
            WITHIN,
        )
        .await;
    let upscaled = app.image(&up["image_url"]).await;
    assert_eq!(
        (upscaled.width, upscaled.height),
        (first.width * 2, first.height * 2)
    );
    assert_eq!(b.received.lock().unwrap()[0], first);
    assert_eq!(a.jobs.load(Ordering::SeqCst), 1, "A ran no upscale");

    // An operation no backend runs is refused at submit.
    let (status, body) = app
        .post("/api/v1/shorten", &json!({"prompt": "a very long prompt"}))
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["errors"][0]["code"], "unsupported_operation");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_down_at_start_is_skipped_concurrency_holds_and_it_comes_back() {
    let down = Arc::new(WebUi {
        shade: 30,
        delay_ms: AtomicU64::new(30),
        ..WebUi::default()
    });
    down.down.store(true, Ordering::SeqCst);
    let up = Arc::new(WebUi {
        shade: 60,
        delay_ms: AtomicU64::new(30),
        ..WebUi::default()
    });
    let (url_down, url_up) = (
        start_webui(down.clone()).await,
        start_webui(up.clone()).await,
    );
    let app = TestApp::spawn_with(|c| {
        c.backends = vec![
            webui("down", &url_down, 1, None),
            webui("up", &url_up, 2, None),
        ];
    })
    .await;
    let mut ids = Vec::new();
    for i in 0..8 {
        let (status, body) = app
            .post("/api/v1/imagine", &json!({"prompt": format!("task {i}")}))
            .await;
        assert_eq!(status, 200, "{body}");
        ids.push(body["task_id"].as_str().unwrap().to_string());
    }
    for id in &ids {
        let record = app.wait_final(id, WITHIN).await;
        assert_eq!(record["status"], "finished", "{record}");
    }
    assert_eq!(up.jobs.load(Ordering::SeqCst), 8);
    assert!(
        up.most.load(Ordering::SeqCst) <= 2,
        "concurrency 2 is never exceeded"
    );
    let (_, ready) = app.get("/readyz").await;
    let states: Vec<(String, bool)> = ready["backends"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["name"].as_str().unwrap().to_string(),
                b["up"].as_bool().unwrap(),
            )
        })
        .collect();
    assert!(states.contains(&("down".to_string(), false)), "{ready}");

    // It comes back: the probe finds it, and work reaches it again.
    down.down.store(false, Ordering::SeqCst);
    common::wait_for(Duration::from_secs(20), || async {
        let (_, ready) = app.get("/readyz").await;
        ready["backends"]
            .as_array()
            .unwrap()
            .iter()
            .all(|b| b["up"] == true)
            .then_some(())
    })
    .await
    .expect("the backend is probed back in");
    let mut ids = Vec::new();
    for i in 0..6 {
        let (_, body) = app
            .post("/api/v1/imagine", &json!({"prompt": format!("again {i}")}))
            .await;
        ids.push(body["task_id"].as_str().unwrap().to_string());
    }
    for id in &ids {
        app.wait_final(id, WITHIN).await;
    }
    assert!(
        down.jobs.load(Ordering::SeqCst) > 0,
        "work reaches it again"
    );
    assert_eq!(down.most.load(Ordering::SeqCst), 1);
}

/// With its only backend out, a task stays queued (no node claims for a slot that is out) and
/// its record says it waits for a backend, not for its turn; once the backend is back, it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_queued_while_every_backend_is_out_says_it_waits_for_a_backend() {
    let gpu = Arc::new(WebUi {
        delay_ms: AtomicU64::new(30),
        ..WebUi::default()
    });
    gpu.down.store(true, Ordering::SeqCst);
    let url = start_webui(gpu.clone()).await;
    let app = TestApp::spawn_with(|c| c.backends = vec![webui("only", &url, 1, None)]).await;
    // Readiness says no backend is up once the probe at start has found it out.
    common::wait_for(Duration::from_secs(20), || async {
        (app.get("/readyz").await.0 == 503).then_some(())
    })
    .await
    .expect("the probe finds the backend out");
    let first = app.submit("imagine", json!({"prompt": "a pier"})).await;
    let id = app.submit("imagine", json!({"prompt": "a harbour"})).await;
    // Given a moment in which a worker could claim them, both are still queued.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let record = app.fetch(&id).await;
    assert_eq!(
        (&record["status"], &record["waiting_for"]),
        (&json!("pending"), &json!("backend")),
        "{record}"
    );
    assert_eq!(record["queue_position"], 1, "{record}");

    // Its stream says the same, in its record and as its place in line moves.
    let (_, stream) =
        Events::open(&app, &app.key, &format!("/api/v1/tasks/{id}/events"), None).await;
    let mut stream = stream.unwrap();
    let said = stream.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(said.data["waiting_for"], "backend", "{said:?}");
    let (status, _) = app
        .post(&format!("/api/v1/tasks/{first}/cancel"), &json!({}))
        .await;
    assert_eq!(status, 200);
    let moved = stream.next(Duration::from_secs(10)).await.unwrap();
    assert_eq!(
        (moved.event.as_str(), &moved.data["queue_position"]),
        ("progress", &json!(0)),
        "{moved:?}"
    );
    assert_eq!(moved.data["waiting_for"], "backend", "{moved:?}");

    gpu.down.store(false, Ordering::SeqCst);
    let record = app.wait_final(&id, WITHIN).await;
    assert_eq!(record["status"], "finished", "{record}");
    assert_eq!(gpu.jobs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_configuration_that_cannot_work_stops_easel_naming_the_setting() {
    let dir = tempfile::tempdir().unwrap();
    let cases: Vec<(Value, &str)> = vec![
        (
            json!([{"name": "Gpu A", "kind": "sdwebui", "url": "http://127.0.0.1:1"}]),
            "backends: name \"Gpu A\" must be",
        ),
        (
            json!([{"name": "a", "kind": "sdwebui"}]),
            "backends.a.url: is required",
        ),
        (
            json!([{"name": "a", "kind": "sdwebui", "url": "ftp://x"}]),
            "backends.a.url: must be an http or https URL",
        ),
        (
            json!([{"name": "a", "kind": "sdwebui", "url": "http://x", "concurrency": 0}]),
            "backends.a.concurrency: must be at least 1",
        ),
        (
            json!([{"name": "a", "kind": "openai", "url": "http://x", "operations": ["upscale-1x"]}]),
            "backends.a.operations: a openai backend cannot run upscale-1x",
        ),
        (
            json!([{"name": "a", "kind": "procedural"}, {"name": "a", "kind": "procedural"}]),
            "backends: the name \"a\" is used twice",
        ),
        (
            json!([{"name": "a", "kind": "openai", "url": "http://x",
                    "api_key_env": "EASEL_TEST_NO_SUCH_VARIABLE"}]),
            "backends.a.api_key_env: the environment variable EASEL_TEST_NO_SUCH_VARIABLE is not set",
        ),
        (
            json!([{"name": "a", "kind": "sdwebui", "url": "https://x",
                    "tls_ca_file": dir.path().join("no-such-ca.pem")}]),
            "backends.a.tls_ca_file: ",
        ),
        (
            json!([{"name": "a", "kind": "procedural", "tls_ca_file": "ca.pem"}]),
            "backends.a.tls_ca_file: a procedural backend has no server to trust",
        ),
        (
            json!([{"name": "a", "kind": "sdwebui", "url": "http://x", "dialect": "sd-cpp"}]),
            "backends.a.dialect: is a setting of openai backends",
        ),
    ];
    for (backends, message) in cases {
        let mut config = common::test_config(dir.path());
        config.backends = serde_json::from_value(backends.clone()).unwrap();
        let err = match easel::Application::build(config).await {
            Ok(_) => panic!("{backends} was accepted"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(message), "{backends}: {err}");
    }
    // An unknown kind is refused when the file is read.
    let file = dir.path().join("easel.toml");
    std::fs::write(&file, "[[backends]]\nname = \"a\"\nkind = \"dalle\"\n").unwrap();
    let err = easel::config::Config::load(Some(file.clone()), &Default::default())
        .expect_err("an unknown kind is refused")
        .to_string();
    assert!(err.contains("dalle"), "{err}");
    // A CA file is named relative to the configuration file.
    std::fs::write(
        &file,
        "[[backends]]\nname = \"a\"\nkind = \"sdwebui\"\nurl = \"https://x\"\ntls_ca_file = \"ca.pem\"\n",
    )
    .unwrap();
    let config = easel::config::Config::load(Some(file), &Default::default()).unwrap();
    assert_eq!(
        config.backends[0].tls_ca_file.as_deref(),
        Some(dir.path().join("ca.pem").as_path())
    );
}

// ---------------------------------------------------------------------------------------------
// The openai and comfyui kinds, and the pool, against the mocks of tests/it/backend_mocks.

fn backend(value: Value) -> BackendConfig {
    serde_json::from_value(value).unwrap()
}

fn openai(name: &str, url: &str, key: &str, extra: Value) -> BackendConfig {
    let mut cfg = json!({
        "name": name, "kind": "openai", "url": url, "api_key": key,
        "concurrency": 1, "timeout": "1s",
    });
    cfg.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    backend(cfg)
}

fn fixture(name: &str) -> String {
    format!(
        "{}/tests/fixtures/comfyui/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn comfy(name: &str, url: &str) -> BackendConfig {
    backend(json!({
        "name": name, "kind": "comfyui", "url": url, "concurrency": 1, "timeout": "1s",
        "workflow": fixture("txt2img.json"),
        "workflows": {"variations": fixture("img2img.json")},
    }))
}

/// Submit a task and wait for its end; its final record, whatever the status.
async fn outcome(app: &TestApp, op: &str, body: Value) -> Value {
    let id = app.submit(op, body).await;
    app.wait_final(&id, WITHIN).await
}

/// Assert that the task failed with an error starting with `start` and containing `part`.
fn failed_with(record: &Value, start: &str, part: &str) {
    assert_eq!(record["status"], "failed", "{record}");
    let error = record["error"].as_str().unwrap();
    assert!(
        error.starts_with(start) && error.contains(part),
        "wanted {start:?} ... {part:?}, got {error:?}"
    );
}

/// The images of a grid task as the backend made them: flat images of `shade`, `shade + 1`, ...
async fn assert_images_are(app: &TestApp, record: &Value, shade: u8) -> (u32, u32) {
    let urls = record["image_urls"].as_array().unwrap();
    assert_eq!(urls.len(), 4, "{record}");
    let first = app.image(&urls[0]).await;
    for (k, url) in urls.iter().enumerate() {
        let img = app.image(url).await;
        assert_eq!(
            img,
            backend_mocks::flat(first.width, first.height, shade + k as u8),
            "image {k} is the backend's"
        );
    }
    (first.width, first.height)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_gets_the_fields_sizes_key_and_n_it_documents_and_both_answer_shapes_work() {
    let mock = Arc::new(OpenAiMock {
        key: Some("sk-test-123".into()),
        shade: 20,
        ..OpenAiMock::default()
    });
    let url = mock.start().await;
    let app = TestApp::spawn_with(|c| {
        c.backends = vec![
            openai("oa", &url, "sk-test-123", json!({})),
            // The openai kind has no upscale: the parent of the pan below is made here.
            backend(json!({"name": "proc", "kind": "procedural", "operations": ["upscale-1x"]})),
        ];
    })
    .await;

    // imagine: one generations request for four images, at the aspect ratio in multiples of 64.
    let grid = app
        .finished("imagine", json!({"prompt": "a harbour --ar 2:1"}), WITHIN)
        .await;
    assert_eq!(assert_images_are(&app, &grid, 20).await, (128, 64));
    let seen = mock.seen();
    assert_eq!(seen.len(), 1);
    let generation = &seen[0];
    assert_eq!(generation.path, "/images/generations");
    assert_eq!(
        generation.authorization.as_deref(),
        Some("Bearer sk-test-123")
    );
    assert_eq!(generation.fields["n"], "4");
    assert_eq!(generation.fields["size"], "128x64");
    assert_eq!(generation.fields["response_format"], "b64_json");
    assert_eq!(generation.fields["prompt"], "a harbour");

    // variations: an edit of the parent's image, sent as a multipart file.
    let parent = app.image(&grid["image_urls"][1]).await;
    let variations = app
        .finished(
            "variations",
            json!({"parent_task_id": grid["task_id"], "index": 2}),
            WITHIN,
        )
        .await;
    assert_images_are(&app, &variations, 70).await;
    let edit = &mock.seen()[1];
    assert_eq!(edit.path, "/images/edits");
    assert_eq!(edit.authorization.as_deref(), Some("Bearer sk-test-123"));
    assert_eq!(edit.fields["n"], "4");
    assert_eq!(edit.files["image"], parent);
    assert!(!edit.files.contains_key("mask"), "variations redraw all");

    // pan: the parent on a wider canvas, with a mask over the new part (the mock refuses a mask
    // without a transparent pixel, or of another size than the image).
    let one = app
        .finished(
            "upscale-1x",
            json!({"parent_task_id": grid["task_id"], "index": 1}),
            WITHIN,
        )
        .await;
    app.finished(
        "pan",
        json!({"parent_task_id": one["task_id"], "direction": "right"}),
        WITHIN,
    )
    .await;
    let pan = &mock.seen()[2];
    assert_eq!(pan.path, "/images/edits");
    let (image, mask) = (&pan.files["image"], &pan.files["mask"]);
    assert!(image.width > image.height, "a right pan widens: {pan:?}");
    let transparent = |x: u32| mask.data[(x * 4 + 3) as usize] == 0;
    assert!(
        !transparent(0) && transparent(mask.width - 1),
        "the new part is on the right"
    );

    // A server that answers with URLs: easel fetches them, with the key (same origin).
    let urls = Arc::new(OpenAiMock {
        key: Some("sk-test-456".into()),
        urls: true,
        shade: 90,
        ..OpenAiMock::default()
    });
    let url = urls.start().await;
    let app = TestApp::spawn_with(|c| {
        c.backends = vec![openai("oa-urls", &url, "sk-test-456", json!({}))];
    })
    .await;
    let grid = app
        .finished("imagine", json!({"prompt": "a lantern"}), WITHIN)
        .await;
    assert_images_are(&app, &grid, 90).await;
    let fetches = urls.file_fetches.lock().unwrap().clone();
    assert_eq!(fetches.len(), 4);
    assert!(fetches
        .iter()
        .all(|a| a.as_deref() == Some("Bearer sk-test-456")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dall_e_3_gets_four_requests_of_one_image_at_a_size_it_makes() {
    let mock = Arc::new(OpenAiMock {
        key: Some("sk-d3".into()),
        shade: 5,
        ..OpenAiMock::default()
    });
    let url = mock.start().await;
    let app = TestApp::spawn_with(|c| {
        c.backends = vec![openai(
            "d3",
            &url,
            "sk-d3",
            json!({"model": "dall-e-3", "concurrency": 4, "timeout": "20s"}),
        )];
    })
    .await;
    let grid = app
        .finished("imagine", json!({"prompt": "a dune --ar 16:9"}), WITHIN)
        .await;
    let seen = mock.seen();
    assert_eq!(seen.len(), 4, "one request per image");
    for request in &seen {
        assert_eq!(request.fields["n"], "1");
        assert_eq!(request.fields["size"], "1792x1024", "the nearest to 16:9");
        assert_eq!(request.fields["model"], "dall-e-3");
    }
    let first = app.image(&grid["image_urls"][0]).await;
    assert_eq!((first.width, first.height), (1792, 1024));
    // dall-e-3 has no edits: variations are refused at submit.
    let (status, body) = app
        .post(
            "/api/v1/variations",
            &json!({"parent_task_id": grid["task_id"], "index": 1}),
        )
        .await;
    assert_eq!(status, 400, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_failures_are_sorted_refusals_malformed_answers_retries_and_hangs() {
    let mock = Arc::new(OpenAiMock {
        key: Some("sk-f".into()),
        ..OpenAiMock::default()
    });
    let url = mock.start().await;
    let app = TestApp::spawn_with(|c| {
        c.backends = vec![openai("oa", &url, "sk-f", json!({}))];
        c.worker.generation_budget = Duration::from_secs(4);
    })
    .await;
    let imagine = || json!({"prompt": "a test pattern"});
    let script = |faults: Vec<Fault>| mock.script.set_next(faults);

    // Content refusals fail the task at once, saying so.
    for code in ["content_policy_violation", "moderation_blocked"] {
        script(vec![Fault::Refuse(code)]);
        let record = outcome(&app, "imagine", imagine()).await;
        failed_with(
            &record,
            "content policy violation: ",
            "rejected as a result of our safety system",
        );
    }
    // Malformed answers fail it with what was wrong.
    let cases = [
        (
            Fault::BadJson,
            "the backend's answer is not the images JSON",
        ),
        (Fault::BadBase64, "b64_json is not base64"),
        (Fault::NotImage, "image 1 from the backend"),
        (Fault::Count(3), "answered 3 images where 4 were asked for"),
    ];
    for (fault, message) in cases {
        script(vec![fault]);
        let record = outcome(&app, "imagine", imagine()).await;
        failed_with(&record, "generation failed: ", message);
    }
    // 5xx and a dropped connection are tried again.
    let before = mock.seen().len();
    script(vec![Fault::status(503), Fault::status(500)]);
    let record = outcome(&app, "imagine", imagine()).await;
    assert_eq!(record["status"], "finished", "{record}");
    assert_eq!(mock.seen().len() - before, 3);
    script(vec![Fault::Drop]);
    let record = outcome(&app, "imagine", imagine()).await;
    assert_eq!(record["status"], "finished", "{record}");
    // A 429's Retry-After is honoured.
    let before = mock.seen().len();
    script(vec![Fault::Status {
        code: 429,
        retry_after: Some(1),
        body: "{\"error\":{\"message\":\"Rate limit reached\"}}".into(),
    }]);
    let record = outcome(&app, "imagine", imagine()).await;
    assert_eq!(record["status"], "finished", "{record}");
    let seen = mock.seen();
    let gap = seen[before + 1].at - seen[before].at;
    assert!(gap >= Duration::from_millis(950), "retried after {gap:?}");
    // A hang is cut at the backend's timeout and tried again until the budget is spent.
    mock.script.set(Fault::Hang);
    let record = outcome(&app, "imagine", imagine()).await;
    failed_with(
        &record,
        "backend unavailable: ",
        "timed out after 1s (backend oa)",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_key_fails_the_task_without_showing_the_key() {
    let mock = Arc::new(OpenAiMock {
        key: Some("sk-right".into()),
        ..OpenAiMock::default()
    });
    let url = mock.start().await;
    let app = TestApp::spawn_with(|c| {
        c.backends = vec![
            openai(
                "right",
                &url,
                "sk-right",
                json!({"operations": ["imagine"]}),
            ),
            openai(
                "wrong",
                &url,
                "sk-wrong-secret",
                json!({"operations": ["reroll"]}),
            ),
        ];
        c.worker.generation_budget = Duration::from_secs(2);
    })
    .await;
    let grid = app
        .finished("imagine", json!({"prompt": "a key"}), WITHIN)
        .await;
    // The backend with the wrong key is taken out by its probe at start...
    let ready = common::wait_for(Duration::from_secs(10), || async {
        let (_, ready) = app.get("/readyz").await;
        let wrong = ready["backends"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["name"] == "wrong")
            .cloned()
            .unwrap();
        (wrong["up"] == false).then_some(ready)
    })
    .await
    .expect("the wrong key is found by the probe");
    assert!(ready.to_string().contains("HTTP 401"), "{ready}");
    assert!(!ready.to_string().contains("sk-wrong"), "{ready}");
    // ... and a task only it runs fails, naming why, without the key.
    let record = outcome(&app, "reroll", json!({"parent_task_id": grid["task_id"]})).await;
    failed_with(&record, "backend unavailable: ", "HTTP 401");
    assert!(!record.to_string().contains("sk-wrong"), "{record}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn comfyui_gets_the_job_in_its_graph_and_its_progress_events_move_the_percentage() {
    let mock = Arc::new(ComfyMock {
        delay: Duration::from_millis(2400),
        shade: 40,
        ..ComfyMock::default()
    });
    let url = mock.start().await;
    let app = TestApp::spawn_with(|c| {
        let mut cfg = comfy("comfy", &url);
        cfg.timeout = Duration::from_secs(20);
        c.backends = vec![cfg];
    })
    .await;
    let id = app
        .submit("imagine", json!({"prompt": "a lighthouse --ar 3:2"}))
        .await;
    // The percentage while it runs: the socket's progress events land between 15 (running) and
    // 80 (done), where polling alone has nothing to report.
    let mut seen = Vec::new();
    let record = loop {
        let (_, record) = app.get(&format!("/api/v1/tasks/{id}")).await;
        let percent: i64 = record["percentage"].as_str().unwrap().parse().unwrap();
        seen.push(percent);
        if matches!(record["status"].as_str(), Some("finished" | "failed")) {
            break record;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(record["status"], "finished", "{record}");
    assert!(seen.windows(2).all(|w| w[0] <= w[1]), "{seen:?}");
    let mut between: Vec<i64> = seen
        .iter()
        .copied()
        .filter(|p| (16..80).contains(p))
        .collect();
    between.dedup();
    // The record's percentage is stored at most once a second (the event stream carries every
    // step): a job of a few seconds shows at least two steps between start and end.
    assert!(
        between.len() >= 2,
        "the progress rises step by step: {seen:?}"
    );

    // The graph: the prompt in the sampler's text encoder, the task's seed in the sampler, the
    // size (multiples of 8, 3:2) and a batch of four in the empty latent.
    let sent = mock.prompts.lock().unwrap()[0].clone();
    let graph = &sent["prompt"];
    assert_eq!(graph["6"]["inputs"]["text"], "a lighthouse");
    assert_eq!(
        graph["7"]["inputs"]["text"], "bad hands",
        "the negative is left"
    );
    assert_eq!(graph["3"]["inputs"]["seed"], record["seed"]);
    let latent = &graph["5"]["inputs"];
    let (w, h) = (
        latent["width"].as_u64().unwrap(),
        latent["height"].as_u64().unwrap(),
    );
    assert_eq!((w % 8, h % 8), (0, 0));
    assert!(w > h, "3:2 is wide");
    assert_eq!(latent["batch_size"], 4);
    assert_eq!(
        assert_images_are(&app, &record, 40).await,
        (w as u32, h as u32)
    );
    let client = sent["client_id"].as_str().unwrap().to_string();
    assert!(
        mock.sockets.lock().unwrap().contains(&client),
        "queued under the socket's client id"
    );

    // variations: the parent uploaded, named in the LoadImage node, its latent repeated to four.
    let parent = app.image(&record["image_urls"][2]).await;
    app.finished(
        "variations",
        json!({"parent_task_id": id, "index": 3}),
        WITHIN,
    )
    .await;
    let uploads = mock.uploads.lock().unwrap().clone();
    assert_eq!(uploads.len(), 1);
    assert_eq!(uploads[0].1, parent);
    let graph = mock.prompts.lock().unwrap()[1]["prompt"].clone();
    assert_eq!(graph["10"]["inputs"]["image"], uploads[0].0.as_str());
    let repeat = graph["3"]["inputs"]["latent_image"][0].as_str().unwrap();
    assert_eq!(graph[repeat]["class_type"], "RepeatLatentBatch");
    assert_eq!(graph[repeat]["inputs"]["amount"], 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn comfyui_failures_are_sorted_and_a_hung_job_is_taken_off_the_backend() {
    // Without its socket, so that these jobs are followed by polling alone.
    let mock = Arc::new(ComfyMock {
        socket: false,
        ..ComfyMock::default()
    });
    let url = mock.start().await;
    // ComfyUI runs one job at a time, so a job can wait behind one easel gave up on (a lost
    // answer's): two seconds, not one, keep a slow machine from timing out a good job.
    let app = TestApp::spawn_with(|c| {
        let mut backend = comfy("comfy", &url);
        backend.timeout = Duration::from_secs(2);
        c.backends = vec![backend];
        c.worker.generation_budget = Duration::from_secs(4);
    })
    .await;
    let imagine = || json!({"prompt": "a test pattern"});
    let proposed = |k: usize| {
        mock.prompts.lock().unwrap()[k]["prompt_id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let record = outcome(&app, "imagine", imagine()).await;
    assert_eq!(record["status"], "finished", "polling alone: {record}");

    // 5xx is tried again; a 429's Retry-After is honoured.
    mock.script.set_next(vec![Fault::status(503)]);
    let record = outcome(&app, "imagine", imagine()).await;
    assert_eq!(record["status"], "finished", "{record}");
    mock.script.set_next(vec![Fault::Status {
        code: 429,
        retry_after: Some(1),
        body: "busy".into(),
    }]);
    let started = std::time::Instant::now();
    let record = outcome(&app, "imagine", imagine()).await;
    assert_eq!(record["status"], "finished", "{record}");
    assert!(started.elapsed() >= Duration::from_millis(950));

    // An answer to POST /prompt that is lost or unreadable: the job may be queued, so it is
    // deleted by the id easel proposed; lost is tried again, unreadable fails.
    let k = mock.prompts.lock().unwrap().len();
    mock.script.set_next(vec![Fault::Drop]);
    let record = outcome(&app, "imagine", imagine()).await;
    assert_eq!(record["status"], "finished", "{record}");
    assert!(mock.deletes.lock().unwrap().contains(&proposed(k)));
    let k = mock.prompts.lock().unwrap().len();
    mock.script.set_next(vec![Fault::BadJson]);
    let record = outcome(&app, "imagine", imagine()).await;
    failed_with(
        &record,
        "generation failed: ",
        "the backend's answer to POST /prompt is not JSON",
    );
    assert!(mock.deletes.lock().unwrap().contains(&proposed(k)));

    // Malformed results.
    mock.script.set_next(vec![Fault::NotImage]);
    let record = outcome(&app, "imagine", imagine()).await;
    failed_with(&record, "generation failed: ", "image 1 from the backend");
    mock.script.set_next(vec![Fault::Count(3)]);
    let record = outcome(&app, "imagine", imagine()).await;
    failed_with(
        &record,
        "generation failed: ",
        "the workflow made 3 images; imagine needs 4",
    );

    // A job that hangs past the timeout is deleted from the queue and interrupted, by its id.
    let k = mock.prompts.lock().unwrap().len();
    mock.script.set(Fault::Hang);
    let record = outcome(&app, "imagine", imagine()).await;
    failed_with(&record, "backend unavailable: ", "timed out after 2s");
    let hung = proposed(k);
    assert!(mock.deletes.lock().unwrap().contains(&hung));
    assert!(
        mock.interrupts
            .lock()
            .unwrap()
            .iter()
            .any(|b| b["prompt_id"] == hung.as_str()),
        "the hung job is interrupted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_that_dies_mid_job_has_its_task_finished_on_another() {
    let dying = Arc::new(OpenAiMock {
        delay: Duration::from_secs(3),
        shade: 10,
        ..OpenAiMock::default()
    });
    let spare = Arc::new(OpenAiMock {
        delay: Duration::from_millis(30),
        shade: 100,
        ..OpenAiMock::default()
    });
    let (url_dying, url_spare) = (dying.start().await, spare.start().await);
    let app = TestApp::spawn_with(|c| {
        // Listed first, so that with both idle the first task goes to it.
        c.backends = vec![
            openai("dying", &url_dying, "k", json!({"timeout": "20s"})),
            openai("spare", &url_spare, "k", json!({"timeout": "20s"})),
        ];
    })
    .await;
    let id = app.submit("imagine", json!({"prompt": "mid-job"})).await;
    common::wait_for(Duration::from_secs(10), || async {
        (dying.running.load(Ordering::SeqCst) == 1).then_some(())
    })
    .await
    .expect("the job reaches the first backend");
    dying.die();
    let record = app.wait_final(&id, WITHIN).await;
    assert_eq!(record["status"], "finished", "{record}");
    assert_images_are(&app, &record, 100).await;
    assert_eq!(dying.jobs.load(Ordering::SeqCst), 0);

    // It stays dead: later tasks finish on the spare, and the dead one is taken out.
    for i in 0..4 {
        let record = outcome(&app, "imagine", json!({"prompt": format!("after {i}")})).await;
        assert_eq!(record["status"], "finished", "{record}");
    }
    assert_eq!(spare.jobs.load(Ordering::SeqCst), 5);
    common::wait_for(Duration::from_secs(10), || async {
        let (_, ready) = app.get("/readyz").await;
        (ready["backends"][0]["up"] == false).then_some(())
    })
    .await
    .expect("the dead backend is taken out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_backends_of_different_speeds_share_the_load_within_their_concurrency() {
    let fast = Arc::new(OpenAiMock {
        delay: Duration::from_millis(40),
        ..OpenAiMock::default()
    });
    let slow = Arc::new(OpenAiMock {
        delay: Duration::from_millis(400),
        ..OpenAiMock::default()
    });
    let (url_fast, url_slow) = (fast.start().await, slow.start().await);
    let app = TestApp::spawn_with(|c| {
        c.backends = vec![
            openai("slow", &url_slow, "k", json!({"timeout": "20s"})),
            openai(
                "fast",
                &url_fast,
                "k",
                json!({"timeout": "20s", "concurrency": 2}),
            ),
        ];
    })
    .await;
    let mut ids = Vec::new();
    for i in 0..24 {
        ids.push(
            app.submit("imagine", json!({"prompt": format!("load {i}")}))
                .await,
        );
    }
    for id in &ids {
        let record = app.wait_final(id, WITHIN).await;
        assert_eq!(record["status"], "finished", "{record}");
    }
    let (f, s) = (
        fast.jobs.load(Ordering::SeqCst),
        slow.jobs.load(Ordering::SeqCst),
    );
    assert_eq!(f + s, 24);
    assert!(s >= 1, "the slow one works too");
    assert!(f >= 3 * s, "the fast one takes more: fast {f}, slow {s}");
    assert!(fast.most.load(Ordering::SeqCst) <= 2);
    assert_eq!(slow.most.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canceled_task_is_taken_off_its_backend_and_the_slot_goes_to_the_next() {
    let mock = Arc::new(ComfyMock::default());
    let url = mock.start().await;
    // Heartbeats a minute apart: only the cancel's announcement can stop the job sooner.
    let app = TestApp::spawn_with(|c| {
        let mut backend = comfy("comfy", &url);
        backend.timeout = Duration::from_secs(120);
        c.backends = vec![backend];
        c.worker.heartbeat = Duration::from_secs(60);
        c.worker.lease = Duration::from_secs(120);
    })
    .await;
    // The job hangs on the backend until easel takes it off.
    mock.script.set(Fault::Hang);
    let id = app.submit("imagine", json!({"prompt": "a long job"})).await;
    let on_backend = common::wait_for(WITHIN, || async {
        let prompts = mock.prompts.lock().unwrap();
        prompts
            .first()
            .map(|p| p["prompt_id"].as_str().unwrap().to_string())
    })
    .await
    .expect("the job reaches the backend");
    let (status, record) = app
        .post(&format!("/api/v1/tasks/{id}/cancel"), &json!({}))
        .await;
    assert_eq!(status, 200, "{record}");
    assert_eq!(record["status"], "canceled");
    // Deleted from the backend's queue and interrupted, by its id, well before a heartbeat.
    common::wait_for(Duration::from_secs(30), || async {
        let deleted = mock.deletes.lock().unwrap().contains(&on_backend);
        let interrupted = mock
            .interrupts
            .lock()
            .unwrap()
            .iter()
            .any(|b| b["prompt_id"] == on_backend.as_str());
        (deleted && interrupted).then_some(())
    })
    .await
    .expect("the canceled job is taken off the backend");
    // Its one slot is free for the next task.
    mock.script.set(Fault::Ok);
    let next = outcome(&app, "imagine", json!({"prompt": "the next job"})).await;
    assert_eq!(next["status"], "finished", "{next}");
    assert_eq!(app.fetch(&id).await["status"], "canceled");
}

/// An OpenAI-protocol server that answers each job's head at once and the rest of its body
/// `trickle` later, and notes when each request came.
async fn start_trickling(
    trickle: Duration,
) -> (Arc<std::sync::Mutex<Vec<std::time::Instant>>>, String) {
    use axum::body::Body;
    use axum::routing::{get, post};
    use futures::StreamExt;
    let arrivals = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = arrivals.clone();
    let image = backend_mocks::png_b64(&flat(64, 64, 90));
    let app = axum::Router::new()
        .route(
            "/v1/models",
            get(|| async { axum::Json(json!({"data": []})) }),
        )
        .route(
            "/v1/images/generations",
            post(move |_body: axum::body::Bytes| {
                seen.lock().unwrap().push(std::time::Instant::now());
                let items = vec![json!({ "b64_json": image }); 4];
                let body = json!({"created": 0, "data": items}).to_string();
                async move {
                    let (head, tail) = body.split_at(10);
                    let (head, tail) = (head.to_string(), tail.to_string());
                    let rest = futures::stream::once(async move {
                        tokio::time::sleep(trickle).await;
                        tail
                    });
                    let chunks = futures::stream::once(async move { head })
                        .chain(rest)
                        .map(|s| Ok::<_, std::convert::Infallible>(bytes::Bytes::from(s)));
                    axum::response::Response::builder()
                        .header("content-type", "application/json")
                        .body(Body::from_stream(chunks))
                        .unwrap()
                }
            }),
        );
    let url = format!("{}/v1", backend_mocks::serve(app).await);
    (arrivals, url)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backends_slot_goes_to_the_next_job_once_it_answers_not_once_the_answer_is_read() {
    let trickle = Duration::from_millis(1500);
    let (arrivals, url) = start_trickling(trickle).await;
    let app = TestApp::spawn_with(|c| {
        c.backends = vec![openai("oa", &url, "k", json!({"timeout": "20s"}))];
    })
    .await;
    let first = app.submit("imagine", json!({"prompt": "the first"})).await;
    let second = app.submit("imagine", json!({"prompt": "the second"})).await;
    for id in [&first, &second] {
        let record = app.wait_final(id, WITHIN).await;
        assert_eq!(record["status"], "finished", "{record}");
    }
    let arrivals = arrivals.lock().unwrap().clone();
    assert_eq!(arrivals.len(), 2);
    // Concurrency 1: the second job is sent once the first is answered (its head), while the
    // first's body is still coming, not after it.
    let gap = arrivals[1] - arrivals[0];
    assert!(
        gap < trickle,
        "the second job waited {gap:?} for the first's whole answer"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_served_only_by_comfyui_offers_u1_to_u4_and_makes_upscale_1x() {
    let mock = Arc::new(ComfyMock {
        shade: 60,
        ..ComfyMock::default()
    });
    let url = mock.start().await;
    let app = TestApp::spawn_with(|c| {
        let mut cfg = comfy("comfy", &url);
        cfg.timeout = Duration::from_secs(20);
        c.backends = vec![cfg];
    })
    .await;
    let grid = app
        .finished("imagine", json!({"prompt": "a lighthouse"}), WITHIN)
        .await;
    let labels: Vec<&str> = grid["actions"]
        .as_array()
        .expect("actions")
        .iter()
        .map(|a| a["label"].as_str().unwrap())
        .collect();
    for u in ["U1", "U2", "U3", "U4"] {
        assert!(labels.contains(&u), "{u} offered: {labels:?}");
    }
    let prompts = mock.prompts.lock().unwrap().len();
    // U3: the grid's third image as it was stored, without a job on the backend.
    let up = app
        .finished(
            "upscale-1x",
            json!({"parent_task_id": grid["task_id"], "index": 3}),
            WITHIN,
        )
        .await;
    let third = app.image(&grid["image_urls"][2]).await;
    assert_eq!(app.image(&up["image_url"]).await, third);
    assert_eq!(
        mock.prompts.lock().unwrap().len(),
        prompts,
        "the crop sent nothing to ComfyUI"
    );
}
