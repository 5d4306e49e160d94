//! Idempotency keys on submits, through the HTTP API: replays, reused keys, bad headers, errors
//! that are not stored, expiry, and duplicates in flight. On SQLite, and on PostgreSQL with
//! `EASEL_TEST_STORE=postgres` (the two-node case is in tests/load/multinode.rs).

use std::time::Duration;

use crate::common::{self, TestApp};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A submit's answer: status, whether it was a replay, body.
struct Answer {
    status: u16,
    replayed: bool,
    retry_after: Option<String>,
    body: Value,
}

impl Answer {
    fn task_id(&self) -> String {
        assert_eq!(self.status, 200, "{}", self.body);
        self.body["task_id"].as_str().unwrap().to_string()
    }

    fn code(&self) -> &str {
        self.body["errors"][0]["code"].as_str().unwrap_or_default()
    }
}

/// POST `raw` (a JSON text, sent as it is) to `path` with `api_key` and, when given, the
/// `Idempotency-Key` header as raw bytes.
async fn send(app: &TestApp, api_key: &str, path: &str, key: Option<&[u8]>, raw: &str) -> Answer {
    let mut req = app
        .http
        .post(app.url(path))
        .header("Authorization", api_key)
        .header("Content-Type", "application/json")
        .body(raw.to_string());
    if let Some(key) = key {
        req = req.header(
            "Idempotency-Key",
            reqwest::header::HeaderValue::from_bytes(key).unwrap(),
        );
    }
    let res = req.send().await.unwrap();
    let replayed = match res.headers().get("idempotent-replayed") {
        None => false,
        Some(v) => {
            assert_eq!(v, "true");
            true
        }
    };
    let retry_after = res
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    let (status, body) = common::split(res).await;
    Answer {
        status,
        replayed,
        retry_after,
        body,
    }
}

async fn imagine(app: &TestApp, key: &str, body: &Value) -> Answer {
    send(
        app,
        &app.key,
        "/api/v1/imagine",
        Some(key.as_bytes()),
        &body.to_string(),
    )
    .await
}

