//! Issue 19's operator and client surface through real interfaces: `/metrics` scraped over HTTP
//! and read by a Prometheus text parser, the request rate limits answered over HTTP, and the
//! command-line client (the real binary) against a running server.

use std::time::Duration;

use crate::common::{self, split, TestApp};
use easel::config::{Plan, PlanRate};
use serde_json::{json, Value};

const IMAGINE: &str = "/api/v1/imagine";
const TOKEN: &str = "metrics-token-for-tests";

// ---------------------------------------------------------------------------------------------
// Metrics

/// GET `url` with an optional bearer token: (status, body).
async fn scrape_raw(app: &TestApp, url: &str, token: Option<&str>) -> (u16, String) {
    let mut req = app.http.get(url);
    if let Some(token) = token {
        req = req.header("Authorization", format!("Bearer {token}"));
    }
    let res = req.send().await.unwrap();
    (res.status().as_u16(), res.text().await.unwrap())
}

/// Scrape and parse with the Prometheus text parser.
async fn scrape(app: &TestApp, url: &str, token: Option<&str>) -> prometheus_parse::Scrape {
    let (status, text) = scrape_raw(app, url, token).await;
    assert_eq!(status, 200, "{text}");
    assert!(text.ends_with("# EOF\n"), "a complete exposition");
    prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap()
}

/// The sum of the samples named `metric` whose labels include `labels`.
fn value(scrape: &prometheus_parse::Scrape, metric: &str, labels: &[(&str, &str)]) -> f64 {
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == metric)
        .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => 0.0,
        })
        .sum()
}

fn has(scrape: &prometheus_parse::Scrape, metric: &str) -> bool {
    scrape.samples.iter().any(|s| s.metric == metric)
}

#[tokio::test]
async fn metrics_are_guarded_by_the_token_and_change_as_tasks_run() {
    let app = TestApp::spawn_with(|c| c.server.metrics_token = Some(TOKEN.into())).await;
    let url = app.url("/metrics");

    // Refused without the token, with a wrong one, and with the API key.
    assert_eq!(scrape_raw(&app, &url, None).await.0, 401);
    assert_eq!(
        scrape_raw(&app, &url, Some("metrics-token-for-testz"))
            .await
            .0,
        401
    );
    let res = app
        .http
        .get(&url)
        .header("Authorization", &app.key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 401);

    let before = scrape(&app, &url, Some(TOKEN)).await;
    let finished = [("operation", "imagine"), ("status", "finished")];
    let submits = [("route", "/api/v1/imagine"), ("status", "200")];
    let generated = [("backend", "procedural"), ("outcome", "ok")];
    let ids: Vec<String> = futures::future::join_all(
        (0..3).map(|i| app.imagine(json!({ "prompt": format!("a quiet harbour {i}") }))),
    )
    .await;
    for id in &ids {
        let t = app.wait_final(id, Duration::from_secs(30)).await;
        assert_eq!(t["status"], "finished", "{t}");
    }
    let after = scrape(&app, &url, Some(TOKEN)).await;

    // Counters are process-wide and other tests in this binary add to them: at least ours.
    let delta = |metric: &str, labels: &[(&str, &str)]| {
        value(&after, metric, labels) - value(&before, metric, labels)
    };
    assert!(delta("easel_tasks_total", &finished) >= 3.0);
    assert!(delta("easel_http_request_duration_seconds_count", &submits) >= 3.0);
    assert!(delta("easel_generation_duration_seconds_count", &generated) >= 3.0);
    assert!(delta("easel_generation_duration_seconds_sum", &generated) > 0.0);
    // Reads of the tasks are counted under the route template, not the raw path.
    assert!(
        value(
            &after,
            "easel_http_request_duration_seconds_count",
            &[("route", "/api/v1/fetch")]
        ) >= 3.0
    );
    assert!(!after
        .samples
        .iter()
        .any(|s| s.labels.get("route").is_some_and(|r| r.contains(&ids[0]))));
    // Scrape-time gauges: this app's backend and its (now empty) queue.
    assert_eq!(
        value(&after, "easel_backend_up", &[("backend", "procedural")]),
        1.0
    );
    assert_eq!(value(&after, "easel_queue_depth", &[("mode", "fast")]), 0.0);
    assert!(has(&after, "easel_queue_oldest_age_seconds"));
    // The parser groups the buckets into one histogram value per series.
    assert!(after.samples.iter().any(|s| {
        s.metric.starts_with("easel_http_request_duration_seconds")
            && matches!(&s.value, prometheus_parse::Value::Histogram(b) if b.len() > 10)
    }));
}

