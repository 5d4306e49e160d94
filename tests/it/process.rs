//! The real `easel` binary: first start, the key commands, SIGKILL mid-task and mid-delivery,
//! and graceful shutdown on SIGTERM.

use std::time::{Duration, Instant};

use crate::common::binary::{run_cli, Easel};
use crate::common::receiver::{Behaviour, Receiver};
use crate::common::{self, split, wait_for};
use serde_json::{json, Value};

#[tokio::test]
async fn first_start_prints_a_working_key_once() {
    let dir = tempfile::tempdir().unwrap();
    let easel = Easel::start(dir.path(), &[]);
    let key = easel.first_key.clone().expect("a key on first start");
    let res = easel
        .http
        .get(format!("{}/api/v1/account", easel.base))
        .header("Authorization", &key)
        .send()
        .await
        .unwrap();
    let (status, account) = split(res).await;
    assert_eq!(status, 200);
    assert_eq!(account["email"], "admin@localhost");
    easel.kill9();
    let again = Easel::start(dir.path(), &[]);
    assert!(again.first_key.is_none(), "the key is shown only once");
}

#[tokio::test]
async fn key_commands_create_list_and_revoke() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, out) = run_cli(
        dir.path(),
        &[
            "keys",
            "create",
            "--name",
            "ci",
            "--account",
            "ci@example.com",
        ],
    );
    assert!(ok);
    let key = out.trim().to_string();
    assert_eq!(out.lines().count(), 1, "only the key: {out:?}");
    assert!(key.starts_with("easel_") && key.len() == 38, "{key}");

    let (ok, list) = run_cli(dir.path(), &["keys", "list"]);
    assert!(ok);
    assert!(!list.contains(&key), "the key itself is never listed");
    assert!(
        list.contains(&key[..12]) && list.contains("ci@example.com"),
        "{list}"
    );
    let id = list
        .lines()
        .find(|l| l.contains("ci@example.com"))
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();

    let easel = Easel::start(dir.path(), &[]);
    assert!(easel.first_key.is_none(), "an account already exists");
    let (status, _) = easel
        .post(&key, "/api/v1/imagine", json!({"prompt": "hi"}))
        .await;
    assert_eq!(status, 200);

    // Revoked while the server runs: refused at once.
    let (ok, _) = run_cli(dir.path(), &["keys", "revoke", &id]);
    assert!(ok);
    let (status, body) = easel
        .post(&key, "/api/v1/imagine", json!({"prompt": "hi"}))
        .await;
    assert_eq!((status, body), (401, json!({})));
    let (ok, _) = run_cli(dir.path(), &["keys", "revoke", &id]);
    assert!(!ok, "revoking twice fails");

    let (ok, secret) = run_cli(
        dir.path(),
        &["signing-secret", "--account", "ci@example.com"],
    );
    assert!(ok && secret.trim().starts_with("whsec_"));
    let (ok, rotated) = run_cli(
        dir.path(),
        &["signing-secret", "--account", "ci@example.com", "--rotate"],
    );
    assert!(ok && rotated.trim().starts_with("whsec_") && rotated != secret);
    let (_, now) = run_cli(
        dir.path(),
        &["signing-secret", "--account", "ci@example.com"],
    );
    assert_eq!(now, rotated);
}

#[tokio::test]
async fn a_task_whose_process_is_killed_mid_generation_still_finishes_once() {
    let receiver = Receiver::start(vec![Behaviour::Status(200)]).await;
    let dir = tempfile::tempdir().unwrap();
    let slow = [
        ("EASEL_WORKERS", "1"),
        ("EASEL_PROCEDURAL_MIN_DURATION", "2s"),
    ];
    let easel = Easel::start(dir.path(), &slow);
    let key = easel.first_key.clone().unwrap();
    let id = easel
        .imagine(
            &key,
            json!({"prompt": "survive", "webhook_url": receiver.url}),
        )
        .await;
    easel
        .wait_status(&key, &id, "processing", Duration::from_secs(10))
        .await;
    easel.kill9();

    let easel = Easel::start(dir.path(), &slow);
    let record = easel
        .wait_status(&key, &id, "finished", Duration::from_secs(30))
        .await;
    assert_eq!(record["image_urls"].as_array().unwrap().len(), 4);
    wait_for(Duration::from_secs(10), || async {
        (receiver.count() >= 1).then_some(())
    })
    .await
    .expect("webhook");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(receiver.count(), 1, "finished exactly once");
    // Only the surviving attempt's images are on disk.
    let folders = std::fs::read_dir(dir.path().join("data/files").join(&id))
        .unwrap()
        .count();
    assert_eq!(folders, 1);
}

