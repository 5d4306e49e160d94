//! Live tasks through HTTP: the Server-Sent Events streams of a task and of an account (their
//! order, resuming with `Last-Event-ID`, limits, another account's task), `queue_position` in the
//! record, a task that waits for a backend shown waiting, and a stream on one node of a task run
//! by another (PostgreSQL).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::backend_mocks::openai::OpenAiMock;
use crate::backend_mocks::sdwebui::{start_webui, WebUi};
use crate::common::{self, wait_for, TestApp};
use serde_json::{json, Value};

/// One event read off a stream.
#[derive(Debug, Clone)]
pub(crate) struct Ev {
    pub event: String,
    pub id: String,
    pub data: Value,
}

/// A stream being read (line_order.rs reads one too).
pub(crate) struct Events {
    response: reqwest::Response,
    buffer: String,
}

impl Events {
    /// Open `path` with `key` (and `Last-Event-ID`); the status, and the stream when 200.
    pub(crate) async fn open(
        app: &TestApp,
        key: &str,
        path: &str,
        last: Option<&str>,
    ) -> (u16, Option<Events>) {
        let mut request = app.http.get(app.url(path)).header("Authorization", key);
        if let Some(last) = last {
            request = request.header("Last-Event-ID", last);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        if status != 200 {
            return (status, None);
        }
        assert_eq!(
            response.headers()["content-type"].to_str().unwrap(),
            "text/event-stream"
        );
        (
            status,
            Some(Events {
                response,
                buffer: String::new(),
            }),
        )
    }

    /// The next event, or None when the stream ended; panics after `within`.
    pub(crate) async fn next(&mut self, within: Duration) -> Option<Ev> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let (mut event, mut id, mut data) = (String::new(), String::new(), String::new());
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event:") {
                        event = v.trim().to_string();
                    } else if let Some(v) = line.strip_prefix("id:") {
                        id = v.trim().to_string();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim_start());
                    }
                }
                if event.is_empty() && data.is_empty() {
                    continue; // a keep-alive comment
                }
                return Some(Ev {
                    event,
                    id,
                    data: serde_json::from_str(&data).expect("JSON data"),
                });
            }
            let chunk = tokio::time::timeout_at(deadline, self.response.chunk())
                .await
                .expect("an event in time")
                .expect("the stream reads");
            match chunk {
                Some(bytes) => self.buffer.push_str(std::str::from_utf8(&bytes).unwrap()),
                None => return None,
            }
        }
    }

    /// Every event up to the end of the stream.
    pub(crate) async fn rest(&mut self, within: Duration) -> Vec<Ev> {
        let mut all = Vec::new();
        while let Some(ev) = self.next(within).await {
            all.push(ev);
        }
        all
    }
}

fn version(id: &str) -> i64 {
    id.split('.')
        .next()
        .unwrap()
        .parse()
        .expect("an id is a version")
}

fn percentage(ev: &Ev) -> i64 {
    ev.data["percentage"].as_str().unwrap().parse().unwrap()
}

/// A node whose generations take `secs` each, one at a time.
async fn slow_node(secs: f64) -> TestApp {
    TestApp::spawn_with(|c| {
        c.worker.workers = 1;
        c.worker.procedural_min_duration = Duration::from_secs_f64(secs);
    })
    .await
}

/// The events of a task's whole life, in order, with the rules every stream keeps.
fn check_life(events: &[Ev], task_id: &str) {
    let first = events.first().expect("events");
    assert_eq!(
        first.event, "task",
        "a stream opens with the record: {events:?}"
    );
    let last = events.last().unwrap();
    assert_eq!(last.event, "task");
    assert_eq!(last.data["status"], "finished", "{last:?}");
    assert_eq!(last.data["image_urls"].as_array().map(Vec::len), Some(4));
    let mut seen = 0;
    let mut high = 0;
    // The percentage and preview said last of the running task: progress says something new.
    let mut said = None;
    for ev in events {
        assert_eq!(ev.data["task_id"], task_id);
        assert!(version(&ev.id) >= high, "ids never go back: {events:?}");
        high = version(&ev.id);
        if ev.data["status"] != "processing" {
            continue;
        }
        let now = (percentage(ev), ev.data["preview_image_url"].clone());
        if ev.event == "progress" {
            assert!(
                now.0 >= seen && now.0 < 100,
                "progress moves on: {events:?}"
            );
            assert!(
                said.as_ref() != Some(&now),
                "said twice: {ev:?} in {events:?}"
            );
            seen = now.0;
        }
        said = Some(now);
    }
    assert!(
        events
            .iter()
            .any(|e| e.event == "progress" && e.data["status"] == "processing"),
        "progress between the records: {events:?}"
    );
    assert!(events[..events.len() - 1]
        .iter()
        .all(|e| e.data["status"] != "finished"));
}