#[tokio::test]
async fn metrics_on_a_separate_listener_show_the_queue_and_not_on_the_main_one() {
    // No workers: submitted tasks stay queued.
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::test_config(dir.path());
    config.worker.workers = 0;
    config.server.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    let app = easel::Application::build(config).await.unwrap();
    let metrics = format!("http://{}/metrics", app.metrics_addr().unwrap());
    let base = format!("http://{}", app.local_addr());
    let key = app.first_key().unwrap().to_string();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(app.run(async {
        let _ = stopped.await;
    }));
    let http = reqwest::Client::new();

    // Not on the main listener without a token: the path is unknown there.
    let (status, body) = split(http.get(format!("{base}/metrics")).send().await.unwrap()).await;
    assert_eq!(status, 404, "{body}");

    for (mode, n) in [("relax", 2), ("turbo", 1)] {
        for i in 0..n {
            let res = http
                .post(format!("{base}{IMAGINE}"))
                .header("Authorization", &key)
                .json(&json!({ "prompt": format!("queued {i}"), "process_mode": mode }))
                .send()
                .await
                .unwrap();
            assert_eq!(res.status().as_u16(), 200);
        }
    }
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let text = http
        .get(&metrics)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap();
    assert_eq!(
        value(&scrape, "easel_queue_depth", &[("mode", "relax")]),
        2.0
    );
    assert_eq!(
        value(&scrape, "easel_queue_depth", &[("mode", "turbo")]),
        1.0
    );
    assert_eq!(
        value(&scrape, "easel_queue_depth", &[("mode", "fast")]),
        0.0
    );
    let age = value(
        &scrape,
        "easel_queue_oldest_age_seconds",
        &[("mode", "relax")],
    );
    assert!((1.0..60.0).contains(&age), "{age}");
    // The separate listener serves nothing else.
    let res = http
        .get(metrics.replace("/metrics", "/api/v1/account"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 404);

    let _ = stop.send(());
    running.await.unwrap().unwrap();
}

// ---------------------------------------------------------------------------------------------
// Rate limits

fn plan(rate: f64, burst: u32, account_burst: Option<u32>) -> Plan {
    Plan {
        rate: Some(PlanRate {
            rate,
            burst,
            account_rate: None,
            account_burst,
        }),
        ..Plan::default()
    }
}

async fn get_account(app: &TestApp, key: &str) -> (u16, reqwest::header::HeaderMap, Value) {
    let res = app
        .http
        .get(app.url("/api/v1/account"))
        .header("Authorization", key)
        .send()
        .await
        .unwrap();
    let headers = res.headers().clone();
    let (status, body) = split(res).await;
    (status, headers, body)
}

fn header<'a>(headers: &'a reqwest::header::HeaderMap, name: &str) -> &'a str {
    headers.get(name).map_or("", |v| v.to_str().unwrap())
}

#[tokio::test]
async fn a_burst_then_429_with_the_ratelimit_headers_then_recovery() {
    let app = TestApp::spawn_with(|c| {
        c.worker.workers = 0;
        c.plans
            .plans
            .insert("self-hosted".into(), plan(1.0, 3, Some(100)));
    })
    .await;
    for _ in 0..3 {
        assert_eq!(get_account(&app, &app.key).await.0, 200);
    }
    let (status, headers, body) = get_account(&app, &app.key).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["errors"][0]["code"], "rate_limited");
    assert!(
        body["errors"][0]["msg"].as_str().unwrap().contains("key"),
        "{body}"
    );
    assert_eq!(header(&headers, "retry-after"), "1");
    assert_eq!(header(&headers, "ratelimit-policy"), "\"key\";q=3;w=3");
    assert_eq!(header(&headers, "ratelimit"), "\"key\";r=0;t=1");

    // Submits (which check the key in their own statement) are limited the same way.
    let (status, body) = app.post(IMAGINE, &json!({ "prompt": "too soon" })).await;
    assert_eq!(status, 429, "{body}");

    // One period later one more request is allowed, and only one.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (status, body) = app.post(IMAGINE, &json!({ "prompt": "in time" })).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(get_account(&app, &app.key).await.0, 429);
}

