//! The reliability suite's crash test: kill easel under load and check that nothing acknowledged
//! is lost.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::binary::Easel;
use crate::common::receiver::{Behaviour, Receiver};
use crate::common::wait_for;
use futures::StreamExt;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

/// Submit a few thousand tasks with webhooks while SIGKILLing easel at random moments; at the end
/// every acknowledged task is finished or failed, once, and its webhook arrived at least once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nothing_acknowledged_is_lost_when_easel_is_killed_under_load() {
    const TASKS: usize = 2500;
    const KILLS: usize = 4;
    let seed: u64 = rand::random();
    eprintln!("crash test seed {seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let _turn = crate::one_at_a_time().await;

    let receiver = Receiver::start(vec![Behaviour::Status(200)]).await;
    let dir = tempfile::tempdir().unwrap();
    // A fixed port, so clients find easel again after each restart.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let env = [
        ("EASEL_LISTEN", listen.as_str()),
        ("EASEL_IMAGE_SIZE", "64"),
        ("EASEL_PLANS__SELF-HOSTED__MAX_PENDING", "100000"),
        ("EASEL_SHUTDOWN_TIMEOUT", "1s"),
    ];
    let mut easel = Easel::start(dir.path(), &env);
    let key = easel.first_key.clone().unwrap();
    let base = easel.base.clone();

    let acked: Arc<Mutex<Vec<String>>> = Arc::default();
    let submitter = {
        let acked = acked.clone();
        let (key, base, hook) = (key.clone(), base.clone(), receiver.url.clone());
        tokio::spawn(async move {
            let http = reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap();
            futures::stream::iter(0..TASKS)
                .for_each_concurrent(16, |i| {
                    let (http, key, base, hook, acked) =
                        (http.clone(), key.clone(), base.clone(), hook.clone(), acked.clone());
                    async move {
                        // Like a real client: retry until acknowledged. A retry may create a
                        // second task; only acknowledged ids are promised anything.
                        loop {
                            let res = http
                                .post(format!("{base}/api/v1/imagine"))
                                .header("Authorization", &key)
                                .json(&json!({"prompt": format!("crash test {i}"), "webhook_url": hook}))
                                .send()
                                .await;
                            if let Ok(res) = res {
                                if res.status() == 200 {
                                    if let Ok(body) = res.json::<Value>().await {
                                        let id = body["task_id"].as_str().unwrap().to_string();
                                        acked.lock().unwrap().push(id);
                                        return;
                                    }
                                }
                            }
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    }
                })
                .await;
        })
    };

    for kill in 0..KILLS {
        let wait = Duration::from_millis(rng.gen_range(300..1500));
        tokio::time::sleep(wait).await;
        eprintln!(
            "kill {} after {wait:?}: {} acknowledged",
            kill + 1,
            acked.lock().unwrap().len()
        );
        easel.kill9();
        easel = Easel::start(dir.path(), &env);
    }
    tokio::time::timeout(Duration::from_secs(180), submitter)
        .await
        .expect("all submissions acknowledged in time")
        .unwrap();
    let acked = acked.lock().unwrap().clone();
    assert_eq!(acked.len(), TASKS);

    // Every acknowledged task ends.
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut finals: HashMap<String, Value> = HashMap::new();
    while finals.len() < acked.len() {
        assert!(
            Instant::now() < deadline,
            "{} of {} ended",
            finals.len(),
            acked.len()
        );
        let pending: Vec<&String> = acked
            .iter()
            .filter(|id| !finals.contains_key(*id))
            .collect();
        for chunk in pending.chunks(20) {
            let (status, body) = easel
                .post(&key, "/api/v1/fetch-many", json!({ "task_ids": chunk }))
                .await;
            assert_eq!(status, 200);
            let tasks = body["tasks"].as_array().unwrap();
            assert_eq!(
                tasks.len(),
                chunk.len(),
                "every acknowledged task is stored"
            );
            for t in tasks {
                if matches!(t["status"].as_str(), Some("finished" | "failed")) {
                    finals.insert(t["task_id"].as_str().unwrap().to_string(), t.clone());
                }
            }
        }
        if finals.len() < acked.len() {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    let failed: Vec<&Value> = finals
        .values()
        .filter(|t| t["status"] == "failed")
        .collect();
    eprintln!(
        "{} finished, {} failed",
        finals.len() - failed.len(),
        failed.len()
    );
    for t in &failed {
        // The only acceptable failure: interrupted by a kill on every attempt.
        assert!(
            t["error"].as_str().unwrap().starts_with("worker lost"),
            "{t}"
        );
    }

    // Every acknowledged task's webhook arrives at least once, and every copy is the same result.
    let arrived = wait_for(Duration::from_secs(120), || async {
        let mut by_task: HashMap<String, Vec<bytes::Bytes>> = HashMap::new();
        for r in receiver.received() {
            let v: Value = serde_json::from_slice(&r.body).unwrap();
            by_task
                .entry(v["task_id"].as_str().unwrap().to_string())
                .or_default()
                .push(r.body.clone());
        }
        acked
            .iter()
            .all(|id| by_task.contains_key(id))
            .then_some(by_task)
    })
    .await
    .expect("every acknowledged task's webhook arrived");
    let mut duplicates = 0;
    for id in &acked {
        let copies = &arrived[id];
        duplicates += copies.len() - 1;
        assert!(
            copies.windows(2).all(|w| w[0] == w[1]),
            "task {id} ended once"
        );
        let body: Value = serde_json::from_slice(&copies[0]).unwrap();
        assert_eq!(body["status"], finals[id]["status"]);
        if body["status"] == "finished" {
            assert_eq!(body["image_urls"], finals[id]["image_urls"]);
        }
    }
    eprintln!("{duplicates} duplicate deliveries across {KILLS} kills");
}
