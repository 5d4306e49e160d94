//! Backend slots in line order (docs/design.md, "The line for a backend"), on either store
//! (EASEL_TEST_STORE=postgres): where one busy backend is the bottleneck and more workers than
//! its slots hold claimed tasks, the tasks reach it in the queue's fair order (accounts taking
//! turns), not in whichever order the waiting workers happened to wake; and a running task
//! whose backend fails says that it waits for it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::backend_mocks::sdwebui::{start_webui, WebUi};
use crate::common::{self, TestApp};
use crate::events::Events;
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

/// The record of the task `id`.
async fn record(app: &TestApp, id: &str) -> Value {
    app.get(&format!("/api/v1/tasks/{id}")).await.1
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
            delay_ms: AtomicU64::new(40),
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

/// A WebUI whose jobs take `delay_ms` and a node of four workers in front of it that has run one
/// job on it (prompt `warm`), so that it knows how long they take.
async fn warmed_node(delay_ms: u64) -> (Arc<WebUi>, TestApp) {
    let ui = Arc::new(WebUi {
        shade: 10,
        delay_ms: AtomicU64::new(delay_ms),
        ..WebUi::default()
    });
    let url = start_webui(ui.clone()).await;
    let app = node(&url, 4, |_| {}).await;
    let warm = app.imagine(json!({"prompt": "warm"})).await;
    app.wait_final(&warm, WITHIN).await;
    (ui, app)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_claims_for_a_busy_slot_only_as_its_job_is_about_to_end() {
    // Jobs of 1.5 s, one run first.
    let (ui, app) = warmed_node(1500).await;
    let first = app.imagine(json!({"prompt": "first"})).await;
    app.wait_status(&first, "processing", WITHIN).await;
    let second = app.imagine(json!({"prompt": "second"})).await;
    // Well inside the first job: the second stays in the store, where any node may claim it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let waiting = record(&app, &second).await;
    assert_eq!(waiting["status"], "pending", "{waiting}");
    assert_eq!(waiting["waiting_for"], "turn", "{waiting}");
    let (first, second) = (
        app.wait_final(&first, WITHIN).await,
        app.wait_final(&second, WITHIN).await,
    );
    // Claimed (`started_at`) no sooner than the first job was about to end: it was taken 1.5 s
    // before, at or after the first's claim.
    let at = |r: &Value| {
        chrono::DateTime::parse_from_rfc3339(r["started_at"].as_str().unwrap())
            .unwrap()
            .timestamp_millis()
    };
    let gap = at(&second) - at(&first);
    assert!(
        gap >= 1200,
        "the second was claimed {gap} ms after the first"
    );
    assert_eq!(received(&ui), ["warm", "first", "second"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_past_its_time_has_one_task_claimed_for_its_slot_and_the_rest_wait_in_the_store() {
    // A job of 100 ms teaches the node that the backend is quick; then they take 3 s, so that
    // the slot is about to free from the first moments of each and stays busy.
    let (ui, app) = warmed_node(100).await;
    ui.delay_ms.store(3000, Ordering::SeqCst);
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
        // Places in line are at most a second old: wait for those read after the claim.
        let placed = records[1..].iter().all(|r| r["queue_position"].is_u64());
        (records[0]["status"] == "processing" && records[1]["status"] == "starting" && placed)
            .then_some(records)
    })
    .await
    .expect("the first task runs and the second is claimed for its slot");
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
    ui.delay_ms.store(100, Ordering::SeqCst);
    for id in &ids {
        assert_eq!(app.wait_final(id, WITHIN).await["status"], "finished");
    }
    assert_eq!(received(&ui), ["warm", "t0", "t1", "t2", "t3", "t4", "t5"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_task_whose_backend_goes_down_says_it_waits_for_it_until_it_is_back() {
    // Each job takes 2.5 s: long enough to take the backend down under the first, and to see
    // the second, once it is back, running with the wait no longer said.
    let ui = Arc::new(WebUi {
        shade: 10,
        delay_ms: AtomicU64::new(2500),
        ..WebUi::default()
    });
    let url = start_webui(ui.clone()).await;
    let app = node(&url, 1, |_| {}).await;
    let id = app.imagine(json!({"prompt": "a lighthouse"})).await;
    let (status, stream) =
        Events::open(&app, &app.key, &format!("/api/v1/tasks/{id}/events"), None).await;
    assert_eq!(status, 200);
    let mut stream = stream.unwrap();
    common::wait_for(WITHIN, || async {
        let r = record(&app, &id).await;
        (r["status"] == "processing" && ui.running.load(Ordering::SeqCst) == 1).then_some(())
    })
    .await
    .expect("the task runs on the backend");
    assert!(record(&app, &id).await.get("retrying").is_none());

    // The backend goes down under it: the job fails at its end and is tried again, and the
    // backend, failing every attempt, is taken out until a probe finds it back.
    ui.down.store(true, Ordering::SeqCst);
    let waiting = common::wait_for(WITHIN, || async {
        let r = record(&app, &id).await;
        r.get("retrying").is_some().then_some(r)
    })
    .await
    .expect("the record says the task waits for its backend");
    assert_eq!(waiting["status"], "processing", "{waiting}");
    assert_eq!(waiting["waiting_for"], "backend", "{waiting}");
    assert!(waiting.get("queue_position").is_none(), "{waiting}");
    assert!(waiting["retrying"]["attempt"].as_u64().unwrap() >= 1);
    let error = waiting["retrying"]["error"].as_str().unwrap();
    assert!(error.contains("HTTP 503"), "{waiting}");
    // The dashboard's task page says it too (its live region; the script keeps it current).
    let mut operator = crate::dashboard::operator(&app).await;
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        let page = operator.get(&format!("/tasks/{id}/progress")).await;
        assert_eq!(page.status, 200);
        if page.body.contains("Waiting for the backend, retry ") {
            assert!(page.body.contains("HTTP 503"), "{}", page.body);
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{}", page.body);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let said = loop {
        let ev = stream.next(WITHIN).await.expect("the stream goes on");
        if ev.event == "progress" && ev.data.get("retrying").is_some() {
            break ev;
        }
        assert!(ev.data["status"] != "finished", "{ev:?}");
    };
    assert_eq!(said.data["status"], "processing", "{said:?}");
    assert_eq!(said.data["waiting_for"], "backend", "{said:?}");
    assert!(said.data["retrying"]["attempt"].as_u64().unwrap() >= 1);
    assert!(said.data["retrying"]["error"]
        .as_str()
        .unwrap()
        .contains("HTTP 503"));
    // What it had done so far stays: progress never goes back.
    assert_eq!(said.data["percentage"], waiting["percentage"]);

    // Back: the probe brings it in, the task runs again, the wait is no longer said, and it ends.
    ui.down.store(false, Ordering::SeqCst);
    let again = common::wait_for(WITHIN, || async {
        let r = record(&app, &id).await;
        let running = ui.running.load(Ordering::SeqCst) == 1;
        (r["status"] == "processing" && running && r.get("retrying").is_none()).then_some(r)
    })
    .await
    .expect("the task runs again, no longer said to wait");
    assert!(again.get("waiting_for").is_none(), "{again}");
    let rest = stream.rest(WITHIN).await;
    let last = rest.last().expect("the final record");
    assert_eq!(last.data["status"], "finished", "{rest:?}");
    assert!(last.data.get("retrying").is_none() && last.data.get("waiting_for").is_none());
    // Before the end, the stream said the task was taken again: its last event of the running
    // task has no `retrying`.
    let running_last = rest
        .iter()
        .rev()
        .find(|ev| ev.data["status"] == "processing")
        .expect("the running task said");
    assert!(
        running_last.data.get("retrying").is_none()
            && running_last.data.get("waiting_for").is_none(),
        "{rest:?}"
    );
    assert_eq!(ui.jobs.load(Ordering::SeqCst), 1, "one job ran to its end");
    assert_eq!(app.wait_final(&id, WITHIN).await["status"], "finished");
}