#[tokio::test]
async fn a_task_stream_says_the_record_its_progress_the_final_record_and_ends() {
    let app = slow_node(1.5).await;
    let id = app.imagine(json!({"prompt": "a lighthouse at dusk"})).await;
    let (status, stream) =
        Events::open(&app, &app.key, &format!("/api/v1/tasks/{id}/events"), None).await;
    assert_eq!(status, 200);
    let events = stream.unwrap().rest(Duration::from_secs(30)).await;
    check_life(&events, &id);
    // The record read afterwards is the stream's last.
    let (_, record) = app.get(&format!("/api/v1/tasks/{id}")).await;
    assert_eq!(record["status"], "finished");
    assert!(record.get("queue_position").is_none() && record.get("preview_image_url").is_none());
}

/// A preview whose write hangs (its object store takes the connection and never answers) holds
/// up none of the task's progress: the worker tells each step as the generator reports it, while
/// the write waits.
#[tokio::test]
async fn progress_is_told_while_a_preview_is_being_written() {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", silent.local_addr().unwrap());
    let _silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((connection, _)) = silent.accept().await {
            held.push(connection);
        }
    });
    common::s3::test_credentials();
    let app = TestApp::spawn_with(|c| {
        c.worker.workers = 1;
        c.worker.procedural_min_duration = Duration::from_secs(4);
        c.blobs.store = easel::config::BlobStoreKind::S3;
        c.blobs.s3_bucket = Some("previews-never-land".into());
        c.blobs.s3_endpoint = Some(endpoint);
        c.blobs.s3_path_style = true;
    })
    .await;
    let id = app.imagine(json!({"prompt": "a kite over dunes"})).await;
    let (status, stream) =
        Events::open(&app, &app.key, &format!("/api/v1/tasks/{id}/events"), None).await;
    assert_eq!(status, 200);
    let mut stream = stream.unwrap();
    let mut told = Vec::new();
    // The generator reports 20, 40, 60 and 80% over its 4 s; the first preview (after the first
    // image) is due at once, and its write never ends.
    while told.last().is_none_or(|p| *p < 60) {
        let ev = stream
            .next(Duration::from_secs(5))
            .await
            .expect("the stream goes on");
        if ev.event == "progress" && ev.data["status"] == "processing" {
            assert!(
                ev.data.get("preview_image_url").is_none(),
                "no preview was written: {ev:?}"
            );
            told.push(percentage(&ev));
        }
    }
    let steps: std::collections::BTreeSet<i64> =
        told.iter().copied().filter(|p| *p >= 20).collect();
    assert!(
        steps.len() >= 3,
        "each step told while the preview's write hangs: {told:?}"
    );
}

