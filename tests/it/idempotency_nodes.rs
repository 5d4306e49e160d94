//! Idempotency keys across nodes: two `easel serve` processes on one PostgreSQL database, the
//! same key sent to both, one after the other and at once. Needs `EASEL_TEST_POSTGRES` (set by
//! scripts/test.sh); without it the test says so in one line and returns, except under
//! `CI=true`, where it fails.

use std::collections::HashSet;
use std::io::Write;
use std::process::Stdio;

use serde_json::{json, Value};

use crate::common::{self, binary::Easel};

/// A submit's answer on one node: status, whether it was a replay, body.
async fn submit(node: &Easel, api_key: &str, key: &str, body: &Value) -> (u16, bool, Value) {
    let res = node
        .http
        .post(format!("{}/api/v1/imagine", node.base))
        .header("Authorization", api_key)
        .header("Idempotency-Key", key)
        .json(body)
        .send()
        .await
        .unwrap();
    let replayed = res
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true");
    let (status, body) = common::split(res).await;
    (status, replayed, body)
}

fn start(dir: &std::path::Path, database_url: &str) -> Easel {
    Easel::start_serve(
        dir,
        &["--role", "api"],
        &[
            ("EASEL_DATABASE_URL", database_url),
            ("EASEL_DATABASE_MAX_CONNECTIONS", "4"),
        ],
        Stdio::inherit(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_key_sent_to_two_nodes_makes_one_task() {
    let Some(postgres) = common::postgres() else {
        let _ = writeln!(
            std::io::stderr(),
            "tests/it/idempotency_nodes.rs: skipped (EASEL_TEST_POSTGRES not set; scripts/test.sh \
             sets it)"
        );
        return;
    };
    let database_url = common::fresh_postgres_url(&postgres);
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = start(dir_a.path(), &database_url);
    let b = start(dir_b.path(), &database_url);
    let api_key = a.first_key.clone().expect("the first node prints a key");
    let mut made = HashSet::new();

    // One after the other: the second node replays the first node's task.
    let body = json!({"prompt": "made on one node, asked again on the other"});
    let (status, replayed, first) = submit(&a, &api_key, "one-by-one", &body).await;
    assert_eq!((status, replayed), (200, false), "{first}");
    let (status, replayed, again) = submit(&b, &api_key, "one-by-one", &body).await;
    assert_eq!((status, replayed), (200, true), "{again}");
    assert_eq!(again, first);
    let (status, _, other) = submit(&b, &api_key, "one-by-one", &json!({"prompt": "else"})).await;
    assert_eq!(status, 422, "{other}");
    made.insert(first["task_id"].as_str().unwrap().to_string());

    // At once, on both nodes: one task per key, every other answer a replay of it or a 409.
    for round in 0..8 {
        let key = format!("at-once-{round}");
        let body = json!({ "prompt": format!("round {round}") });
        let answers = futures::future::join_all((0..8).map(|i| {
            let node = if i % 2 == 0 { &a } else { &b };
            submit(node, &api_key, &key, &body)
        }))
        .await;
        let mut firsts = Vec::new();
        let mut ids = HashSet::new();
        for (status, replayed, body) in &answers {
            match status {
                200 => {
                    let id = body["task_id"].as_str().unwrap().to_string();
                    if !replayed {
                        firsts.push(id.clone());
                    }
                    ids.insert(id);
                }
                409 => assert_eq!(body["errors"][0]["code"], "idempotency_key_in_use"),
                _ => panic!("unexpected {status}: {body}"),
            }
        }
        assert_eq!(firsts.len(), 1, "round {round}: {answers:?}");
        assert_eq!(ids.len(), 1, "round {round}: {answers:?}");
        // A retry of any 409, on either node, gets the one task.
        for node in [&a, &b] {
            let (status, replayed, body) = submit(node, &api_key, &key, &body).await;
            assert_eq!((status, replayed), (200, true), "{body}");
            assert_eq!(body["task_id"], firsts[0].as_str());
        }
        made.insert(firsts.remove(0));
    }

    // The account has exactly the tasks made, as either node lists them.
    let res = b
        .http
        .get(format!("{}/api/v1/tasks?limit=100", b.base))
        .header("Authorization", &api_key)
        .send()
        .await
        .unwrap();
    let (status, page) = common::split(res).await;
    assert_eq!(status, 200, "{page}");
    let listed: HashSet<String> = page["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["task_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(listed, made);
}