/// The ids of the tasks `api_key`'s account has, as the listing shows them.
async fn listed(app: &TestApp, api_key: &str) -> Vec<String> {
    let (status, page) = app.get_as(api_key, "/api/v1/tasks?limit=100").await;
    assert_eq!(status, 200, "{page}");
    page["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["task_id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn a_replayed_submit_answers_the_first_task_id_and_stores_one_task() {
    let app = TestApp::spawn().await;
    let first = send(
        &app,
        &app.key,
        "/api/v1/imagine",
        Some(b"order-1"),
        r#"{"prompt": "a lighthouse at dusk", "aspect_ratio": "2:1", "seed": 5}"#,
    )
    .await;
    let id = first.task_id();
    assert!(!first.replayed, "a first answer is not a replay");
    // The same request, its fields in another order.
    let again = send(
        &app,
        &app.key,
        "/api/v1/imagine",
        Some(b"order-1"),
        r#"{"seed": 5, "aspect_ratio": "2:1", "prompt": "a lighthouse at dusk"}"#,
    )
    .await;
    assert_eq!(again.task_id(), id);
    assert!(again.replayed, "the second answer is a replay");
    assert_eq!(again.body, first.body, "the stored body, as it was");
    assert_eq!(listed(&app, &app.key).await, vec![id]);
}

#[tokio::test]
async fn the_same_key_with_another_body_or_operation_is_refused_with_422() {
    let app = TestApp::spawn().await;
    let body = json!({"prompt": "a quiet harbour"});
    let id = imagine(&app, "k-422", &body).await.task_id();
    let other = imagine(&app, "k-422", &json!({"prompt": "a noisy harbour"})).await;
    assert_eq!(other.status, 422, "{}", other.body);
    assert_eq!(other.code(), "idempotency_key_reused");
    assert!(!other.replayed);
    let elsewhere = send(
        &app,
        &app.key,
        "/api/v1/shorten",
        Some(b"k-422"),
        &body.to_string(),
    )
    .await;
    assert_eq!(elsewhere.status, 422, "{}", elsewhere.body);
    assert_eq!(elsewhere.code(), "idempotency_key_reused");
    assert_eq!(listed(&app, &app.key).await, vec![id]);
}

#[tokio::test]
async fn the_same_key_from_another_account_makes_a_task_of_its_own() {
    let app = TestApp::spawn().await;
    let other_key = app.key_for("other@example.com").await;
    let body = json!({"prompt": "two towers"}).to_string();
    let mine = send(&app, &app.key, "/api/v1/imagine", Some(b"shared"), &body).await;
    let theirs = send(&app, &other_key, "/api/v1/imagine", Some(b"shared"), &body).await;
    assert!(!mine.replayed && !theirs.replayed);
    assert_ne!(mine.task_id(), theirs.task_id());
    assert_eq!(listed(&app, &app.key).await, vec![mine.task_id()]);
    assert_eq!(listed(&app, &other_key).await, vec![theirs.task_id()]);
}

#[tokio::test]
async fn a_malformed_idempotency_key_is_refused_with_400_and_stores_nothing() {
    let app = TestApp::spawn().await;
    let body = json!({"prompt": "a field of poppies"}).to_string();
    let revoked = app.key_for("gone@example.com").await;
    for key in app.store.list_api_keys().await.unwrap() {
        if key.account_email == "gone@example.com" {
            assert!(app.store.revoke_api_key(&key.id).await.unwrap());
        }
    }
    let long = "k".repeat(256);
    for bad in [
        b"".as_slice(),
        long.as_bytes(),
        b"tab\there",
        "caf\u{e9}".as_bytes(),
    ] {
        let refused = send(&app, &app.key, "/api/v1/imagine", Some(bad), &body).await;
        assert_eq!(refused.status, 400, "{}", refused.body);
        assert_eq!(refused.code(), "invalid_value");
        let msg = refused.body["errors"][0]["msg"].as_str().unwrap();
        assert!(msg.starts_with("Idempotency-Key: "), "{msg}");
        // Authentication comes first: a key that is not live learns nothing more.
        let stranger = send(&app, &revoked, "/api/v1/imagine", Some(bad), &body).await;
        assert_eq!((stranger.status, stranger.body), (401, json!({})));
    }
    let longest = "k".repeat(255);
    let taken = send(
        &app,
        &app.key,
        "/api/v1/imagine",
        Some(longest.as_bytes()),
        &body,
    )
    .await;
    assert_eq!(listed(&app, &app.key).await, vec![taken.task_id()]);
}

#[tokio::test]
async fn an_error_is_not_stored_so_the_retry_runs_again() {
    let app = TestApp::spawn().await;
    // A 400 is answered afresh each time, and the key stays free for a request that is right.
    for _ in 0..2 {
        let refused = imagine(&app, "k-400", &json!({"prompt": ""})).await;
        assert_eq!(refused.status, 400, "{}", refused.body);
        assert!(!refused.replayed);
    }
    let fixed = imagine(&app, "k-400", &json!({"prompt": "a fixed prompt"})).await;
    assert!(!fixed.replayed);
    fixed.task_id();

    // A 402 too: once the account has credits, the same request runs.
    let account = app.store.first_account().await.unwrap().unwrap().id;
    assert!(app.store.set_credits(&account, Some(0)).await.unwrap());
    let body = json!({"prompt": "paid for later"});
    let short = imagine(&app, "k-402", &body).await;
    assert_eq!(short.status, 402, "{}", short.body);
    assert!(app.store.set_credits(&account, Some(100)).await.unwrap());
    let paid = imagine(&app, "k-402", &body).await;
    assert!(!paid.replayed, "the 402 was not stored");
    let id = paid.task_id();
    let again = imagine(&app, "k-402", &body).await;
    assert!(again.replayed);
    assert_eq!(again.task_id(), id);
    assert_eq!(listed(&app, &app.key).await.len(), 2);
}

#[tokio::test]
async fn a_key_sent_again_after_it_expired_makes_a_new_task() {
    let app = TestApp::spawn().await;
    let body = json!({"prompt": "the same again, a day later"});
    let first = imagine(&app, "k-expiry", &body).await.task_id();
    assert!(imagine(&app, "k-expiry", &body).await.replayed);
    // A day passes, as the store sees it.
    let mut db = common::database(&app.config).await;
    sqlx::query("UPDATE idempotency_keys SET expires_at = 1")
        .execute(&mut db)
        .await
        .unwrap();
    let later = imagine(&app, "k-expiry", &body).await;
    assert!(!later.replayed, "an expired answer is not replayed");
    let second = later.task_id();
    assert_ne!(second, first);
    // The new answer is the key's now; another body is refused again.
    let again = imagine(&app, "k-expiry", &body).await;
    assert!(again.replayed);
    assert_eq!(again.task_id(), second);
    let other = imagine(&app, "k-expiry", &json!({"prompt": "else"})).await;
    assert_eq!(other.status, 422, "{}", other.body);
    let mut ids = listed(&app, &app.key).await;
    ids.sort();
    let mut want = vec![first, second];
    want.sort();
    assert_eq!(ids, want);
}

/// Send a submit's headers and the first part of its body, and leave the rest for later.
async fn start_slow_submit(app: &TestApp, key: &str, body: &str) -> tokio::net::TcpStream {
    let addr = app.base.strip_prefix("http://").unwrap();
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /api/v1/imagine HTTP/1.1\r\nHost: {addr}\r\nAuthorization: {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nIdempotency-Key: {key}\r\n\
         Connection: close\r\n\r\n",
        app.key,
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream
        .write_all(&body.as_bytes()[..body.len() / 2])
        .await
        .unwrap();
    stream.flush().await.unwrap();
    stream
}

/// A slow submit with `key` that this node has begun to handle (it holds its key while the rest
/// of its body is awaited). Found with probes that cannot be stored (an empty body): a 400
/// before the slow one holds the key, a 409 after. A probe holds the key for a moment too, and
/// a slow submit that arrives in that moment is refused; it is then started again with a new
/// key. Returns the key and the slow submit's connection.
async fn held_slow_submit(app: &TestApp, body: &str) -> (String, tokio::net::TcpStream) {
    for attempt in 0..5 {
        let key = format!("k-slow-{attempt}");
        let slow = start_slow_submit(app, &key, body).await;
        let held = common::wait_for(Duration::from_secs(10), || async {
            let probe = send(app, &app.key, "/api/v1/imagine", Some(key.as_bytes()), "{}").await;
            if probe.status == 409 {
                return Some(true);
            }
            assert_eq!(probe.status, 400, "{}", probe.body);
            // Answered already: refused because a probe held the key.
            let mut peek = [0u8; 1];
            match slow.try_read(&mut peek) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => None,
                _ => Some(false),
            }
        })
        .await
        .expect("the slow submit is handled or answered");
        if held {
            return (key, slow);
        }
    }
    panic!("the slow submit never held its key");
}

#[tokio::test]
async fn a_duplicate_while_the_first_is_in_flight_is_409_and_may_be_retried() {
    let app = TestApp::spawn().await;
    let body = json!({"prompt": "a slow upload of a long prompt"}).to_string();
    let (key, mut first) = held_slow_submit(&app, &body).await;
    let duplicate = send(
        &app,
        &app.key,
        "/api/v1/imagine",
        Some(key.as_bytes()),
        &body,
    )
    .await;
    assert_eq!(duplicate.status, 409, "{}", duplicate.body);
    assert_eq!(duplicate.code(), "idempotency_key_in_use");
    assert_eq!(duplicate.retry_after.as_deref(), Some("1"));

    // The first finishes its upload and is answered.
    first
        .write_all(&body.as_bytes()[body.len() / 2..])
        .await
        .unwrap();
    let mut raw = String::new();
    first.read_to_string(&mut raw).await.unwrap();
    assert!(raw.starts_with("HTTP/1.1 200"), "{raw}");
    let answer: Value = serde_json::from_str(raw.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    let id = answer["task_id"].as_str().unwrap().to_string();

    let retried = send(
        &app,
        &app.key,
        "/api/v1/imagine",
        Some(key.as_bytes()),
        &body,
    )
    .await;
    assert!(retried.replayed);
    assert_eq!(retried.task_id(), id);
    assert_eq!(listed(&app, &app.key).await, vec![id]);
}

#[tokio::test]
async fn a_slow_submit_that_is_abandoned_lets_its_key_go() {
    let app = TestApp::spawn().await;
    let body = json!({"prompt": "never finished"}).to_string();
    let (key, first) = held_slow_submit(&app, &body).await;
    drop(first);
    let retried = common::wait_for(Duration::from_secs(10), || async {
        let a = send(
            &app,
            &app.key,
            "/api/v1/imagine",
            Some(key.as_bytes()),
            &body,
        )
        .await;
        (a.status != 409).then_some(a)
    })
    .await
    .expect("the key is let go once the connection is gone");
    assert!(!retried.replayed, "the abandoned request stored nothing");
    assert_eq!(listed(&app, &app.key).await, vec![retried.task_id()]);
}

#[tokio::test]
async fn concurrent_identical_submits_with_one_key_store_exactly_one_task() {
    let app = TestApp::spawn().await;
    let body = json!({"prompt": "everyone at once"}).to_string();
    let answers = futures::future::join_all(
        (0..16).map(|_| send(&app, &app.key, "/api/v1/imagine", Some(b"k-crowd"), &body)),
    )
    .await;
    let mut firsts = Vec::new();
    let mut ids = std::collections::HashSet::new();
    for a in &answers {
        match a.status {
            200 => {
                ids.insert(a.task_id());
                if !a.replayed {
                    firsts.push(a.task_id());
                }
            }
            409 => assert_eq!(a.code(), "idempotency_key_in_use"),
            other => panic!("unexpected {other}: {}", a.body),
        }
    }
    assert_eq!(firsts.len(), 1, "exactly one answer is not a replay");
    assert!(ids.len() == 1, "every 200 names the one task: {ids:?}");
    assert_eq!(listed(&app, &app.key).await, firsts);
    // Retried, each 409 gets the one task.
    let again = send(&app, &app.key, "/api/v1/imagine", Some(b"k-crowd"), &body).await;
    assert!(again.replayed);
    assert_eq!(again.task_id(), firsts[0]);
}
