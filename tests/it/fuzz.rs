//! Property-based fuzzing of everything the API parses: bodies (any JSON, or any bytes), the
//! content type, the key, and path segments. Whatever comes in, the answer is a status from the
//! contract with a JSON body: never a 500, never a panic, never a dropped connection.

use std::sync::OnceLock;

use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use serde_json::{Map, Value};

use crate::common::TestApp;

struct Shared {
    runtime: tokio::runtime::Runtime,
    app: TestApp,
    /// A client that opens a connection per request: with the pooled one, a request now and then
    /// went out on a connection the server had just closed (`IncompleteMessage`, twice in four
    /// full runs on 2026-11-27). One way that happened is fixed since: an answer given before its
    /// body was read did not say `Connection: close` (`limits::an_answer_given_before_its_body_
    /// is_read_says_the_connection_closes`). Whether it was the only one is not known; these
    /// tests look for the answers the server gives, not for connection reuse.
    fresh: reqwest::Client,
}

fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let app = runtime.block_on(TestApp::spawn_with(|c| {
            c.worker.image_size = 64;
            c.plans.default_mut().max_pending = 100_000;
        }));
        let fresh = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .unwrap();
        Shared {
            runtime,
            app,
            fresh,
        }
    })
}

const FIELDS: &[&str] = &[
    "prompt",
    "aspect_ratio",
    "process_mode",
    "webhook_url",
    "webhook_secret",
    "task_id",
    "task_ids",
];

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[a-z ]{0,40}",
        Just(String::new()),
        Just("1:1".to_string()),
        Just("16:9".to_string()),
        Just("turbo".to_string()),
        Just("https://example.com/hook".to_string()),
        Just("http://127.0.0.1/x".to_string()),
        Just(uuid::Uuid::new_v4().to_string()),
        "[0-9]{1,7}:[0-9]{1,7}",
        ".{3990,4010}",
    ]
}

/// Prompts made of Midjourney's words: parameters of every kind (today's included), values in
/// and out of range, `::` weights, URLs, braces, and plain words, in any order.
fn midjourney_prompt() -> impl Strategy<Value = String> {
    const WORDS: &[&str] = &[
        "a",
        "red",
        "fox",
        "--ar",
        "16:9",
        "--no",
        "--seed",
        "42",
        "--chaos",
        "101",
        "--tile",
        "--sref",
        "--sw",
        "--sv",
        "--cref",
        "--cw",
        "--oref",
        "--ow",
        "--p",
        "--personalize",
        "--stop",
        "--draft",
        "--exp",
        "--raw",
        "--fast",
        "--relax",
        "--turbo",
        "--repeat",
        "--r",
        "--video",
        "--motion",
        "--loop",
        "--end",
        "random",
        "123",
        "0",
        "5",
        "1000",
        "-1",
        ".5",
        "::",
        "::2",
        "::-0.5",
        "a::3",
        "b::-",
        "::x",
        "{red,",
        "blue}",
        "\\{",
        "}",
        "\u{2014}ar",
        "https://x.example/a.png",
        "data:image/png;base64,AA==",
        "http://[::1]/a.png",
        "--",
        "--STOP",
        "--foo",
    ];
    prop::collection::vec(prop::sample::select(WORDS), 0..14).prop_map(|w| w.join(" "))
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..25).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(FIELDS), inner), 0..6).prop_map(|pairs| {
                let map: Map<String, Value> =
                    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
                Value::Object(map)
            }),
        ]
    })
}

/// A body: mostly objects with the real field names, sometimes any JSON, sometimes any bytes.
fn body() -> impl Strategy<Value = Vec<u8>> {
    let object = prop::collection::vec((prop::sample::select(FIELDS), json_value()), 0..6)
        .prop_map(|pairs| {
            let map: Map<String, Value> =
                pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
            serde_json::to_vec(&Value::Object(map)).unwrap()
        });
    prop_oneof![
        6 => object,
        2 => json_value().prop_map(|v| serde_json::to_vec(&v).unwrap()),
        1 => prop::collection::vec(any::<u8>(), 0..300),
    ]
}

#[derive(Clone, Debug)]
enum Key {
    Valid,
    Missing,
    Bearer,
    Other(String),
}

fn key() -> impl Strategy<Value = Key> {
    prop_oneof![
        6 => Just(Key::Valid),
        1 => Just(Key::Missing),
        1 => Just(Key::Bearer),
        1 => "[ -~]{0,60}".prop_map(Key::Other),
    ]
}

fn content_type() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        6 => Just(Some("application/json".to_string())),
        1 => Just(Some("application/json; charset=utf-8".to_string())),
        1 => Just(None),
        1 => "[ -~]{0,40}".prop_map(Some),
    ]
}

fn post_path() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("/api/v1/imagine".to_string()),
        Just("/api/v1/fetch".to_string()),
        Just("/api/v1/fetch-many".to_string()),
        segment().prop_map(|s| format!("/api/v1/tasks/{s}/redeliver")),
    ]
}

fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(uuid::Uuid::new_v4().to_string()),
        "[A-Za-z0-9%._~-]{0,80}",
    ]
}

const CONTRACT_STATUSES: &[u16] = &[200, 202, 400, 401, 404, 405, 409, 413, 415, 429];

fn check(status: u16, content_type: Option<&str>, text: &str, key: &Key) {
    assert!(
        CONTRACT_STATUSES.contains(&status),
        "status {status} is not in the contract: {text}"
    );
    assert_eq!(content_type, Some("application/json"), "{status} {text}");
    let body: Value = serde_json::from_str(text).expect("the body is JSON");
    if !matches!(key, Key::Valid) && status != 404 && status != 405 {
        assert_eq!((status, &body), (401, &Value::Object(Map::new())));
    }
    if status >= 400 && status != 401 {
        assert!(body["errors"][0]["msg"].is_string(), "{body}");
        assert!(body["errors"][0]["code"].is_string(), "{body}");
    }
}

async fn send(req: reqwest::RequestBuilder, key: &Key) -> (u16, Option<String>, String) {
    let app = &shared().app;
    let req = match key {
        Key::Valid => req.header("Authorization", &app.key),
        Key::Missing => req,
        Key::Bearer => req.header("Authorization", format!("Bearer {}", app.key)),
        Key::Other(k) => req.header("Authorization", k.as_str()),
    };
    let res = req.send().await.expect("the server answers");
    let status = res.status().as_u16();
    let ct = res
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string());
    (status, ct, res.text().await.unwrap())
}

proptest! {
    // The saved failures are in fuzz.proptest-regressions beside this file. Proptest's default
    // (`SourceParallel`) would look in tests/proptest-regressions/fuzz.txt instead, now that
    // this file's crate root is tests/it/main.rs; named here, the place does not depend on that.
    #![proptest_config(ProptestConfig {
        cases: 400,
        failure_persistence: Some(Box::new(
            FileFailurePersistence::WithSource("proptest-regressions")
        )),
        .. ProptestConfig::default()
    })]

    #[test]
    fn any_post_body_gets_a_contract_answer(
        path in post_path(),
        body in body(),
        key in key(),
        ct in content_type(),
    ) {
        let s = shared();
        let (status, got_ct, text) = s.runtime.block_on(async {
            let mut req = s.fresh.post(s.app.url(&path)).body(body);
            if let Some(ct) = &ct {
                req = req.header("Content-Type", ct.as_str());
            }
            send(req, &key).await
        });
        check(status, got_ct.as_deref(), &text, &key);
    }

    #[test]
    fn any_midjourney_prompt_parses_or_is_refused_with_a_rule(prompt in midjourney_prompt()) {
        use easel::domain::{prompt_text, Parameters};
        match Parameters::parse(&prompt) {
            Ok((text, p)) => {
                prop_assert_eq!(text, prompt_text(&prompt));
                for part in &p.weights {
                    prop_assert!(!part.text.is_empty() && text.contains(part.text.as_str()));
                }
                if !p.weights.is_empty() {
                    prop_assert!(p.weights.iter().map(|w| w.weight).sum::<f64>() > 0.0);
                }
            }
            Err(e) => {
                prop_assert!(!e.message.is_empty());
                prop_assert!(["invalid_value", "unsupported_operation"].contains(&e.code));
            }
        }
        // Through HTTP: a contract answer, 200 or 400 (never a 500).
        let s = shared();
        let body = serde_json::json!({ "prompt": prompt }).to_string();
        let (status, ct, text) = s.runtime.block_on(async {
            let req = s
                .fresh
                .post(s.app.url("/api/v1/imagine"))
                .header("Content-Type", "application/json")
                .body(body);
            send(req, &Key::Valid).await
        });
        check(status, ct.as_deref(), &text, &Key::Valid);
        prop_assert!(status == 200 || status == 400, "{}: {}", status, text);
    }

    #[test]
    fn any_task_path_gets_a_contract_answer(segment in segment(), key in key()) {
        let s = shared();
        let (status, ct, text) = s.runtime.block_on(async {
            let req = s.fresh.get(s.app.url(&format!("/api/v1/tasks/{segment}")));
            send(req, &key).await
        });
        check(status, ct.as_deref(), &text, &key);
    }

    #[test]
    fn any_bytes_on_the_socket_leave_the_server_serving(raw in prop::collection::vec(any::<u8>(), 0..2048)) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let s = shared();
        s.runtime.block_on(async {
            let addr = s.app.base.trim_start_matches("http://").to_string();
            let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
            let _ = stream.write_all(&raw).await;
            let _ = stream.shutdown().await;
            let mut answer = Vec::new();
            let _ = tokio::time::timeout(
                std::time::Duration::from_secs(5),
                stream.read_to_end(&mut answer),
            )
            .await;
            if answer.starts_with(b"HTTP/1.1 5") {
                panic!("server error for raw input: {}", String::from_utf8_lossy(&answer));
            }
            let res = s.fresh.get(s.app.url("/healthz")).send().await.unwrap();
            assert_eq!(res.status(), 200);
        });
    }
}
