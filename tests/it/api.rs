//! The HTTP contract: authentication, validation, error shapes, limits, tenant isolation.

use crate::common::{self, split, TestApp};
use serde_json::{json, Value};

const IMAGINE: &str = "/api/v1/imagine";

fn error_code(body: &Value) -> &str {
    body["errors"][0]["code"].as_str().unwrap_or("")
}

fn error_msg(body: &Value) -> &str {
    body["errors"][0]["msg"].as_str().unwrap_or("")
}

#[tokio::test]
async fn unauthenticated_requests_get_401_with_an_empty_object() {
    let app = TestApp::spawn().await;
    let revoked = app.key_for("revoked@example.com").await;
    let keys = app.store.list_api_keys().await.unwrap();
    let id = &keys
        .iter()
        .find(|k| k.account_email == "revoked@example.com")
        .unwrap()
        .id;
    assert!(app.store.revoke_api_key(id).await.unwrap());

    let bearer = format!("Bearer {}", app.key);
    let unknown = format!("easel_{}", "A".repeat(32));
    for key in [
        None,
        Some(""),
        Some(bearer.as_str()),
        Some("not-a-key"),
        Some(unknown.as_str()),
        Some(revoked.as_str()),
    ] {
        for (method, path, body) in [
            ("POST", IMAGINE, json!({"prompt": "a cat"})),
            ("POST", IMAGINE, json!({"prompt": ""})),
            ("POST", "/api/v1/fetch", json!({"task_id": "nope"})),
            ("POST", "/api/v1/fetch-many", json!({"task_ids": []})),
            ("GET", "/api/v1/account", Value::Null),
            (
                "GET",
                "/api/v1/tasks/00000000-0000-4000-8000-000000000000",
                Value::Null,
            ),
        ] {
            let mut req = if method == "POST" {
                app.http.post(app.url(path)).json(&body)
            } else {
                app.http.get(app.url(path))
            };
            if let Some(k) = key {
                req = req.header("Authorization", k);
            }
            let (status, body) = split(req.send().await.unwrap()).await;
            assert_eq!(status, 401, "{method} {path} with {key:?}");
            assert_eq!(body, json!({}), "{method} {path} with {key:?}");
        }
    }
    // A revoked key is refused at once, and a live one still works.
    let (status, _) = app.get("/api/v1/account").await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn a_key_revoked_after_use_is_refused_at_once_by_submits_and_reads() {
    let app = TestApp::spawn_with(|c| c.worker.workers = 0).await;
    let key = app.key_for("soon-revoked@example.com").await;
    // Used first: submits and reads check the key in the statement that does their work.
    let (status, body) = app
        .post_as(&key, IMAGINE, &json!({"prompt": "before"}))
        .await;
    assert_eq!(status, 200, "{body}");
    let keys = app.store.list_api_keys().await.unwrap();
    let id = &keys
        .iter()
        .find(|k| k.account_email == "soon-revoked@example.com")
        .unwrap()
        .id;
    // Revoked behind the server's back, as `easel keys revoke` in another process does.
    assert!(app.store.revoke_api_key(id).await.unwrap());

    // Valid or not, every submit with it is a 401 first, in one batch with live submits or not.
    let results = futures::future::join_all((0..20).map(|i| {
        let app = &app;
        let key = if i % 2 == 0 {
            key.as_str()
        } else {
            app.key.as_str()
        };
        let body = match i % 4 {
            0 => json!({"prompt": ""}),
            _ => json!({"prompt": format!("after {i}")}),
        };
        async move { (i, app.post_as(key, IMAGINE, &body).await) }
    }))
    .await;
    for (i, (status, body)) in results {
        match i % 4 {
            0 | 2 => assert_eq!((status, body), (401, json!({})), "revoked key, submit {i}"),
            1 | 3 => assert_eq!(status, 200, "live key, submit {i}: {body}"),
            _ => unreachable!(),
        }
    }
    let res = app
        .http
        .post(app.url(IMAGINE))
        .header("Authorization", &key)
        .header("Content-Type", "text/plain")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(split(res).await, (401, json!({})));
    // Its own task is out of its reach too, by every read.
    let before = body["task_id"].as_str().unwrap().to_string();
    for (status, body) in [
        app.post_as(&key, "/api/v1/fetch", &json!({ "task_id": before }))
            .await,
        app.post_as(&key, "/api/v1/fetch-many", &json!({ "task_ids": [before] }))
            .await,
        app.get_as(&key, &format!("/api/v1/tasks/{before}")).await,
    ] {
        assert_eq!((status, body), (401, json!({})));
    }
    // Nothing was stored for the revoked key: the task from before and the 10 live ones.
    let stored = app.stored_tasks().await;
    assert_eq!(stored, 11);
}

#[tokio::test]
async fn authentication_comes_before_body_checks() {
    let app = TestApp::spawn().await;
    let res = app
        .http
        .post(app.url(IMAGINE))
        .header("Authorization", "Bearer x")
        .header("Content-Type", "text/plain")
        .body("{not json")
        .send()
        .await
        .unwrap();
    let (status, body) = split(res).await;
    assert_eq!((status, body), (401, json!({})));
}

#[tokio::test]
async fn imagine_accepts_a_valid_task_and_fetch_returns_its_record() {
    let app = TestApp::spawn().await;
    let (status, body) = app
        .post(
            IMAGINE,
            &json!({"prompt": "  a red fox in the snow  ", "aspect_ratio": "16:9",
                    "process_mode": "turbo", "unknown_field": [1, 2]}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let id = body["task_id"].as_str().unwrap();
    let parsed = uuid::Uuid::parse_str(id).unwrap();
    assert_eq!(parsed.get_version_num(), 4);
    assert_eq!(body.as_object().unwrap().len(), 1, "only task_id: {body}");

    let record = app.fetch(id).await;
    assert_eq!(record["task_id"], id);
    assert_eq!(record["task_type"], "imagine");
    assert_eq!(record["prompt"], "a red fox in the snow");
    assert_eq!(record["aspect_ratio"], "16:9");
    assert_eq!(record["process_mode"], "turbo");
    assert!(record["percentage"].as_str().unwrap().parse::<u8>().is_ok());
    assert!(chrono::DateTime::parse_from_rfc3339(record["created_at"].as_str().unwrap()).is_ok());
    assert!(record.get("webhook").is_none());

    let (status, same) = app.get(&format!("/api/v1/tasks/{id}")).await;
    assert_eq!(status, 200);
    assert_eq!(same["task_id"], id);
    assert_eq!(same["prompt"], record["prompt"]);

    // Defaults.
    let id = app.imagine(json!({"prompt": "defaults"})).await;
    let record = app.fetch(&id).await;
    assert_eq!(record["aspect_ratio"], "1:1");
    assert_eq!(record["process_mode"], "fast");
}

#[tokio::test]
async fn invalid_bodies_get_400_naming_the_field() {
    let app = TestApp::spawn().await;
    let long = "x".repeat(4001);
    let long_url = format!("https://example.com/{}", "a".repeat(2040));
    let long_secret = "s".repeat(257);
    let cases: Vec<(Value, &str, &str)> = vec![
        (json!({}), "prompt: ", "missing_field"),
        (json!({"prompt": null}), "prompt: ", "missing_field"),
        (json!({"prompt": 5}), "prompt: ", "invalid_type"),
        (json!({"prompt": "   "}), "prompt: ", "invalid_value"),
        (json!({"prompt": long}), "prompt: ", "invalid_value"),
        (json!({"prompt": "bell\u{7}"}), "prompt: ", "invalid_value"),
        // An override makes "tac" show as "cat" while the model reads "tac"; isolates likewise.
        (
            json!({"prompt": "a \u{202E}tac"}),
            "prompt: ",
            "invalid_value",
        ),
        (
            json!({"prompt": "a \u{2067}cat\u{2069}"}),
            "prompt: ",
            "invalid_value",
        ),
        (
            json!({"prompt": "a", "aspect_ratio": "5:1"}),
            "aspect_ratio: ",
            "invalid_value",
        ),
        (
            json!({"prompt": "a", "aspect_ratio": "wide"}),
            "aspect_ratio: ",
            "invalid_value",
        ),
        (
            json!({"prompt": "a", "aspect_ratio": 1}),
            "aspect_ratio: ",
            "invalid_type",
        ),
        (
            json!({"prompt": "a", "process_mode": "slow"}),
            "process_mode: ",
            "invalid_value",
        ),
        (
            json!({"prompt": "a", "webhook_url": "ftp://x.example"}),
            "webhook_url: ",
            "invalid_value",
        ),
        (
            json!({"prompt": "a", "webhook_url": "not a url"}),
            "webhook_url: ",
            "invalid_value",
        ),
        (
            json!({"prompt": "a", "webhook_url": long_url}),
            "webhook_url: ",
            "invalid_value",
        ),
        (
            json!({"prompt": "a", "webhook_url": "https://u:p@example.com/"}),
            "webhook_url: ",
            "invalid_value",
        ),
        (
            json!({"prompt": "a", "webhook_secret": long_secret}),
            "webhook_secret: ",
            "invalid_value",
        ),
        (
            json!({"prompt": "a", "webhook_secret": "line\nbreak"}),
            "webhook_secret: ",
            "invalid_value",
        ),
        (json!([1, 2]), "body: ", "invalid_json"),
        (json!("prompt"), "body: ", "invalid_json"),
    ];
    for (body, prefix, code) in cases {
        let (status, err) = app.post(IMAGINE, &body).await;
        assert_eq!(status, 400, "{body} -> {err}");
        assert!(error_msg(&err).starts_with(prefix), "{body} -> {err}");
        assert_eq!(error_code(&err), code, "{body} -> {err}");
        assert_eq!(err["errors"].as_array().unwrap().len(), 1);
    }
    // Not JSON at all.
    let res = app
        .http
        .post(app.url(IMAGINE))
        .header("Authorization", &app.key)
        .header("Content-Type", "application/json")
        .body("{\"prompt\": ")
        .send()
        .await
        .unwrap();
    let (status, err) = split(res).await;
    assert_eq!(status, 400);
    assert_eq!(error_code(&err), "invalid_json");
    // A key twice has no one meaning (serde_json keeps the last, other readers the first): 400
    // naming it, at any depth.
    for (raw, named) in [
        (r#"{"prompt": "a nsfw cat", "prompt": "a cat"}"#, "prompt: "),
        (
            r#"{"prompt": "a cat", "metadata": {"a": 1, "a": 2}}"#,
            "metadata.a: ",
        ),
    ] {
        let res = app
            .http
            .post(app.url(IMAGINE))
            .header("Authorization", &app.key)
            .header("Content-Type", "application/json")
            .body(raw)
            .send()
            .await
            .unwrap();
        let (status, err) = split(res).await;
        assert_eq!(status, 400, "{raw} -> {err}");
        assert_eq!(error_code(&err), "invalid_json", "{raw} -> {err}");
        assert!(error_msg(&err).starts_with(named), "{raw} -> {err}");
    }
    // Nothing was stored by any of these.
    let counts = app.store.task_counts().await.unwrap();
    assert!(counts.is_empty(), "{counts:?}");
    // Right-to-left scripts need no bidirectional controls; marks that do not reorder are kept.
    let (status, record) = app
        .post(
            IMAGINE,
            &json!({"prompt": "\u{5D7}\u{5EA}\u{5D5}\u{5DC} \u{200F}cat"}),
        )
        .await;
    assert_eq!(status, 200, "{record}");
}

#[tokio::test]
async fn webhook_urls_to_private_or_plain_http_destinations_are_refused_by_default() {
    let app = TestApp::spawn_with(|c| {
        c.webhooks.allow_http = false;
        c.webhooks.allow_private = false;
    })
    .await;
    for url in [
        "http://example.com/hook",
        "https://127.0.0.1/hook",
        "https://10.1.2.3/hook",
        "https://[::1]/hook",
        "https://169.254.169.254/latest",
        "https://localhost/hook",
    ] {
        let (status, err) = app
            .post(IMAGINE, &json!({"prompt": "a", "webhook_url": url}))
            .await;
        assert_eq!(status, 400, "{url}: {err}");
        assert!(error_msg(&err).starts_with("webhook_url: "), "{err}");
    }
    let id = app
        .imagine(json!({"prompt": "a", "webhook_url": "https://hooks.example.com/x", "webhook_secret": "s3cret"}))
        .await;
    let record = app.fetch(&id).await;
    assert_eq!(record["webhook"]["url"], "https://hooks.example.com/x");
    assert_eq!(record["webhook"]["status"], "pending");
    assert!(!record.to_string().contains("s3cret"), "never the secret");
}

#[tokio::test]
async fn media_type_size_and_routing_errors() {
    let app = TestApp::spawn().await;
    // 415 without application/json.
    let res = app
        .http
        .post(app.url(IMAGINE))
        .header("Authorization", &app.key)
        .header("Content-Type", "text/plain")
        .body(r#"{"prompt":"a"}"#)
        .send()
        .await
        .unwrap();
    let (status, err) = split(res).await;
    assert_eq!((status, error_code(&err)), (415, "unsupported_media_type"));
    let res = app
        .http
        .post(app.url(IMAGINE))
        .header("Authorization", &app.key)
        .body(r#"{"prompt":"a"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(split(res).await.0, 415);
    // With a charset it is still JSON.
    let res = app
        .http
        .post(app.url(IMAGINE))
        .header("Authorization", &app.key)
        .header("Content-Type", "application/json; charset=utf-8")
        .body(r#"{"prompt":"a"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(split(res).await.0, 200);

    // 413 over 64 KiB.
    let big = json!({"prompt": "a", "padding": "x".repeat(70 * 1024)});
    let (status, err) = app.post(IMAGINE, &big).await;
    assert_eq!((status, error_code(&err)), (413, "payload_too_large"));
    // Just under the limit is fine (unknown fields are ignored).
    let fits = json!({"prompt": "a", "padding": "x".repeat(60 * 1024)});
    assert_eq!(app.post(IMAGINE, &fits).await.0, 200);

    // Unknown routes and methods answer in the error shape.
    let (status, err) = app.get("/api/v1/nothing-here").await;
    assert_eq!((status, error_code(&err)), (404, "route_not_found"));
    let (status, err) = app.get(IMAGINE).await;
    assert_eq!((status, error_code(&err)), (405, "method_not_allowed"));
}

#[tokio::test]
async fn fetch_errors_and_fetch_many() {
    let app = TestApp::spawn().await;
    let a = app.imagine(json!({"prompt": "one"})).await;
    let b = app.imagine(json!({"prompt": "two"})).await;
    let unknown = uuid::Uuid::new_v4().to_string();

    let (status, err) = app.post("/api/v1/fetch", &json!({"task_id": "nope"})).await;
    assert_eq!((status, error_msg(&err)), (400, "task_id: must be a UUID"));
    let (status, err) = app.post("/api/v1/fetch", &json!({})).await;
    assert_eq!((status, error_code(&err)), (400, "missing_field"));
    let (status, err) = app
        .post("/api/v1/fetch", &json!({"task_id": unknown}))
        .await;
    assert_eq!((status, error_code(&err)), (404, "task_not_found"));
    let (status, _) = app.get("/api/v1/tasks/not-a-uuid").await;
    assert_eq!(status, 400);
    let (status, _) = app.get(&format!("/api/v1/tasks/{unknown}")).await;
    assert_eq!(status, 404);

    let (status, body) = app
        .post("/api/v1/fetch-many", &json!({"task_ids": [b, unknown, a]}))
        .await;
    assert_eq!(status, 200);
    let ids: Vec<&str> = body["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["task_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        vec![b.as_str(), a.as_str()],
        "order asked, unknown left out"
    );

    let too_many: Vec<String> = (0..21).map(|_| uuid::Uuid::new_v4().to_string()).collect();
    for (body, field) in [
        (json!({"task_ids": []}), "task_ids: "),
        (json!({"task_ids": too_many}), "task_ids: "),
        (json!({"task_ids": "x"}), "task_ids: "),
        (json!({"task_ids": [a, 7]}), "task_ids[1]: "),
        (json!({"task_ids": [a, "bad"]}), "task_ids[1]: "),
        (json!({}), "task_ids: "),
    ] {
        let (status, err) = app.post("/api/v1/fetch-many", &body).await;
        assert_eq!(status, 400, "{body}");
        assert!(error_msg(&err).starts_with(field), "{body} -> {err}");
    }
    let twenty: Vec<String> = (0..20).map(|_| a.clone()).collect();
    let (status, body) = app
        .post("/api/v1/fetch-many", &json!({"task_ids": twenty}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(body["tasks"].as_array().unwrap().len(), 20);
}

#[tokio::test]
async fn accounts_see_only_their_own_tasks() {
    let app = TestApp::spawn().await;
    let mine = app.imagine(json!({"prompt": "mine"})).await;
    let other = app.key_for("other@example.com").await;
    let (status, err) = app
        .post_as(&other, "/api/v1/fetch", &json!({"task_id": mine}))
        .await;
    assert_eq!((status, error_code(&err)), (404, "task_not_found"));
    let (status, _) = app.get_as(&other, &format!("/api/v1/tasks/{mine}")).await;
    assert_eq!(status, 404);
    let (status, body) = app
        .post_as(&other, "/api/v1/fetch-many", &json!({"task_ids": [mine]}))
        .await;
    assert_eq!((status, body), (200, json!({"tasks": []})));
    let (status, _) = app
        .post_as(
            &other,
            &format!("/api/v1/tasks/{mine}/redeliver"),
            &json!({}),
        )
        .await;
    assert_eq!(status, 404);

    let (status, account) = app.get_as(&other, "/api/v1/account").await;
    assert_eq!(status, 200);
    assert_eq!(account["email"], "other@example.com");
    assert_eq!(account["total_images"], 0);
    assert_eq!(account["credits"], Value::Null);
    assert!(account["plan"].is_string());
}

#[tokio::test]
async fn pending_task_quota_answers_429_with_retry_after() {
    let app = TestApp::spawn_with(|c| {
        c.plans.default_mut().max_pending = 3;
        // Keep the worker busy so tasks stay queued.
        c.worker.workers = 1;
        c.worker.procedural_min_duration = std::time::Duration::from_secs(30);
        c.server.shutdown_timeout = std::time::Duration::from_millis(100);
    })
    .await;
    for _ in 0..3 {
        app.imagine(json!({"prompt": "queued"})).await;
    }
    let res = app
        .http
        .post(app.url(IMAGINE))
        .header("Authorization", &app.key)
        .json(&json!({"prompt": "one too many"}))
        .send()
        .await
        .unwrap();
    let retry_after = res.headers().get("retry-after").cloned();
    let (status, err) = split(res).await;
    assert_eq!((status, error_code(&err)), (429, "quota_exceeded"));
    assert!(
        retry_after
            .unwrap()
            .to_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > 0
    );
    // Another account is not affected.
    let other = app.key_for("other@example.com").await;
    let (status, _) = app
        .post_as(&other, IMAGINE, &json!({"prompt": "mine"}))
        .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn health_endpoints() {
    let app = TestApp::spawn().await;
    let (status, body) = split(app.http.get(app.url("/healthz")).send().await.unwrap()).await;
    assert_eq!((status, body), (200, json!({"status": "ok"})));
    let (status, body) = split(app.http.get(app.url("/readyz")).send().await.unwrap()).await;
    assert_eq!((status, body), (200, json!({"status": "ready"})));
}

/// Whether `path` is `template` with any segment in place of a `{param}`.
fn matches_template(template: &str, path: &str) -> bool {
    let (t, p): (Vec<&str>, Vec<&str>) = (template.split('/').collect(), path.split('/').collect());
    t.len() == p.len() && t.iter().zip(&p).all(|(t, p)| t == p || t.starts_with('{'))
}

#[tokio::test]
async fn every_documented_route_is_served_and_unknown_ones_are_not() {
    let app = TestApp::spawn().await;
    let res = app
        .http
        .get(app.url("/api/v1/openapi.json"))
        .send()
        .await
        .unwrap();
    let (status, doc) = split(res).await;
    assert_eq!(status, 200);
    assert_eq!(doc["openapi"], "3.1.0");
    let mut documented = std::collections::BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("a path item").keys() {
            documented.insert((method.to_uppercase(), path.clone()));
        }
    }
    // Every documented route, and its neighbours under /api/v1 (each documented path's parent
    // with any segment the document names, by any method): routed exactly when documented. The
    // dashboard's pages are outside /api/v1, and not the document's.
    let mut words: Vec<&str> = documented
        .iter()
        .flat_map(|(_, path)| path.split('/'))
        .filter(|word| !word.is_empty())
        .collect();
    words.sort_unstable();
    words.dedup();
    let mut paths: std::collections::BTreeSet<String> =
        documented.iter().map(|(_, path)| path.clone()).collect();
    for (_, path) in &documented {
        let (parent, _) = path.rsplit_once('/').unwrap();
        if parent.starts_with("/api/v1") {
            paths.extend(words.iter().map(|word| format!("{parent}/{word}")));
        }
    }
    let id = uuid::Uuid::new_v4().to_string();
    for path in &paths {
        for method in ["GET", "POST", "PUT", "PATCH", "DELETE"] {
            let url = app.url(&path.replace("{task_id}", &id));
            let method_of = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
            let res = app
                .http
                .request(method_of, url)
                .header("Authorization", &app.key)
                .json(&json!({}))
                .send()
                .await
                .unwrap();
            // A word where a template has `{task_id}` is that route, with a bad id.
            let is_documented = documented
                .iter()
                .any(|(m, template)| m == method && matches_template(template, path));
            if res.headers().get("content-type").map(|v| v.as_bytes()) == Some(b"text/event-stream")
            {
                // An event stream (its answer does not end): routed.
                assert!(
                    is_documented,
                    "{method} {path} is routed but not documented"
                );
                continue;
            }
            let (status, body) = split(res).await;
            let code = error_code(&body);
            let routed = code != "route_not_found" && code != "method_not_allowed";
            assert_eq!(
                routed, is_documented,
                "{method} {path}: documented {is_documented}, answered {status} {body}"
            );
            assert_ne!(status, 500, "{method} {path}: {body}");
        }
    }
}

#[tokio::test]
async fn concurrent_submits_never_overshoot_the_quota() {
    let app = TestApp::spawn_with(|c| {
        c.plans.default_mut().max_pending = 10;
        c.worker.workers = 0;
        c.database.sqlite_synchronous = easel::config::SqliteSynchronous::Full;
    })
    .await;
    let results = futures::future::join_all((0..50).map(|i| {
        let app = &app;
        async move {
            app.post(IMAGINE, &json!({ "prompt": format!("racing {i}") }))
                .await
        }
    }))
    .await;
    let accepted: Vec<&Value> = results
        .iter()
        .filter(|(s, _)| *s == 200)
        .map(|(_, b)| b)
        .collect();
    let refused = results.iter().filter(|(s, _)| *s == 429).count();
    assert_eq!((accepted.len(), refused), (10, 40));
    // Every acknowledged task is stored.
    for body in accepted {
        app.fetch(body["task_id"].as_str().unwrap()).await;
    }
}

async fn last_used(app: &TestApp, email: &str) -> Option<i64> {
    app.store
        .list_api_keys()
        .await
        .unwrap()
        .into_iter()
        .find(|k| k.account_email == email)
        .unwrap()
        .last_used_at
}

#[tokio::test]
async fn submits_and_reads_record_when_a_key_was_last_used() {
    let app = TestApp::spawn_with(|c| c.worker.workers = 0).await;
    let submitter = app.key_for("submitter@example.com").await;
    let reader = app.key_for("reader@example.com").await;
    assert_eq!(last_used(&app, "submitter@example.com").await, None);
    assert_eq!(last_used(&app, "reader@example.com").await, None);

    let (status, body) = app
        .post_as(&submitter, IMAGINE, &json!({"prompt": "a key in use"}))
        .await;
    assert_eq!(status, 200, "{body}");
    // A submit records it in its own batch, before answering.
    assert!(last_used(&app, "submitter@example.com").await.is_some());

    let (status, _) = app
        .post_as(
            &reader,
            "/api/v1/fetch",
            &json!({"task_id": body["task_id"]}),
        )
        .await;
    assert_eq!(status, 404, "another account's task");
    // A read records it off the request's path.
    common::wait_for(std::time::Duration::from_secs(5), || async {
        last_used(&app, "reader@example.com").await
    })
    .await
    .expect("the read recorded the key's use");
}