#[tokio::test]
async fn a_stream_resumed_with_last_event_id_misses_nothing_and_bad_ids_start_over() {
    let app = slow_node(2.0).await;
    let id = app.imagine(json!({"prompt": "a harbour"})).await;
    let path = format!("/api/v1/tasks/{id}/events");
    let (_, stream) = Events::open(&app, &app.key, &path, None).await;
    let mut stream = stream.unwrap();
    // Read up to the first progress, then drop the connection.
    let mut last = stream.next(Duration::from_secs(20)).await.unwrap();
    while last.event != "progress" || last.data["status"] != "processing" {
        last = stream.next(Duration::from_secs(20)).await.unwrap();
    }
    drop(stream);
    let (_, stream) = Events::open(&app, &app.key, &path, Some(&last.id)).await;
    let resumed = stream.unwrap().rest(Duration::from_secs(30)).await;
    let first = resumed.first().expect("the rest of the task");
    assert!(
        version(&first.id) >= version(&last.id),
        "nothing older than what was seen: {last:?} then {resumed:?}"
    );
    if first.event == "progress" {
        assert!(percentage(first) >= percentage(&last));
    }
    let end = resumed.last().unwrap();
    assert_eq!(
        (end.event.as_str(), &end.data["status"]),
        ("task", &json!("finished"))
    );

    // Resumed after the end with the end's id: nothing more to say.
    let (_, stream) = Events::open(&app, &app.key, &path, Some(&end.id)).await;
    assert!(stream
        .unwrap()
        .rest(Duration::from_secs(5))
        .await
        .is_empty());
    // An id that is not one, or from the future: the current record, then the end.
    for bad in ["nonsense", "99999999999", "-4"] {
        let (_, stream) = Events::open(&app, &app.key, &path, Some(bad)).await;
        let events = stream.unwrap().rest(Duration::from_secs(5)).await;
        assert_eq!(events.len(), 1, "{bad}: {events:?}");
        assert_eq!(events[0].data["status"], "finished");
    }
}

#[tokio::test]
async fn another_accounts_task_is_not_found_and_streams_past_the_limit_are_refused() {
    let app = TestApp::spawn_with(|c| {
        c.worker.workers = 0;
        c.limits.max_streams_per_account = 2;
    })
    .await;
    let id = app.imagine(json!({"prompt": "a quiet field"})).await;
    let other = app.key_for("other@example.com").await;
    let path = format!("/api/v1/tasks/{id}/events");
    let (status, _) = Events::open(&app, &other, &path, None).await;
    assert_eq!(status, 404);
    let (status, _) = Events::open(&app, "not-a-key", &path, None).await;
    assert_eq!(status, 401);
    let (status, _) = Events::open(&app, &app.key, "/api/v1/tasks/not-a-uuid/events", None).await;
    assert_eq!(status, 400);
    let (status, _) = Events::open(&app, &app.key, "/api/v1/events?status=sleeping", None).await;
    assert_eq!(status, 400);
    // A filter given twice is refused, not read as its last value.
    for (query, field) in [
        ("status=failed&status=finished", "status"),
        ("task_type=imagine&type=upscale-1x", "task_type"),
        ("type=imagine&type=imagine", "type"),
    ] {
        let (status, body) = app.get(&format!("/api/v1/events?{query}")).await;
        assert_eq!(status, 400, "{query}");
        let error = &body["errors"][0];
        assert_eq!(error["code"], "invalid_value", "{query}: {body}");
        let msg = error["msg"].as_str().unwrap_or_default();
        assert!(msg.starts_with(field), "{query}: {body}");
        assert!(msg.contains("once"), "{query}: {body}");
    }

    let (_, a) = Events::open(&app, &app.key, &path, None).await;
    let (_, b) = Events::open(&app, &app.key, "/api/v1/events", None).await;
    let (mut a, mut b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.next(Duration::from_secs(5)).await.unwrap().event, "task");
    assert_eq!(b.next(Duration::from_secs(5)).await.unwrap().event, "task");
    let refused = app
        .http
        .get(app.url(&path))
        .header("Authorization", &app.key)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 429);
    assert!(refused.headers().contains_key("retry-after"));
    let (_, body) = common::split(refused).await;
    assert_eq!(body["errors"][0]["code"], "quota_exceeded", "{body}");
    // Another account has streams of its own.
    let (status, _) = Events::open(&app, &other, "/api/v1/events", None).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn the_account_stream_says_every_task_new_and_ending_and_filters_by_type() {
    let app = slow_node(0.3).await;
    let (_, all) = Events::open(&app, &app.key, "/api/v1/events", None).await;
    let (_, described) =
        Events::open(&app, &app.key, "/api/v1/events?task_type=describe", None).await;
    let (mut all, mut described) = (all.unwrap(), described.unwrap());
    let a = app.imagine(json!({"prompt": "first"})).await;
    let b = app.imagine(json!({"prompt": "second"})).await;
    let mut finished = Vec::new();
    let mut first: std::collections::HashMap<String, String> = Default::default();
    while finished.len() < 2 {
        let ev = all.next(Duration::from_secs(30)).await.expect("open");
        let task = ev.data["task_id"].as_str().unwrap().to_string();
        if ev.event == "task" {
            let status = ev.data["status"].as_str().unwrap().to_string();
            first.entry(task.clone()).or_insert(status);
        }
        if ev.event == "task" && ev.data["status"] == "finished" {
            finished.push(task);
        }
    }
    finished.sort();
    let mut both = vec![a.clone(), b.clone()];
    both.sort();
    assert_eq!(finished, both);
    // Each is said when it is new, before its end: as it was when the stream read it, which on
    // PostgreSQL (told by the queue's NOTIFY, like the workers) may be already claimed.
    for id in &both {
        assert!(
            ["pending", "starting", "processing"].contains(&first[id].as_str()),
            "{id} was first said as {}",
            first[id]
        );
    }
    // Nothing of the imagine tasks reaches the describe stream; a describe does.
    let described_id = {
        let (status, body) = app
            .post(
                "/api/v1/describe",
                &json!({"image_url": format!("{}/nowhere.png", app.base)}),
            )
            .await;
        if status != 200 {
            // No describe on this node's backends: the filter alone is shown.
            None
        } else {
            Some(body["task_id"].as_str().unwrap().to_string())
        }
    };
    if let Some(id) = described_id {
        let ev = described.next(Duration::from_secs(30)).await.unwrap();
        assert_eq!(ev.data["task_id"], id.as_str());
    } else {
        let quiet = tokio::time::timeout(
            Duration::from_millis(500),
            described.next(Duration::from_secs(1)),
        )
        .await;
        assert!(quiet.is_err(), "no imagine event in a describe stream");
    }

    // Resumed from the first event's id, the account's stream says what changed since.
    let (_, resumed) = Events::open(&app, &app.key, "/api/v1/events", Some("1")).await;
    let mut resumed = resumed.unwrap();
    let mut seen = std::collections::HashMap::new();
    while seen.len() < 2 {
        let ev = resumed.next(Duration::from_secs(10)).await.unwrap();
        seen.insert(
            ev.data["task_id"].as_str().unwrap().to_string(),
            ev.data["status"].clone(),
        );
    }
    assert_eq!(seen[&a], "finished");
    assert_eq!(seen[&b], "finished");
}

