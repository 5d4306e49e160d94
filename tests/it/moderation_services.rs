//! The operator's own moderation services (`[moderation] prompt_url`, `image_url`), served here
//! by local stand-ins that speak OpenAI's `/v1/moderations` and the image checker's protocol
//! and record what they receive.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::HeaderMap;
use axum::routing::post;
use easel::config::OnError;
use serde_json::{json, Value};

use crate::backend_mocks;
use crate::common::TestApp;

const METRICS_TOKEN: &str = "metrics-token-for-checkers";

type Seen = Arc<Mutex<Vec<(Option<String>, Value)>>>;

/// A prompt checker that flags any input containing "forbidden", recording each request's
/// `Authorization` and body.
async fn prompt_checker() -> (String, Seen) {
    let seen: Seen = Arc::default();
    let record = seen.clone();
    let app = axum::Router::new().route(
        "/v1/moderations",
        post(
            move |headers: HeaderMap, axum::Json(body): axum::Json<Value>| {
                let auth = headers
                    .get("authorization")
                    .map(|v| v.to_str().unwrap().to_string());
                let flagged = body["input"].as_str().unwrap_or("").contains("forbidden");
                record.lock().unwrap().push((auth, body));
                async move {
                    axum::Json(json!({
                        "id": "modr-1",
                        "model": "omni-moderation-latest",
                        "results": [{
                            "flagged": flagged,
                            "categories": {"violence": flagged, "sexual": false},
                            "category_scores": {"violence": 0.9, "sexual": 0.01}
                        }]
                    }))
                }
            },
        ),
    );
    let base = backend_mocks::serve(app).await;
    (format!("{base}/v1/moderations"), seen)
}