#[tokio::test]
async fn a_webhook_in_flight_when_the_process_is_killed_is_delivered_after_restart() {
    let receiver = Receiver::start(vec![Behaviour::Hang(Duration::from_secs(30))]).await;
    let dir = tempfile::tempdir().unwrap();
    let easel = Easel::start(dir.path(), &[("EASEL_WEBHOOK_TIMEOUT", "5s")]);
    let key = easel.first_key.clone().unwrap();
    let id = easel
        .imagine(&key, json!({"prompt": "hook", "webhook_url": receiver.url}))
        .await;
    wait_for(Duration::from_secs(10), || async {
        (receiver.count() == 1).then_some(())
    })
    .await
    .expect("first attempt under way");
    easel.kill9();
    receiver.set(vec![Behaviour::Status(200)]);

    // The claim's lease (3 x timeout + 5 s: 20 s) must run out before the restart takes it over.
    let easel = Easel::start(dir.path(), &[("EASEL_WEBHOOK_TIMEOUT", "1s")]);
    let record = wait_for(Duration::from_secs(40), || async {
        let t = easel.fetch(&key, &id).await;
        (t["webhook"]["status"] == "delivered").then_some(t)
    })
    .await
    .expect("delivered after the restart");
    assert_eq!(record["status"], "finished");
    assert!(receiver.count() >= 2);
}

#[tokio::test]
async fn sigterm_stops_taking_work_and_exits_in_bounded_time() {
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("EASEL_WORKERS", "1"),
        ("EASEL_PROCEDURAL_MIN_DURATION", "1s"),
    ];
    let mut easel = Easel::start(dir.path(), &env);
    let key = easel.first_key.clone().unwrap();
    let id = easel.imagine(&key, json!({"prompt": "drain me"})).await;
    easel
        .wait_status(&key, &id, "processing", Duration::from_secs(10))
        .await;
    let started = Instant::now();
    easel.terminate();
    let status = loop {
        if let Some(status) = easel.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "exits within the bound"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
    // The running task was allowed to finish before the exit.
    let easel = Easel::start(dir.path(), &env);
    assert_eq!(easel.fetch(&key, &id).await["status"], "finished");
}