#[tokio::test]
async fn keys_and_accounts_have_separate_limits() {
    // Slow refill, so that the counts below are not blurred by time passing.
    let app = TestApp::spawn_with(|c| {
        c.worker.workers = 0;
        c.plans
            .plans
            .insert("self-hosted".into(), plan(0.1, 2, Some(3)));
    })
    .await;
    let account = app.store.first_account().await.unwrap().unwrap();
    let second_key = easel::auth::create_key(app.store.as_ref(), &account.id, "second")
        .await
        .unwrap();
    let other_account = app.key_for("other@example.com").await;

    // The first key spends its own burst of 2; its third request is refused by the key's limit.
    for _ in 0..2 {
        let (status, body) = app.post(IMAGINE, &json!({ "prompt": "first key" })).await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, headers, _) = get_account(&app, &app.key).await;
    assert_eq!(status, 429);
    assert!(header(&headers, "ratelimit-policy").starts_with("\"key\""));

    // The same account's second key gets one request: the account's burst of 3 is then spent.
    assert_eq!(get_account(&app, &second_key).await.0, 200);
    let (status, headers, body) = get_account(&app, &second_key).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(header(&headers, "ratelimit-policy"), "\"account\";q=3;w=30");
    assert!(body["errors"][0]["msg"]
        .as_str()
        .unwrap()
        .contains("account"));

    // Another account is not affected.
    for _ in 0..2 {
        assert_eq!(get_account(&app, &other_account).await.0, 200);
    }
}

#[tokio::test]
async fn plans_have_their_own_limits_and_unconfigured_plans_the_default_plans() {
    let app = TestApp::spawn_with(|c| {
        c.worker.workers = 0;
        c.plans
            .plans
            .insert("self-hosted".into(), plan(0.1, 2, None));
        c.plans.plans.insert("pro".into(), plan(0.1, 6, None));
        c.plans.plans.insert("internal".into(), Plan::default());
    })
    .await;
    let pro_key = app.key_for("pro@example.com").await;
    let free_for_all = app.key_for("internal@example.com").await;
    let legacy = app.key_for("legacy@example.com").await;
    let mut db = common::database(&app.config).await;
    for (email, plan) in [
        ("pro@example.com", "pro"),
        ("internal@example.com", "internal"),
        ("legacy@example.com", "gone"),
    ] {
        sqlx::query(&format!(
            "UPDATE accounts SET plan = '{plan}' WHERE email = '{email}'"
        ))
        .execute(&mut db)
        .await
        .unwrap();
    }

    let allowed = |key: String| {
        let app = &app;
        async move {
            let mut n = 0;
            for i in 0..10 {
                let (status, body) = app
                    .post_as(&key, IMAGINE, &json!({ "prompt": format!("plan {i}") }))
                    .await;
                match status {
                    200 => n += 1,
                    429 => assert_eq!(body["errors"][0]["code"], "rate_limited"),
                    other => panic!("{other} {body}"),
                }
            }
            n
        }
    };
    assert_eq!(allowed(app.key.clone()).await, 2);
    assert_eq!(allowed(pro_key).await, 6);
    assert_eq!(
        allowed(free_for_all).await,
        10,
        "a plan without a rate is not limited"
    );
    assert_eq!(
        allowed(legacy).await,
        2,
        "an unconfigured plan has the default plan's"
    );
}

// ---------------------------------------------------------------------------------------------
// The command-line client