#[tokio::test]
async fn the_prompt_checker_refuses_a_flagged_prompt_before_anything_is_stored() {
    let (url, seen) = prompt_checker().await;
    let app = TestApp::spawn_with(|c| {
        c.worker.workers = 0;
        c.moderation.prompt_url = Some(url);
        c.moderation.api_key = Some("checker-secret-key".into());
        c.moderation.model = Some("omni-moderation-latest".into());
        c.server.metrics_token = Some(METRICS_TOKEN.into());
    })
    .await;
    let before = app.stored_tasks().await;
    let (status, body) = app
        .post("/api/v1/imagine", &json!({"prompt": "a forbidden act"}))
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["errors"][0]["code"], "content_policy", "{body}");
    assert!(
        body["errors"][0]["msg"]
            .as_str()
            .unwrap()
            .contains("prompt checker"),
        "{body}"
    );
    assert_eq!(app.stored_tasks().await, before, "nothing stored");

    let (status, body) = app
        .post(
            "/api/v1/imagine",
            &json!({"prompt": "a quiet harbour --ar 3:2"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(app.stored_tasks().await, before + 1);

    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "one check per submit: {seen:?}");
    for (auth, body) in &seen {
        assert_eq!(auth.as_deref(), Some("Bearer checker-secret-key"));
        assert_eq!(body["model"], "omni-moderation-latest");
    }
    assert_eq!(seen[0].1["input"], "a forbidden act");
    assert!(
        seen[1].1["input"]
            .as_str()
            .unwrap()
            .starts_with("a quiet harbour"),
        "{seen:?}"
    );
    let metrics = app.metrics(METRICS_TOKEN).await;
    assert!(
        metrics.contains(r#"easel_moderation_checks_total{checker="prompt",outcome="flagged"}"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn an_unreachable_prompt_checker_refuses_when_closed_and_passes_when_open() {
    // A port nothing listens on: bound, then closed.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    for (on_error, expected) in [(OnError::Closed, 503), (OnError::Open, 200)] {
        let app = TestApp::spawn_with(|c| {
            c.worker.workers = 0;
            c.moderation.prompt_url = Some(format!("http://{closed}/v1/moderations"));
            c.moderation.timeout = Duration::from_millis(500);
            c.moderation.on_error = on_error;
        })
        .await;
        let before = app.stored_tasks().await;
        let (status, body) = app
            .post("/api/v1/imagine", &json!({"prompt": "a lighthouse"}))
            .await;
        assert_eq!(status, expected, "{on_error}: {body}");
        let stored = if expected == 200 { 1 } else { 0 };
        assert_eq!(app.stored_tasks().await, before + stored, "{on_error}");
    }
}

/// An image checker that answers `verdict` for every image, recording the media types it got.
async fn image_checker(flag: bool) -> (String, Arc<Mutex<Vec<(String, usize)>>>) {
    let seen: Arc<Mutex<Vec<(String, usize)>>> = Arc::default();
    let record = seen.clone();
    let app = axum::Router::new().route(
        "/check",
        post(move |headers: HeaderMap, body: axum::body::Bytes| {
            let kind = headers
                .get("content-type")
                .map(|v| v.to_str().unwrap().to_string())
                .unwrap_or_default();
            record.lock().unwrap().push((kind, body.len()));
            async move { axum::Json(json!({"flagged": flag, "categories": {"nudity": flag}})) }
        }),
    );
    let base = backend_mocks::serve(app).await;
    (format!("{base}/check"), seen)
}

#[tokio::test]
async fn a_flagged_result_image_fails_its_task_keeps_nothing_and_refunds() {
    let (url, seen) = image_checker(true).await;
    let app = TestApp::spawn_with(|c| c.moderation.image_url = Some(url)).await;
    let (_, key) = app.account_with("images@example.com", Some(20)).await;
    let task = app.imagine_as(&key, json!({"prompt": "a beach"})).await;
    let record = app
        .wait_final_as(&key, &task, Duration::from_secs(30))
        .await;
    assert_eq!(record["status"], "failed", "{record}");
    assert_eq!(
        record["error"],
        "content policy violation: a result image was flagged by the image checker",
        "{record}"
    );
    assert!(
        record.get("image_urls").is_none_or(Value::is_null),
        "{record}"
    );
    let (_, account) = app.get_as(&key, "/api/v1/account").await;
    assert_eq!(account["credits"], 20, "refunded: {account}");
    // Nothing of the task is kept: no image, no preview.
    let kept: Vec<_> = walkdir(app.config.data_dir.as_path())
        .into_iter()
        .filter(|p| p.to_string_lossy().contains(&task))
        .collect();
    assert!(kept.is_empty(), "{kept:?}");
    let seen = seen.lock().unwrap().clone();
    assert!(!seen.is_empty() && seen.len() <= 4, "{seen:?}");
    assert!(
        seen.iter()
            .all(|(kind, len)| kind == "image/png" && *len > 0),
        "{seen:?}"
    );
}

#[tokio::test]
async fn images_the_checker_passes_are_kept_and_each_is_checked_once() {
    let (url, seen) = image_checker(false).await;
    let app = TestApp::spawn_with(|c| c.moderation.image_url = Some(url)).await;
    let task = app.imagine(json!({"prompt": "a forest"})).await;
    let record = app.wait_final(&task, Duration::from_secs(30)).await;
    assert_eq!(record["status"], "finished", "{record}");
    assert_eq!(
        seen.lock().unwrap().len(),
        4,
        "the four images, not the grid"
    );
}

#[tokio::test]
async fn checker_urls_the_destination_rules_refuse_stop_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = crate::common::test_config(dir.path());
    config.webhooks.allow_http = false;
    config.moderation.image_url = Some("http://127.0.0.1:9/check".into());
    let error = match easel::Application::build(config).await {
        Ok(_) => panic!("started with an http checker under https-only rules"),
        Err(e) => e.to_string(),
    };
    assert!(error.contains("moderation.image_url"), "{error}");
}

fn walkdir(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(dir) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                todo.push(path.clone());
            }
            found.push(path);
        }
    }
    found
}