/// Every request leaves one line in the log when it ends, with what it learned on its way: its
/// request id, the account it acted for, the task it was about, its status and its latency.
#[tokio::test]
async fn every_request_leaves_one_access_line_with_what_it_learned() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("easel.log");
    let mut easel = Easel::start_with(
        dir.path(),
        &[("RUST_LOG", "info")],
        std::fs::File::create(&log).unwrap().into(),
    );
    let key = easel.first_key.clone().unwrap();
    let submit = easel
        .http
        .post(format!("{}/api/v1/imagine", easel.base))
        .header("Authorization", &key)
        .header("x-request-id", "submit-1")
        .json(&json!({"prompt": "a line in the log"}))
        .send()
        .await
        .unwrap();
    assert_eq!(submit.status(), 200);
    let task_id = submit.json::<serde_json::Value>().await.unwrap()["task_id"]
        .as_str()
        .unwrap()
        .to_string();
    let unknown = "0b6f3c7e-1d2b-4c3a-8f00-000000000000";
    let (status, _) = easel
        .post(&key, "/api/v1/fetch", json!({ "task_id": unknown }))
        .await;
    assert_eq!(status, 404);
    let refused = easel
        .http
        .get(format!("{}/api/v1/account", easel.base))
        .header("Authorization", "easel_not-a-live-key-but-well-formed00")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);

    // A graceful stop writes the lines still waiting.
    easel.terminate();
    easel.child.wait().unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("request done"))
        .collect();
    assert_eq!(lines.len(), 3, "{text}");
    let submitted = lines
        .iter()
        .find(|l| l.contains("request_id=\"submit-1\""))
        .expect("the submit's line, under the caller's request id");
    for field in [
        "method=POST".to_string(),
        "path=/api/v1/imagine".to_string(),
        "client=127.0.0.1".to_string(),
        "account=\"".to_string(),
        format!("task_id={task_id}"),
        "status=200".to_string(),
        "latency_ms=".to_string(),
    ] {
        assert!(submitted.contains(&field), "{field} in {submitted}");
    }
    let fetched = lines
        .iter()
        .find(|l| l.contains("path=/api/v1/fetch"))
        .unwrap();
    assert!(fetched.contains(&format!("task_id={unknown}")), "{fetched}");
    assert!(fetched.contains("status=404") && fetched.contains("account=\""));
    let refused = lines
        .iter()
        .find(|l| l.contains("path=/api/v1/account"))
        .unwrap();
    assert!(
        !refused.contains("account="),
        "no account for a dead key: {refused}"
    );
    assert!(!text.contains(&key), "the key itself is never logged");
}

/// With JSON logs every line of the log is a JSON object, and the access line carries its fields
/// as values: the caller's request id as sent, quotes and all; the status and latency as numbers.
#[tokio::test]
async fn json_logs_give_the_access_line_as_json() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("easel.log");
    let mut easel = Easel::start_with(
        dir.path(),
        &[
            ("RUST_LOG", "info"),
            ("EASEL_LOG_FORMAT", "json"),
            ("EASEL_TRUSTED_PROXIES", "127.0.0.0/8"),
        ],
        std::fs::File::create(&log).unwrap().into(),
    );
    let key = easel.first_key.clone().unwrap();
    let request_id = r#"a "quoted" \ id"#;
    let submit = easel
        .http
        .post(format!("{}/api/v1/imagine", easel.base))
        .header("Authorization", &key)
        .header("x-request-id", request_id)
        // From a trusted proxy: the address it forwards is the client's.
        .header("x-forwarded-for", "198.51.100.4, 203.0.113.9")
        .json(&json!({"prompt": "a line in the log"}))
        .send()
        .await
        .unwrap();
    assert_eq!(submit.status(), 200);
    let task_id = submit.json::<Value>().await.unwrap()["task_id"]
        .as_str()
        .unwrap()
        .to_string();
    easel.terminate();
    easel.child.wait().unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let access: Vec<&Value> = lines
        .iter()
        .filter(|l| l["fields"]["message"] == "request done")
        .collect();
    assert_eq!(access.len(), 1, "{text}");
    let line = access[0];
    assert_eq!(line["level"], "INFO");
    assert_eq!(line["target"], "easel::http::access");
    assert!(line["timestamp"].is_string(), "{line}");
    let fields = &line["fields"];
    assert_eq!(fields["method"], "POST");
    assert_eq!(fields["path"], "/api/v1/imagine");
    assert_eq!(fields["client"], "203.0.113.9");
    assert_eq!(fields["request_id"], request_id);
    assert_eq!(fields["task_id"], task_id.as_str());
    assert!(fields["account"].is_string(), "{line}");
    assert_eq!(fields["status"], 200);
    assert!(fields["latency_ms"].as_f64().unwrap() > 0.0, "{line}");
    assert!(!text.contains(&key), "the key itself is never logged");
}