/// Run the real binary as a client of `app`: (success, stdout, stderr).
async fn easel(app: &TestApp, key: &str, args: &[&str]) -> (bool, String, String) {
    let out = tokio::process::Command::new(common::binary::BIN)
        .args(args)
        .env("EASEL_URL", &app.base)
        .env("EASEL_API_KEY", key)
        .env_remove("EASEL_CONFIG")
        .output()
        .await
        .unwrap();
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[tokio::test]
async fn the_cli_imagines_waits_downloads_and_upscales() {
    let app = TestApp::spawn().await;
    let (ok, out, err) = easel(
        &app,
        &app.key,
        &[
            "imagine",
            "a red kite over dunes",
            "--ar",
            "16:9",
            "--wait",
            "--json",
        ],
    )
    .await;
    assert!(ok, "{err}");
    let record: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(record["status"], "finished", "{record}");
    assert_eq!(record["aspect_ratio"], "16:9");
    assert_eq!(record["image_urls"].as_array().unwrap().len(), 4);
    let id = record["task_id"].as_str().unwrap();

    // Without --json: the grid's URL and the four images'.
    let (ok, out, err) = easel(&app, &app.key, &["fetch", id]).await;
    assert!(ok, "{err}");
    let urls: Vec<&str> = out.lines().collect();
    assert_eq!(urls.len(), 5, "{out}");
    assert_eq!(urls[0], record["original_image_url"].as_str().unwrap());

    // --output downloads the five images.
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("images");
    let (ok, _, err) = easel(
        &app,
        &app.key,
        &[
            "imagine",
            "a lighthouse at dusk",
            "--output",
            target.to_str().unwrap(),
        ],
    )
    .await;
    assert!(ok, "{err}");
    let files: Vec<_> = std::fs::read_dir(&target).unwrap().collect();
    assert_eq!(files.len(), 5);
    for file in files {
        let bytes = std::fs::read(file.unwrap().path()).unwrap();
        assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"));
    }

    // Upscale image 2 of the finished grid.
    let (ok, out, err) = easel(&app, &app.key, &["upscale", id, "2", "--wait", "--json"]).await;
    assert!(ok, "{err}");
    let upscaled: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(upscaled["status"], "finished", "{upscaled}");
    assert_eq!(upscaled["task_type"], "upscale-1x");
    assert_eq!(upscaled["parent_task_id"], id);
    assert!(upscaled["image_url"].is_string());
}

#[tokio::test]
async fn the_cli_uploads_a_file_and_prints_the_answer() {
    let app = TestApp::spawn_with(|c| c.worker.workers = 0).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("kite.gif");
    let mut gif = std::io::Cursor::new(Vec::new());
    image::DynamicImage::ImageRgba8(image::RgbaImage::from_pixel(
        9,
        7,
        image::Rgba([0, 90, 200, 255]),
    ))
    .write_to(&mut gif, image::ImageFormat::Gif)
    .unwrap();
    std::fs::write(&file, gif.get_ref()).unwrap();
    let (ok, out, err) = easel(&app, &app.key, &["upload", file.to_str().unwrap()]).await;
    assert!(ok, "{err}");
    let answer: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(answer["content_type"], "image/gif");
    assert_eq!(
        (answer["width"].clone(), answer["height"].clone()),
        (json!(9), json!(7))
    );
    assert_eq!(answer["url"], answer["imageURL"]);
    let served = app
        .http
        .get(answer["url"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(served.bytes().await.unwrap().to_vec(), gif.into_inner());
    // Not an image: the API's words.
    std::fs::write(&file, b"not an image").unwrap();
    let (ok, _, err) = easel(&app, &app.key, &["upload", file.to_str().unwrap()]).await;
    assert!(!ok);
    assert!(
        err.contains("image: not a PNG, JPEG, WebP or GIF image (invalid_image)"),
        "{err}"
    );
}

#[tokio::test]
async fn the_cli_fails_clearly_with_the_apis_message() {
    let app = TestApp::spawn_with(|c| c.worker.workers = 0).await;
    let bad = format!("easel_{}", "A".repeat(32));
    let (ok, out, err) = easel(&app, &bad, &["imagine", "anything"]).await;
    assert!(!ok);
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains("401") && err.contains("EASEL_API_KEY"),
        "{err}"
    );

    // An upscale of a task that does not exist: the API's error message and code are shown.
    let missing = uuid::Uuid::new_v4().to_string();
    let (ok, _, err) = easel(&app, &app.key, &["upscale", &missing, "2"]).await;
    assert!(!ok);
    let (status, body) = app
        .post(
            "/api/v1/upscale-1x",
            &json!({ "parent_task_id": missing, "index": 2 }),
        )
        .await;
    let msg = body["errors"][0]["msg"].as_str().unwrap();
    assert!(
        err.contains(msg) && err.contains(&status.to_string()),
        "{err} vs {body}"
    );

    // A bad prompt: 400 and its message.
    let (ok, _, err) = easel(&app, &app.key, &["imagine", ""]).await;
    assert!(!ok);
    assert!(err.contains("400") && err.contains("prompt"), "{err}");
}

#[tokio::test]
async fn the_cli_lists_the_accounts_tasks_and_cancels_one() {
    let app = TestApp::spawn_with(|c| c.worker.workers = 0).await;
    let first = app.imagine(json!({"prompt": "the first kite"})).await;
    let second = app.imagine(json!({"prompt": "the second kite"})).await;
    // Another account's task is not listed.
    let other = app.key_for("elsewhere@example.com").await;
    app.imagine_as(&other, json!({"prompt": "not mine"})).await;

    let (ok, out, err) = easel(&app, &app.key, &["tasks"]).await;
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    // Newest first: id, type, status, percentage, prompt.
    assert!(lines[0].starts_with(&second), "{out}");
    assert!(lines[1].starts_with(&first), "{out}");
    for line in &lines {
        assert!(
            line.contains("imagine") && line.contains("pending"),
            "{line}"
        );
    }
    assert!(lines[0].ends_with("the second kite"), "{out}");

    let (ok, out, err) = easel(&app, &app.key, &["cancel", &first]).await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), format!("{first} canceled"));
    let (ok, out, err) = easel(&app, &app.key, &["tasks", "--json"]).await;
    assert!(ok, "{err}");
    let listed: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(listed["tasks"][1]["task_id"], first.as_str());
    assert_eq!(listed["tasks"][1]["status"], "canceled");
    assert_eq!(listed["tasks"][0]["status"], "pending");

    // Canceling it again shows the API's refusal.
    let (ok, _, err) = easel(&app, &app.key, &["cancel", &first]).await;
    assert!(!ok);
    assert!(
        err.contains("409") && err.contains("task_already_ended"),
        "{err}"
    );
}