#[tokio::test]
async fn a_waiting_task_has_its_place_in_line_which_moves_as_the_line_does() {
    let app = TestApp::spawn_with(|c| c.worker.workers = 0).await;
    let ids = [
        app.imagine(json!({"prompt": "one"})).await,
        app.imagine(json!({"prompt": "two"})).await,
        app.imagine(json!({"prompt": "three"})).await,
    ];
    for (i, id) in ids.iter().enumerate() {
        let (_, record) = app.get(&format!("/api/v1/tasks/{id}")).await;
        assert_eq!(record["status"], "pending");
        assert_eq!(record["queue_position"], i, "{record}");
    }
    let (_, list) = app.get("/api/v1/tasks").await;
    let positions: Vec<&Value> = list["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| &t["queue_position"])
        .collect();
    assert_eq!(positions, [&json!(2), &json!(1), &json!(0)], "newest first");

    let (_, stream) = Events::open(
        &app,
        &app.key,
        &format!("/api/v1/tasks/{}/events", ids[2]),
        None,
    )
    .await;
    let mut stream = stream.unwrap();
    let first = stream.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(first.data["queue_position"], 2);
    let (status, _) = app
        .post(&format!("/api/v1/tasks/{}/cancel", ids[0]), &json!({}))
        .await;
    assert_eq!(status, 200);
    let moved = stream.next(Duration::from_secs(10)).await.unwrap();
    assert_eq!(moved.event, "progress", "{moved:?}");
    assert_eq!(moved.data["queue_position"], 1);
    assert_eq!(moved.data["waiting_for"], "turn");
    assert_eq!(moved.data["status"], "pending");
    let (_, record) = app.get(&format!("/api/v1/tasks/{}", ids[2])).await;
    assert_eq!(record["queue_position"], 1);
}

/// A backend that tells no progress of its own (OpenAI's images API): the task turns
/// `processing` with the 10% its inputs reached, in that one write, and a stream that saw it
/// coming says the 10% once, in the processing record, not again as progress.
#[tokio::test]
async fn processing_is_said_with_the_progress_reached_and_that_progress_not_again() {
    let mock = Arc::new(OpenAiMock {
        delay: Duration::from_millis(300),
        ..OpenAiMock::default()
    });
    let url = mock.start().await;
    let app = TestApp::spawn_with(move |c| {
        c.backends = vec![serde_json::from_value(json!({
            "name": "oa", "kind": "openai", "url": url, "concurrency": 1, "timeout": "20s",
        }))
        .unwrap()];
    })
    .await;
    let (status, stream) = Events::open(&app, &app.key, "/api/v1/events", None).await;
    assert_eq!(status, 200);
    let mut stream = stream.unwrap();
    let id = app.imagine(json!({"prompt": "a harbour"})).await;
    let mut events = Vec::new();
    while events
        .last()
        .is_none_or(|e: &Ev| e.data["status"] != "finished")
    {
        let ev = stream
            .next(Duration::from_secs(20))
            .await
            .expect("the task's events");
        if ev.data["task_id"] == id.as_str() {
            events.push(ev);
        }
    }
    let processing = events
        .iter()
        .find(|e| e.data["status"] == "processing")
        .expect("a processing state");
    assert_eq!(
        (processing.event.as_str(), percentage(processing)),
        ("task", 10),
        "{events:?}"
    );
    let told: Vec<i64> = events
        .iter()
        .filter(|e| e.event == "progress" && e.data["status"] == "processing")
        .map(percentage)
        .collect();
    assert!(!told.contains(&10), "10% said twice: {events:?}");
    check_life(&events, &id);
}

#[tokio::test]
async fn a_task_claimed_while_the_backend_is_busy_waits_in_line_not_processing() {
    // One slot whose jobs took 100 ms, then take 4 s: from the first moments of the job on it,
    // the slot is about to free as far as the node knows, so it claims the next task, which
    // waits for the backend and is `starting`, at the head of the line, until the first ends.
    // The second is sent only then: sent together, either may be the first to take the slot.
    let ui = Arc::new(WebUi {
        shade: 10,
        delay_ms: AtomicU64::new(100),
        ..WebUi::default()
    });
    let url = start_webui(ui.clone()).await;
    let app = TestApp::spawn_with(move |c| {
        c.worker.workers = 2;
        c.backends = vec![serde_json::from_value(json!({
            "name": "one", "kind": "sdwebui", "url": url, "concurrency": 1, "timeout": "20s",
        }))
        .unwrap()];
    })
    .await;
    let warm = app.imagine(json!({"prompt": "warm"})).await;
    app.wait_final(&warm, Duration::from_secs(30)).await;
    ui.delay_ms.store(4000, Ordering::SeqCst);
    let first = app.imagine(json!({"prompt": "first"})).await;
    app.wait_status(&first, "processing", Duration::from_secs(10))
        .await;
    let second = app.imagine(json!({"prompt": "second"})).await;
    let running = wait_for(Duration::from_secs(10), || async {
        let (_, b) = app.get(&format!("/api/v1/tasks/{second}")).await;
        // The place in line is at most a second old: wait for the one read after the claim.
        (b["status"] == "starting" && b["queue_position"] == 0).then_some(b)
    })
    .await
    .expect("the second task claimed and waiting, first in line");
    assert_eq!(running["waiting_for"], "backend", "{running}");
    ui.delay_ms.store(100, Ordering::SeqCst);
    app.wait_final(&second, Duration::from_secs(30)).await;
}

#[tokio::test]
async fn a_stream_on_one_node_follows_a_task_run_by_another() {
    let Some(base) = common::postgres() else {
        eprintln!("skipped: no PostgreSQL (EASEL_TEST_POSTGRES)");
        return;
    };
    let url = common::fresh_postgres_url(&base);
    let runner = {
        let dir = tempfile::tempdir().unwrap();
        let mut config = common::test_config(dir.path());
        config.database.url = Some(url.clone());
        config.worker.workers = 1;
        config.worker.procedural_min_duration = Duration::from_secs(2);
        TestApp::start(dir, config).await
    };
    let api = {
        let dir = tempfile::tempdir().unwrap();
        let mut config = common::test_config(dir.path());
        config.database.url = Some(url);
        config.worker.workers = 0;
        TestApp::start(dir, config).await
    };
    let key = &runner.key;
    let (_, account) = Events::open(&api, key, "/api/v1/events", None).await;
    let mut account = account.unwrap();
    let id = api.imagine_as(key, json!({"prompt": "far away"})).await;
    let (_, stream) = Events::open(&api, key, &format!("/api/v1/tasks/{id}/events"), None).await;
    let events = stream.unwrap().rest(Duration::from_secs(40)).await;
    check_life(&events, &id);
    // The account's stream on the API node heard the task queued (another node's submit) and end.
    let mut statuses = Vec::new();
    while statuses.last() != Some(&json!("finished")) {
        let ev = account.next(Duration::from_secs(20)).await.unwrap();
        if ev.event == "task" {
            statuses.push(ev.data["status"].clone());
        }
    }
    // Its first record as it was when the API node heard of it: queued, or taken already.
    assert!(
        ["pending", "starting", "processing"].contains(&statuses[0].as_str().unwrap()),
        "{statuses:?}"
    );
    drop(api);
    drop(runner);
}

#[tokio::test]
async fn a_stream_whose_client_reads_nothing_slows_no_other() {
    use tokio::io::AsyncWriteExt;
    let app = TestApp::spawn_with(|c| {
        c.worker.workers = 0;
        c.plans.default_mut().max_pending = 10_000;
    })
    .await;
    // A client with a tiny receive window that asks for the account's stream and never reads.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let addr: std::net::SocketAddr = app.base.trim_start_matches("http://").parse().unwrap();
    let mut stalled = socket.connect(addr).await.unwrap();
    stalled
        .write_all(
            format!(
                "GET /api/v1/events HTTP/1.1\r\nHost: {addr}\r\nAuthorization: {}\r\n\r\n",
                app.key
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let (_, reader) = Events::open(&app, &app.key, "/api/v1/events", None).await;
    let mut reader = reader.unwrap();
    // More than a socket's send buffer may grow to (4 MiB on Linux) and the stalled client's
    // window: 4 KiB of metadata in each record.
    let filler = "x".repeat(4000);
    let mut ids = std::collections::HashSet::new();
    for i in 0..1200 {
        ids.insert(
            app.imagine(json!({"prompt": format!("task {i}"), "metadata": {"f": filler}}))
                .await,
        );
    }
    // The reading client hears every one of them, while the other reads nothing.
    while !ids.is_empty() {
        let ev = reader.next(Duration::from_secs(30)).await.expect("open");
        ids.remove(ev.data["task_id"].as_str().unwrap());
    }
    // The stalled client still holds its connection (not read here: see the closing note of
    // issue 31 on when the server drops it).
    drop(stalled);
}

/// Everything `stream` sends until `needle` has come, it closes, or `within` passes; and whether
/// it closed.
async fn read_raw(
    stream: &mut tokio::net::TcpStream,
    needle: &str,
    within: Duration,
) -> (String, bool) {
    use tokio::io::AsyncReadExt;
    let deadline = tokio::time::Instant::now() + within;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if String::from_utf8_lossy(&got).contains(needle) {
            return (String::from_utf8_lossy(&got).into_owned(), false);
        }
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return (String::from_utf8_lossy(&got).into_owned(), false),
            Ok(Ok(0) | Err(_)) => return (String::from_utf8_lossy(&got).into_owned(), true),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// A stream asked for as a connection's first request is served off hyper (`server::streams`):
/// its answer ends with the connection instead of being chunked, its head may come in pieces,
/// a refusal says its length and closes, a head too large is 431, one that never ends is closed
/// at the header timeout, and a client that leaves frees its place at once (not at the next
/// keep-alive comment). Asked for after another request on the same connection, the stream is
/// hyper's, chunked, and reads the same.
#[tokio::test]
async fn a_stream_on_a_connection_of_its_own_ends_with_it_and_frees_its_place_when_the_client_leaves(
) {
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpStream;
    let app = TestApp::spawn_with(|c| {
        c.worker.workers = 0;
        c.limits.max_streams_per_account = 2;
        c.server.header_timeout = Duration::from_secs(1);
    })
    .await;
    let addr = app.base.trim_start_matches("http://").to_string();
    let id = app.imagine(json!({"prompt": "a quiet field"})).await;
    let path = format!("/api/v1/tasks/{id}/events");
    let head = |path: &str| {
        format!(
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: {}\r\n\r\n",
            app.key
        )
    };

    let mut first = TcpStream::connect(&addr).await.unwrap();
    let request = head(&path);
    first.write_all(&request.as_bytes()[..9]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    first.write_all(&request.as_bytes()[9..]).await.unwrap();
    let (got, closed) = read_raw(&mut first, "\n\n", Duration::from_secs(5)).await;
    let (answer_head, body) = got.split_once("\r\n\r\n").expect("a head");
    assert!(answer_head.starts_with("HTTP/1.1 200 OK\r\n"), "{got}");
    assert!(
        answer_head.contains("\r\ncontent-type: text/event-stream"),
        "{got}"
    );
    assert!(answer_head.contains("\r\nconnection: close"), "{got}");
    assert!(!answer_head.contains("transfer-encoding") && !answer_head.contains("content-length"));
    assert!(
        body.starts_with("event: task\n") && body.contains(&id),
        "{got}"
    );
    assert!(!closed);

    // After another request on its connection, a stream is hyper's: chunked.
    let mut pooled = TcpStream::connect(&addr).await.unwrap();
    let both = format!(
        "GET /healthz HTTP/1.1\r\nHost: {addr}\r\n\r\n{}",
        head(&path)
    );
    pooled.write_all(both.as_bytes()).await.unwrap();
    let (got, closed) = read_raw(&mut pooled, "event: task", Duration::from_secs(5)).await;
    let second_head = got.rsplit("HTTP/1.1 ").next().unwrap();
    assert!(second_head.starts_with("200 OK"), "{got}");
    assert!(second_head.contains("transfer-encoding: chunked"), "{got}");
    assert!(!closed && got.contains(&id), "{got}");

    // The account's two places are taken: refused with a length, and closed.
    let mut second = TcpStream::connect(&addr).await.unwrap();
    second
        .write_all(head("/api/v1/events").as_bytes())
        .await
        .unwrap();
    let (got, closed) = read_raw(&mut second, "\u{0}", Duration::from_secs(5)).await;
    assert!(
        got.starts_with("HTTP/1.1 429 Too Many Requests\r\n"),
        "{got}"
    );
    assert!(
        got.contains("\r\ncontent-length: ") && got.contains("quota_exceeded"),
        "{got}"
    );
    assert!(closed, "a refused stream's connection closes");

    // The first client leaves; its place is free well before a keep-alive comment (15 s).
    drop(first);
    let reopened = wait_for(Duration::from_secs(3), || async {
        let (status, events) = Events::open(&app, &app.key, "/api/v1/events", None).await;
        (status == 200).then_some(events)
    })
    .await
    .expect("the place freed once the client left");
    drop(reopened);

    // A head too large, and one that never ends.
    let mut large = TcpStream::connect(&addr).await.unwrap();
    let padding = "a".repeat(66 * 1024);
    let request = format!("GET /api/v1/events HTTP/1.1\r\nHost: x\r\nX-Pad: {padding}\r\n\r\n");
    large.write_all(request.as_bytes()).await.unwrap();
    let (got, closed) = read_raw(&mut large, "\u{0}", Duration::from_secs(5)).await;
    assert!(got.starts_with("HTTP/1.1 431 "), "{got}");
    assert!(closed);
    let mut endless = TcpStream::connect(&addr).await.unwrap();
    let started = std::time::Instant::now();
    endless
        .write_all(b"GET /api/v1/events HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let (got, closed) = read_raw(&mut endless, "\u{0}", Duration::from_secs(5)).await;
    assert!(closed && got.is_empty(), "{got}");
    assert!(started.elapsed() < Duration::from_secs(3));
}