/// `easel imagine --wait --json` against `base` with `key`: whether it succeeded, its stdout
/// (the record) and its stderr (the progress it showed).
fn imagine_and_wait(dir: &std::path::Path, base: &str, key: &str) -> (bool, Value, String) {
    let out = common::binary::command(dir, &[("EASEL_API_KEY", key), ("EASEL_URL", base)])
        .args(["imagine", "a patient lighthouse", "--wait", "--json"])
        .args(["--timeout", "60s"])
        .output()
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    let record = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {:?} / {stderr}", String::from_utf8_lossy(&out.stdout)));
    (out.status.success(), record, stderr)
}

/// Whether `stderr` shows a bar part of the way (`[####      ] 40%`).
fn shows_a_bar_part_way(stderr: &str) -> bool {
    stderr.lines().any(|l| {
        l.starts_with('[')
            && l.strip_suffix('%')
                .and_then(|l| l.rsplit(' ').next())
                .and_then(|p| p.parse::<u32>().ok())
                .is_some_and(|p| p > 0 && p < 100)
    })
}

#[tokio::test]
async fn imagine_wait_follows_the_tasks_events_to_the_finished_record() {
    let dir = tempfile::tempdir().unwrap();
    let easel = Easel::start(dir.path(), &[("EASEL_PROCEDURAL_MIN_DURATION", "3s")]);
    let key = easel.first_key.clone().unwrap();
    let base = easel.base.clone();
    let run_dir = dir.path().to_path_buf();
    let (ok, record, stderr) =
        tokio::task::spawn_blocking(move || imagine_and_wait(&run_dir, &base, &key))
            .await
            .unwrap();
    assert!(ok, "{stderr}");
    assert_eq!(record["status"], "finished", "{record}");
    assert_eq!(record["image_urls"].as_array().unwrap().len(), 4);
    assert!(shows_a_bar_part_way(&stderr), "{stderr}");
    assert_eq!(stderr.lines().last(), Some("finished"), "{stderr}");
}

/// A server of the API's shape for the client, that says what `events` tells it to on
/// `/api/v1/tasks/{id}/events` (no such route when `None`) and counts the reads of the task.
mod old_or_broken {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::{Arc, Mutex};

    use axum::extract::State;
    use axum::http::HeaderMap;
    use axum::routing::{get, post};
    use axum::{Json, Router};
    use serde_json::{json, Value};

    pub const ID: &str = "0195e4a0-0000-7000-8000-000000000001";

    #[derive(Clone, Default)]
    pub struct Seen {
        pub reads: Arc<AtomicU32>,
        pub last_event_ids: Arc<Mutex<Vec<Option<String>>>>,
    }

    pub fn record(status: &str, percentage: &str) -> Value {
        json!({"task_id": ID, "status": status, "percentage": percentage, "image_urls": []})
    }

