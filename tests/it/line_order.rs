//! Backend slots in line order (docs/design.md, "The line for a backend"), on either store
//! (EASEL_TEST_STORE=postgres): where one busy backend is the bottleneck and more workers than
//! its slots hold claimed tasks, the tasks reach it in the queue's fair order (accounts taking
//! turns), not in whichever order the waiting workers happened to wake; and a running task
//! whose backend fails says that it waits for it.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::backend_mocks::sdwebui::{start_webui, WebUi};
use crate::common::{self, TestApp};
use easel::config::{BackendConfig, Config};

const WITHIN: Duration = Duration::from_secs(60);

fn webui(url: &str) -> BackendConfig {
    serde_json::from_value(json!({
        "name": "one", "kind": "sdwebui", "url": url, "concurrency": 1, "timeout": "20s",
    }))
    .unwrap()
}

/// The prompts of the jobs `ui` received, in the order it received them.
fn received(ui: &WebUi) -> Vec<String> {
    ui.seen
        .lock()
        .unwrap()
        .iter()
        .map(|(_, body)| body["prompt"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// A node on `url`'s one-slot backend with `workers` workers.
async fn node(url: &str, workers: usize, adjust: impl FnOnce(&mut Config)) -> TestApp {
    let url = url.to_string();
    TestApp::spawn_with(move |c| {
        c.worker.workers = workers;
        c.backends = vec![webui(&url)];
        adjust(c);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_backlogs_reach_a_one_slot_backend_in_turns_twenty_times_in_a_row() {
    for round in 0..20 {
        let ui = Arc::new(WebUi {
            shade: 10,
            delay_ms: 40,
            ..WebUi::default()
        });
        let url = start_webui(ui.clone()).await;
        // Queued with no workers, so that both backlogs wait; then four workers (eight loops)
        // for one slot.
        let app = node(&url, 0, |_| {}).await;
        let a = app
            .account_with(&format!("a{round}@example.com"), None)
            .await
            .1;
        let b = app
            .account_with(&format!("b{round}@example.com"), None)
            .await
            .1;
        for n in 1..=3 {
            app.imagine_as(&a, json!({"prompt": format!("a{n}")})).await;
        }
        for n in 1..=3 {
            app.imagine_as(&b, json!({"prompt": format!("b{n}")})).await;
        }
        let (dir, mut config) = app.stop().await;
        config.worker.workers = 4;
        let app = TestApp::start(dir, config).await;
        common::wait_for(WITHIN, || async {
            (ui.jobs.load(Ordering::SeqCst) == 6).then_some(())
        })
        .await
        .expect("six jobs ran");
        assert_eq!(
            received(&ui),
            ["a1", "b1", "a2", "b2", "a3", "b3"],
            "round {round}: the backend's order is the turns'"
        );
        assert_eq!(ui.most.load(Ordering::SeqCst), 1);
        app.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_claims_no_further_ahead_than_one_task_beyond_its_free_slots() {
    let ui = Arc::new(WebUi {
        shade: 10,
        delay_ms: 400,
        ..WebUi::default()
    });
    let url = start_webui(ui.clone()).await;
    let app = node(&url, 4, |_| {}).await;
    let mut ids = Vec::new();
    for n in 0..6 {
        ids.push(
            app.submit("imagine", json!({"prompt": format!("t{n}")}))
                .await,
        );
    }
    // While the first runs: one more claimed (waiting for the backend), the rest still queued
    // in the store with their places in line.
    let records = common::wait_for(WITHIN, || async {
        let mut records = Vec::new();
        for id in &ids {
            records.push(app.get(&format!("/api/v1/tasks/{id}")).await.1);
        }
        (records[0]["status"] == "processing").then_some(records)
    })
    .await
    .expect("the first task runs");
    let statuses: Vec<&str> = records
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        statuses,
        [
            "processing",
            "starting",
            "pending",
            "pending",
            "pending",
            "pending"
        ],
        "{records:?}"
    );
    assert_eq!(records[1]["waiting_for"], "backend");
    let positions: Vec<&Value> = records[1..].iter().map(|r| &r["queue_position"]).collect();
    assert_eq!(
        positions,
        [&json!(0), &json!(1), &json!(2), &json!(3), &json!(4)]
    );
    for id in &ids {
        assert_eq!(app.wait_final(id, WITHIN).await["status"], "finished");
    }
    assert_eq!(received(&ui), ["t0", "t1", "t2", "t3", "t4", "t5"]);
}