    pub async fn start(events: bool) -> (String, Seen) {
        let seen = Seen::default();
        let mut app = Router::new()
            .route(
                "/api/v1/imagine",
                post(|| async { Json(json!({"task_id": ID})) }),
            )
            .route(
                "/api/v1/tasks/{id}",
                get(|State(seen): State<Seen>| async move {
                    let n = seen.reads.fetch_add(1, Ordering::SeqCst);
                    Json(match n {
                        0 => record("pending", "0"),
                        1 => record("processing", "50"),
                        _ => record("finished", "100"),
                    })
                }),
            );
        if events {
            // The first connection breaks after one event; the next resumes after it.
            app = app.route(
                "/api/v1/tasks/{id}/events",
                get(|State(seen): State<Seen>, headers: HeaderMap| async move {
                    let last = headers
                        .get("last-event-id")
                        .map(|v| v.to_str().unwrap().to_string());
                    let first = last.is_none();
                    seen.last_event_ids.lock().unwrap().push(last);
                    let body = if first {
                        format!(
                            "event: task\nid: 7\ndata: {}\n\n: keep-alive\n\nevent: progress\nid: 7.1\ndata: {}\n\n",
                            json!({"task_id": ID, "status": "pending", "percentage": "0", "queue_position": 2}),
                            json!({"task_id": ID, "status": "processing", "percentage": "30"}),
                        )
                    } else {
                        format!(
                            "event: progress\nid: 7.2\ndata: {}\n\nevent: task\nid: 8\ndata: {}\n\n",
                            json!({"task_id": ID, "status": "processing", "percentage": "90"}),
                            record("finished", "100"),
                        )
                    };
                    ([("content-type", "text/event-stream")], body)
                }),
            );
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let app = app.with_state(seen.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (base, seen)
    }
}

#[tokio::test]
async fn imagine_wait_resumes_a_broken_stream_from_its_last_event() {
    let (base, seen) = old_or_broken::start(true).await;
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().to_path_buf();
    let (ok, record, stderr) =
        tokio::task::spawn_blocking(move || imagine_and_wait(&run_dir, &base, "easel_x"))
            .await
            .unwrap();
    assert!(ok, "{stderr}");
    assert_eq!(record["status"], "finished");
    assert_eq!(
        *seen.last_event_ids.lock().unwrap(),
        vec![None, Some("7.1".to_string())]
    );
    assert_eq!(
        stderr.lines().collect::<Vec<_>>(),
        [
            "queued, 2 ahead",
            "[###       ] 30%",
            "[######### ] 90%",
            "finished"
        ],
        "{stderr}"
    );
    assert_eq!(seen.reads.load(std::sync::atomic::Ordering::SeqCst), 0);
}

#[tokio::test]
async fn imagine_wait_reads_the_task_again_on_a_server_without_events() {
    let (base, seen) = old_or_broken::start(false).await;
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().to_path_buf();
    let (ok, record, stderr) =
        tokio::task::spawn_blocking(move || imagine_and_wait(&run_dir, &base, "easel_x"))
            .await
            .unwrap();
    assert!(ok, "{stderr}");
    assert_eq!(record["status"], "finished");
    assert!(stderr.contains("[#####     ] 50%"), "{stderr}");
    assert_eq!(seen.reads.load(std::sync::atomic::Ordering::SeqCst), 3);
}

/// `serve` started with its open-files limit at `soft`/`hard` (as a shell's `ulimit -n` or a
/// unit's `LimitNOFILE` sets it) and `max_connections`: the soft limit the running node has,
/// and its log once it has stopped.
#[cfg(target_os = "linux")]
fn open_files_at_start(soft: u64, hard: u64, max_connections: &str) -> (u64, String) {
    use std::io::{BufRead, Read, Write};
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("easel.log");
    let mut cmd =
        crate::common::binary::command(dir.path(), &[("EASEL_MAX_CONNECTIONS", max_connections)]);
    cmd.arg("serve")
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap());
    // Safety: between fork and exec this only calls setrlimit, which is async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            let limit = libc::rlimit {
                rlim_cur: soft,
                rlim_max: hard,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let addr = stdout
        .lines()
        .find_map(|line| {
            let line = line.unwrap();
            let base = line.strip_prefix("easel listening on http://")?;
            Some(base.to_string())
        })
        .expect("easel printed its address");
    // The limit is raised just before the server loop starts: once /healthz is answered.
    let mut healthz = std::net::TcpStream::connect(&addr).unwrap();
    healthz
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    healthz.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", child.id())).unwrap();
    let open_files = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{limits}"));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    child.wait().unwrap();
    (open_files, std::fs::read_to_string(&log).unwrap())
}

/// A node started with a low soft open-files limit raises it to the hard one, and says so in
/// its log when even the hard one leaves too little room for `max_connections`.
#[cfg(target_os = "linux")]
#[test]
fn a_node_raises_its_open_files_limit_and_warns_when_the_hard_one_is_short() {
    let (open_files, log) = open_files_at_start(256, 4096, "1000");
    assert_eq!(open_files, 4096, "{log}");
    assert!(!log.contains("open-files limit"), "{log}");

    let (open_files, log) = open_files_at_start(256, 1024, "4096");
    assert_eq!(open_files, 1024, "{log}");
    assert!(
        log.contains("the open-files limit is below max_connections"),
        "{log}"
    );
}
