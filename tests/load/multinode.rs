//! Several `easel serve` processes sharing one PostgreSQL database and one S3 bucket, each with
//! a data dir of its own: a thousand tasks with webhooks submitted across three nodes while one
//! of them is killed with SIGKILL, and nodes that run only some of the roles.
//!
//! Needs `EASEL_TEST_POSTGRES` and `EASEL_TEST_S3_ENDPOINT` (scripts/test.sh sets both). Without
//! either the tests say so in one line and return, except under `CI=true`, where they fail.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use serde_json::{json, Value};
use sqlx::Row;

use crate::common::binary::{command, Easel};
use crate::common::receiver::{Behaviour, Receiver};
use crate::common::{self, s3::new_bucket};
use crate::common::{split, wait_for};

const TASKS: usize = 1000;
const IN_FLIGHT: usize = 16;

/// The PostgreSQL database and the S3 endpoint the tests run on, or `None` (after one line on
/// stderr) when either is missing and the tests are to be skipped. Under `CI=true` a missing one
/// fails the test instead.
fn services(test: &str) -> Option<(String, String)> {
    let postgres = common::postgres();
    let s3 = common::s3::endpoint();
    match (postgres, s3) {
        (Some(pg), Some(s3)) => Some((pg, s3)),
        (pg, s3) => {
            let missing: Vec<&str> = [
                pg.is_none().then_some("EASEL_TEST_POSTGRES"),
                s3.is_none().then_some("EASEL_TEST_S3_ENDPOINT"),
            ]
            .into_iter()
            .flatten()
            .collect();
            let _ = writeln!(
                std::io::stderr(),
                "tests/load/multinode.rs: {test} skipped ({} not set; scripts/test.sh sets both)",
                missing.join(" and ")
            );
            None
        }
    }
}

/// The environment every node of one cluster shares: the database, the bucket, and settings
/// that keep the run short (128-pixel images, a 2 s lease from `binary::command`).
fn cluster_env(database_url: &str, endpoint: &str, bucket: &str) -> Vec<(String, String)> {
    let access = std::env::var("AWS_ACCESS_KEY_ID").unwrap_or_else(|_| "easel-test".into());
    let secret = std::env::var("AWS_SECRET_ACCESS_KEY").unwrap_or_else(|_| "easel-test".into());
    [
        ("EASEL_DATABASE_URL", database_url),
        // PostgreSQL allows 100 connections, shared with the other tests running beside these.
        ("EASEL_DATABASE_MAX_CONNECTIONS", "8"),
        ("EASEL_BLOB_STORE", "s3"),
        ("EASEL_S3_BUCKET", bucket),
        ("EASEL_S3_ENDPOINT", endpoint),
        ("EASEL_S3_PATH_STYLE", "true"),
        ("AWS_ACCESS_KEY_ID", &access),
        ("AWS_SECRET_ACCESS_KEY", &secret),
        ("EASEL_IMAGE_SIZE", "128"),
        ("EASEL_LEASE", "2s"),
        ("EASEL_WORKERS", "2"),
        // Long enough that every node has work in flight when one is killed.
        ("EASEL_PROCEDURAL_MIN_DURATION", "20ms"),
        // The whole batch may be queued at once (a retried submit may add one more).
        ("EASEL_PLANS__SELF-HOSTED__MAX_PENDING", "2000"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

fn start_node(dir: &std::path::Path, args: &[&str], env: &[(String, String)]) -> Easel {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Easel::start_serve(dir, args, &env, Stdio::inherit())
}

/// A connection to the cluster's database, as an operator would look at it.
async fn database(url: &str) -> sqlx::AnyConnection {
    let mut config = easel::config::Config::default();
    config.database.url = Some(url.to_string());
    common::database(&config).await
}

async fn count(db: &mut sqlx::AnyConnection, sql: &str) -> i64 {
    sqlx::query(sql)
        .fetch_one(db)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .get::<i64, _>(0)
}

fn unix_ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

/// The blob keys an image URL names: its path after `/files/`.
fn key_of(url: &str) -> String {
    url.split_once("/files/")
        .unwrap_or_else(|| panic!("not an easel file URL: {url}"))
        .1
        .to_string()
}

/// The keys of a finished record's or payload's images: the four, then the grid.
fn image_keys(v: &Value) -> Vec<String> {
    let mut keys: Vec<String> = v["image_urls"]
        .as_array()
        .unwrap_or_else(|| panic!("no image_urls: {v}"))
        .iter()
        .map(|u| key_of(u.as_str().unwrap()))
        .collect();
    keys.push(key_of(v["original_image_url"].as_str().unwrap()));
    keys
}

/// Submit one imagine task, starting at node `first` and going round the others when a node
/// cannot be reached (as a client with several addresses would). `unsure` counts attempts that
/// failed after the request may have reached a node (a task may exist that no one knows of).
/// The task id, and whether a node was found unreachable on the way.
async fn submit(
    http: &reqwest::Client,
    bases: &[String],
    key: &str,
    first: usize,
    body: &Value,
    unsure: &AtomicUsize,
) -> (String, bool) {
    let mut failed_over = false;
    for round in 0..3 * bases.len() {
        let base = &bases[(first + round) % bases.len()];
        let res = http
            .post(format!("{base}/api/v1/imagine"))
            .header("Authorization", key)
            .json(body)
            .timeout(Duration::from_secs(10))
            .send()
            .await;
        match res {
            Ok(res) => {
                let status = res.status();
                // The node may die between its headers and its body: the task may exist.
                let Ok(text) = res.text().await else {
                    unsure.fetch_add(1, Ordering::Relaxed);
                    failed_over = true;
                    continue;
                };
                assert_eq!(status, 200, "submit to {base}: {text}");
                let answer: Value = serde_json::from_str(&text).unwrap();
                let id = answer["task_id"].as_str().unwrap().to_string();
                return (id, failed_over);
            }
            Err(e) => {
                if !e.is_connect() {
                    unsure.fetch_add(1, Ordering::Relaxed);
                }
                failed_over = true;
            }
        }
    }
    panic!("no node took the submit");
}

/// The records of `ids`, fetched from `base` 20 at a time.
async fn fetch_all(http: &reqwest::Client, base: &str, key: &str, ids: &[String]) -> Vec<Value> {
    let mut records = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(20) {
        let res = http
            .post(format!("{base}/api/v1/fetch-many"))
            .header("Authorization", key)
            .json(&json!({ "task_ids": chunk }))
            .send()
            .await
            .unwrap();
        let (status, body) = split(res).await;
        assert_eq!(status, 200, "{body}");
        let tasks = body["tasks"].as_array().unwrap();
        assert_eq!(tasks.len(), chunk.len(), "every id is known: {body}");
        records.extend(tasks.iter().cloned());
    }
    records
}

async fn get_bytes(http: &reqwest::Client, url: &str) -> bytes::Bytes {
    let res = http.get(url).send().await.unwrap();
    assert_eq!(res.status(), 200, "{url}");
    assert_eq!(res.headers()["content-type"], "image/png", "{url}");
    res.bytes().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_on_postgres_and_s3_survive_losing_one_to_sigkill() {
    let Some((postgres, endpoint)) =
        services("three_nodes_on_postgres_and_s3_survive_losing_one_to_sigkill")
    else {
        return;
    };
    let _turn = crate::one_at_a_time().await;
    let database_url = common::fresh_postgres_url(&postgres);
    let bucket = new_bucket(&endpoint).await;
    let env = cluster_env(&database_url, &endpoint, &bucket);
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();

    // The first node makes the account and prints its key; the others find the account there.
    let first = start_node(dirs[0].path(), &[], &env);
    let key = first
        .first_key
        .clone()
        .expect("the first node prints a key");
    let mut nodes = vec![first];
    for dir in &dirs[1..] {
        let node = start_node(dir.path(), &[], &env);
        assert!(
            node.first_key.is_none(),
            "the account exists: no second key"
        );
        nodes.push(node);
    }
    let bases: Arc<Vec<String>> = Arc::new(nodes.iter().map(|n| n.base.clone()).collect());
    const VICTIM: usize = 1;
    let survivors: Vec<String> = (0..3)
        .filter(|&i| i != VICTIM)
        .map(|i| bases[i].clone())
        .collect();

    let receiver = Receiver::start(vec![Behaviour::Status(200)]).await;
    let http = reqwest::Client::new();
    let submitted = Arc::new(AtomicUsize::new(0));
    let failed_over = Arc::new(AtomicUsize::new(0));
    let unsure = Arc::new(AtomicUsize::new(0));

    // Submit in the background, 16 at a time, round-robin over all three nodes.
    let started = Instant::now();
    let submitting = {
        let (http, bases, key, hook) = (
            http.clone(),
            bases.clone(),
            key.clone(),
            receiver.url.clone(),
        );
        let (submitted, failed_over, unsure) =
            (submitted.clone(), failed_over.clone(), unsure.clone());
        tokio::spawn(async move {
            let ids: Vec<String> = futures::stream::iter(0..TASKS)
                .map(|i| {
                    let (http, bases, key, submitted, failed_over, unsure) = (
                        http.clone(),
                        bases.clone(),
                        key.clone(),
                        submitted.clone(),
                        failed_over.clone(),
                        unsure.clone(),
                    );
                    let body = json!({
                        "prompt": format!("multinode task {i}"),
                        "webhook_url": hook,
                    });
                    async move {
                        let (id, over) =
                            submit(&http, &bases, &key, i % bases.len(), &body, &unsure).await;
                        if over {
                            failed_over.fetch_add(1, Ordering::Relaxed);
                        }
                        submitted.fetch_add(1, Ordering::Relaxed);
                        id
                    }
                })
                .buffer_unordered(IN_FLIGHT)
                .collect()
                .await;
            ids
        })
    };

    // A third of the way in, kill one node outright.
    let victim = nodes.remove(VICTIM);
    wait_for(Duration::from_secs(60), || async {
        (submitted.load(Ordering::Relaxed) >= TASKS / 3).then_some(())
    })
    .await
    .expect("a third of the tasks submitted within 60 s");
    // Kill it while its workers hold tasks: stop it, look in the database for tasks leased to
    // it (a worker's lease owner starts with its process id), and let it go on until one is
    // held. Stopped, it cannot finish them between the look and the kill.
    let pid = nix::unistd::Pid::from_raw(victim.child.id() as i32);
    let mut db = database(&database_url).await;
    let held_sql = format!(
        "SELECT COUNT(*) FROM tasks WHERE lease_owner LIKE '{pid}-%' \
         AND status IN ('starting', 'processing')"
    );
    let mut held = 0;
    for _ in 0..1000 {
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
        held = count(&mut db, &held_sql).await;
        if held > 0 {
            break;
        }
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(held > 0, "the node to be killed never held a task");
    let killed_at = SystemTime::now();
    let killed_after = started.elapsed();
    let submitted_at_kill = submitted.load(Ordering::Relaxed);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
    drop(victim); // reaps it

    let ids = submitting.await.unwrap();
    let submit_time = started.elapsed();
    assert_eq!(ids.len(), TASKS);
    assert_eq!(
        ids.iter().collect::<HashSet<_>>().len(),
        TASKS,
        "every submit got a task id of its own"
    );

    // Every task reaches a final state; read from one survivor.
    let all_final = wait_for(Duration::from_secs(120), || async {
        let records = fetch_all(&http, &survivors[0], &key, &ids).await;
        records
            .iter()
            .all(|r| matches!(r["status"].as_str(), Some("finished" | "failed")))
            .then_some(records)
    })
    .await;
    let final_time = started.elapsed();
    let records = all_final.unwrap_or_else(|| {
        panic!("not every task was final 120 s after the submits ({submit_time:?})")
    });
    let not_finished: Vec<&Value> = records
        .iter()
        .filter(|r| r["status"] != "finished")
        .collect();
    assert!(
        not_finished.is_empty(),
        "{} tasks did not finish, for example {}",
        not_finished.len(),
        not_finished[0]
    );

    // A submit whose answer was lost with the killed node may still have made a task, which
    // its retry then made again (the API has no idempotency key): such a task is known to no
    // client, but it is a task all the same and must end like the others.
    drop(db);
    let mut db = database(&database_url).await;
    let unsure = unsure.load(Ordering::Relaxed);
    wait_for(Duration::from_secs(30), || async {
        let mut db = database(&database_url).await;
        let open = count(
            &mut db,
            "SELECT COUNT(*) FROM tasks WHERE status NOT IN ('finished', 'failed')",
        )
        .await;
        (open == 0).then_some(())
    })
    .await
    .expect("every stored task ends, including any made by a lost answer");
    let tasks = count(&mut db, "SELECT COUNT(*) FROM tasks").await;
    assert!(
        tasks >= TASKS as i64 && tasks <= (TASKS + unsure) as i64,
        "{tasks} tasks stored for {TASKS} submits ({unsure} answers lost)"
    );
    let unanswered = tasks as usize - TASKS;

    // Every webhook arrives: at least once per task, and each with the record's images.
    let known: HashSet<&str> = ids.iter().map(String::as_str).collect();
    let deliveries = wait_for(Duration::from_secs(60), || async {
        let got = receiver.received();
        let delivered: HashSet<String> = got
            .iter()
            .filter_map(|r| serde_json::from_slice::<Value>(&r.body).ok())
            .filter_map(|v| v["task_id"].as_str().map(str::to_string))
            .collect();
        (delivered.len() >= tasks as usize && known.iter().all(|id| delivered.contains(*id)))
            .then_some(got)
    })
    .await;
    let webhooks_time = started.elapsed();
    let deliveries = deliveries.unwrap_or_else(|| {
        panic!(
            "webhooks for only some tasks arrived ({} deliveries)",
            receiver.count()
        )
    });
    // The tasks no client knows of, as their webhooks name them, with their records.
    let unknown: Vec<String> = deliveries
        .iter()
        .filter_map(|d| serde_json::from_slice::<Value>(&d.body).ok())
        .filter_map(|v| v["task_id"].as_str().map(str::to_string))
        .filter(|id| !known.contains(id.as_str()))
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(
        unknown.len(),
        unanswered,
        "webhooks for tasks never submitted: {unknown:?}"
    );
    let unknown_records = if unknown.is_empty() {
        Vec::new()
    } else {
        fetch_all(&http, &survivors[0], &key, &unknown).await
    };
    let by_id: HashMap<&str, &Value> = records
        .iter()
        .chain(&unknown_records)
        .map(|r| (r["task_id"].as_str().unwrap(), r))
        .collect();
    let mut per_task: HashMap<String, usize> = HashMap::new();
    let mut message_ids: HashMap<String, HashSet<String>> = HashMap::new();
    for delivery in &deliveries {
        let payload: Value = serde_json::from_slice(&delivery.body).unwrap();
        let id = payload["task_id"].as_str().unwrap().to_string();
        assert_eq!(payload["status"], "finished", "{payload}");
        let record = by_id[id.as_str()];
        assert_eq!(record["status"], "finished", "{record}");
        assert_eq!(
            image_keys(&payload),
            image_keys(record),
            "the delivered images are the record's: {payload} against {record}"
        );
        *per_task.entry(id.clone()).or_default() += 1;
        message_ids
            .entry(id)
            .or_default()
            .insert(delivery.headers["webhook-id"].to_str().unwrap().to_string());
    }
    assert_eq!(per_task.len(), tasks as usize);
    let duplicates: usize = per_task.values().map(|n| n - 1).sum();
    assert!(
        message_ids.values().all(|m| m.len() == 1),
        "a task's deliveries all carry its one webhook-id"
    );

    // Every image of a sample is served, byte for byte alike, by both survivors.
    let started_files = Instant::now();
    for record in records.iter().step_by(TASKS / 50) {
        for key in image_keys(record) {
            let a = get_bytes(&http, &format!("{}/files/{key}", survivors[0])).await;
            let b = get_bytes(&http, &format!("{}/files/{key}", survivors[1])).await;
            assert!(a == b, "{key} differs between the survivors");
        }
    }
    let files_time = started_files.elapsed();

    // From the database: one row per task, all finished; one delivery per task, delivered; the
    // stored images are those the webhook carried (no late worker changed them afterwards).
    assert_eq!(
        count(
            &mut db,
            "SELECT COUNT(*) FROM tasks WHERE status <> 'finished' OR finished_at IS NULL \
             OR grid_key IS NULL"
        )
        .await,
        0,
        "every stored task finished"
    );
    // Each task ended once: a second ending would have counted its images again and taken
    // one more off the account's active tasks.
    assert_eq!(
        count(
            &mut db,
            "SELECT CAST(SUM(active_tasks) AS BIGINT) FROM accounts"
        )
        .await,
        0
    );
    assert_eq!(
        count(
            &mut db,
            "SELECT CAST(SUM(total_images) AS BIGINT) FROM accounts"
        )
        .await,
        4 * tasks
    );
    let repeated: Vec<(i64, i64)> = sqlx::query(
        "SELECT task_seq, COUNT(*) FROM webhook_deliveries GROUP BY task_seq HAVING COUNT(*) > 1",
    )
    .fetch_all(&mut db)
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get::<i64, _>(0), r.get::<i64, _>(1)))
    .collect();
    assert!(
        repeated.is_empty(),
        "tasks with several deliveries: {repeated:?}"
    );
    assert_eq!(
        count(
            &mut db,
            "SELECT COUNT(*) FROM webhook_deliveries WHERE status = 'delivered'"
        )
        .await,
        tasks,
        "one delivered webhook per task"
    );
    assert_eq!(
        count(
            &mut db,
            "SELECT COUNT(*) FROM tasks t JOIN webhook_deliveries d ON d.task_seq = t.seq"
        )
        .await,
        tasks
    );
    let stored: Vec<(String, String)> = sqlx::query(
        "SELECT d.task_id, p.payload FROM webhook_payloads p \
         JOIN webhook_deliveries d ON d.task_seq = p.task_seq",
    )
    .fetch_all(&mut db)
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get::<String, _>(0), r.get::<String, _>(1)))
    .collect();
    for (id, payload) in &stored {
        let payload: Value = serde_json::from_str(payload).unwrap();
        assert_eq!(
            image_keys(&payload),
            image_keys(by_id[id.as_str()]),
            "task {id}"
        );
    }
    let retried = count(&mut db, "SELECT COUNT(*) FROM tasks WHERE attempts > 1").await;
    let most_attempts = count(&mut db, "SELECT MAX(attempts) FROM tasks").await;
    let last_retried_finished = if retried > 0 {
        let ms = count(
            &mut db,
            "SELECT MAX(finished_at) FROM tasks WHERE attempts > 1",
        )
        .await;
        Some(Duration::from_millis(
            (ms - unix_ms(killed_at)).max(0) as u64
        ))
    } else {
        None
    };

    let figures = format!(
        "multinode figures: {TASKS} tasks, {IN_FLIGHT} submits in flight over 3 nodes; node \
         {VICTIM} SIGKILLed {killed_after:.2?} in, after {submitted_at_kill} submits, holding {held} \
         tasks; all \
         submitted in {submit_time:.2?} ({} submits failed over to another node, {unsure} \
         answers lost, {tasks} tasks stored: {unanswered} made by a submit whose answer was \
         lost); all final {final_time:.2?} after the first submit; all webhooks in by \
         {webhooks_time:.2?}; {retried} tasks retried after the kill (most attempts \
         {most_attempts}), the last of them finished {} after the kill; {} webhook deliveries \
         received, {duplicates} duplicates; 250 images checked on both survivors in \
         {files_time:.2?}",
        failed_over.load(Ordering::Relaxed),
        last_retried_finished
            .map(|d| format!("{d:.2?}"))
            .unwrap_or_else(|| "(none)".into()),
        deliveries.len(),
    );
    let _ = writeln!(std::io::stderr(), "{figures}");
    assert!(
        retried >= held,
        "the killed node held {held} tasks, so at least those were retried"
    );
    drop(nodes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_runs_only_the_roles_it_is_given() {
    // An unknown role stops `serve` before it opens anything, naming the setting.
    let dir = tempfile::tempdir().unwrap();
    for (args, env) in [
        (vec!["serve"], vec![("EASEL_ROLES", "api,cook")]),
        (vec!["serve", "--role", "api,cook"], vec![]),
    ] {
        let out = command(dir.path(), &env)
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} {env:?}: {stderr}");
        assert!(
            stderr.contains("roles") && stderr.contains("cook"),
            "{args:?} {env:?}: {stderr}"
        );
    }

    let Some((postgres, endpoint)) = services("a_node_runs_only_the_roles_it_is_given") else {
        return;
    };
    let database_url = common::fresh_postgres_url(&postgres);
    let bucket = new_bucket(&endpoint).await;
    let env = cluster_env(&database_url, &endpoint, &bucket);
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    // A answers the API and does nothing else; B works and delivers, and answers no API.
    let a = start_node(dir_a.path(), &["--role", "api"], &env);
    let key = a.first_key.clone().expect("the first node prints a key");
    let mut env_b = env.clone();
    env_b.push(("EASEL_ROLES".into(), "worker,dispatcher".into()));
    let b = start_node(dir_b.path(), &[], &env_b);
    assert!(b.first_key.is_none());

    let http = reqwest::Client::new();
    let res = http
        .get(format!("{}/healthz", b.base))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    for path in ["/api/v1/imagine", "/api/v1/fetch"] {
        let res = http
            .post(format!("{}{path}", b.base))
            .header("Authorization", &key)
            .json(&json!({"prompt": "not here"}))
            .send()
            .await
            .unwrap();
        let (status, body) = split(res).await;
        assert_eq!(status, 404, "{path} on a worker node: {body}");
        assert_eq!(body["errors"][0]["code"], "route_not_found", "{body}");
    }

    // Submitted through A, generated and delivered by B.
    let receiver = Receiver::start(vec![Behaviour::Status(200)]).await;
    let id = a
        .imagine(
            &key,
            json!({"prompt": "split roles", "webhook_url": receiver.url}),
        )
        .await;
    let record = wait_for(Duration::from_secs(30), || async {
        let r = a.fetch(&key, &id).await;
        (r["status"] == "finished" && r["webhook"]["status"] == "delivered").then_some(r)
    })
    .await
    .unwrap_or_else(|| panic!("task {id} not finished and delivered by B"));
    assert!(
        record["original_image_url"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{}/files/", a.base)),
        "{record}"
    );
    let got = receiver.received();
    assert_eq!(got.len(), 1);
    let payload: Value = serde_json::from_slice(&got[0].body).unwrap();
    assert_eq!(payload["task_id"], id.as_str());
    assert_eq!(image_keys(&payload), image_keys(&record));
    let res = http
        .get(record["original_image_url"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200, "A serves the image B made");

    // Without B nothing claims work: A's task stays pending.
    b.kill9();
    let waiting = a.imagine(&key, json!({"prompt": "no worker"})).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let record = a.fetch(&key, &waiting).await;
    assert_eq!(record["status"], "pending", "{record}");
    let mut db = database(&database_url).await;
    assert_eq!(
        count(
            &mut db,
            "SELECT COUNT(*) FROM tasks WHERE status = 'pending' AND attempts = 0"
        )
        .await,
        1
    );
    drop(a);
}

fn signal(node: &Easel, signal: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(node.child.id() as i32), signal).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_worker_that_lost_its_lease_overwrites_nothing() {
    let Some((postgres, endpoint)) =
        services("a_paused_worker_that_lost_its_lease_overwrites_nothing")
    else {
        return;
    };
    let database_url = common::fresh_postgres_url(&postgres);
    let bucket = new_bucket(&endpoint).await;
    let env = cluster_env(&database_url, &endpoint, &bucket);
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let a = start_node(dirs[0].path(), &["--role", "api,dispatcher"], &env);
    let key = a.first_key.clone().expect("the first node prints a key");
    // B generates slowly, so that it is frozen mid-task; its log tells how it learnt it lost.
    let mut env_b = env.clone();
    env_b.push(("EASEL_ROLES".into(), "worker".into()));
    env_b.push(("EASEL_WORKERS".into(), "1".into()));
    env_b.push(("EASEL_PROCEDURAL_MIN_DURATION".into(), "3s".into()));
    let log_b = dirs[1].path().join("b.log");
    let b = {
        let env: Vec<(&str, &str)> = env_b
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        Easel::start_serve(
            dirs[1].path(),
            &[],
            &env,
            Stdio::from(std::fs::File::create(&log_b).unwrap()),
        )
    };

    let receiver = Receiver::start(vec![Behaviour::Status(200)]).await;
    let id = a
        .imagine(
            &key,
            json!({"prompt": "a worker frozen mid-task", "webhook_url": receiver.url}),
        )
        .await;
    a.wait_status(&key, &id, "processing", Duration::from_secs(20))
        .await;
    // Frozen: its lease runs out while it holds the task.
    signal(&b, nix::sys::signal::Signal::SIGSTOP);
    let frozen = Instant::now();

    // C takes the task over once B's lease has expired, and finishes it.
    let mut env_c = env.clone();
    env_c.push(("EASEL_ROLES".into(), "worker".into()));
    let c = start_node(dirs[2].path(), &[], &env_c);
    let record = wait_for(Duration::from_secs(20), || async {
        let r = a.fetch(&key, &id).await;
        (r["status"] == "finished" && r["webhook"]["status"] == "delivered").then_some(r)
    })
    .await
    .expect("C finished the task and A delivered it");
    let taken_over = frozen.elapsed();
    let keys = image_keys(&record);
    let http = reqwest::Client::new();
    let mut bytes = Vec::new();
    for key in &keys {
        bytes.push(get_bytes(&http, &format!("{}/files/{key}", a.base)).await);
    }

    // B wakes up, finishes its generation or notices its lease is gone, and must change nothing.
    signal(&b, nix::sys::signal::Signal::SIGCONT);
    let noticed = wait_for(Duration::from_secs(15), || async {
        let log = std::fs::read_to_string(&log_b).unwrap_or_default();
        log.lines()
            .find(|l| l.contains("lease lost"))
            .map(str::to_string)
    })
    .await
    .expect("B reports that it lost the task");
    tokio::time::sleep(Duration::from_millis(500)).await;

    let after = a.fetch(&key, &id).await;
    assert_eq!(image_keys(&after), keys, "the result is C's still");
    assert_eq!(after["finished_at"], record["finished_at"]);
    for (key, body) in keys.iter().zip(&bytes) {
        let again = get_bytes(&http, &format!("{}/files/{key}", a.base)).await;
        assert!(again == *body, "{key} changed after B woke up");
    }
    let got = receiver.received();
    assert_eq!(got.len(), 1, "one delivery");
    let payload: Value = serde_json::from_slice(&got[0].body).unwrap();
    assert_eq!(image_keys(&payload), keys);
    let mut db = database(&database_url).await;
    assert_eq!(
        count(
            &mut db,
            "SELECT COUNT(*) FROM tasks WHERE status = 'finished' AND attempts = 2"
        )
        .await,
        1
    );
    assert_eq!(
        count(&mut db, "SELECT COUNT(*) FROM webhook_deliveries").await,
        1
    );
    let _ = writeln!(
        std::io::stderr(),
        "stale worker: C finished the task {taken_over:.2?} after B was frozen; B, resumed, \
         logged: {}",
        noticed
            .split_once("WARN")
            .map_or(noticed.as_str(), |(_, l)| l.trim())
    );
    drop((a, b, c));
}

/// GET with a key and `Prefer: wait=N` (or a submit with it); status, `Preference-Applied`, body.
async fn waiting(request: reqwest::RequestBuilder, key: &str, secs: u64) -> (u16, String, Value) {
    let res = request
        .header("Authorization", key)
        .header("Prefer", format!("wait={secs}"))
        .send()
        .await
        .unwrap();
    let applied = res
        .headers()
        .get("preference-applied")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let (status, body) = split(res).await;
    (status, applied, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_and_cancels_on_one_node_reach_tasks_run_by_another() {
    let Some((postgres, endpoint)) =
        services("waits_and_cancels_on_one_node_reach_tasks_run_by_another")
    else {
        return;
    };
    let database_url = common::fresh_postgres_url(&postgres);
    let bucket = new_bucket(&endpoint).await;
    let env = cluster_env(&database_url, &endpoint, &bucket);
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    // A answers the API only; B only works, one task at a time, each taking 2 s, and logs what
    // its worker does.
    let a = start_node(dir_a.path(), &["--role", "api"], &env);
    let key = a.first_key.clone().expect("the first node prints a key");
    let mut env_b: Vec<(&str, String)> = env.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    env_b.extend([
        ("EASEL_ROLES", "worker,dispatcher".to_string()),
        ("EASEL_WORKERS", "1".to_string()),
        ("EASEL_PROCEDURAL_MIN_DURATION", "2s".to_string()),
        ("RUST_LOG", "easel=info".to_string()),
    ]);
    let env_b: Vec<(&str, &str)> = env_b.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let log_b = dir_b.path().join("stderr.log");
    let b = Easel::start_serve(
        dir_b.path(),
        &[],
        &env_b,
        Stdio::from(std::fs::File::create(&log_b).unwrap()),
    );
    let http = reqwest::Client::new();

    // A submit on A that waits is answered when B finishes the task: B's commit is announced
    // to A, which reads the task once more (it never polls).
    let asked = Instant::now();
    let (status, applied, record) = waiting(
        http.post(format!("{}/api/v1/imagine", a.base))
            .json(&json!({"prompt": "made elsewhere"})),
        &key,
        50,
    )
    .await;
    assert_eq!(status, 200, "{record}");
    assert_eq!(applied, "wait=50");
    assert_eq!(record["status"], "finished", "{record}");
    let took = asked.elapsed();
    eprintln!("a 2 s task waited on across nodes was answered after {took:?}");
    assert!(
        took < Duration::from_secs(45),
        "woken by the task's end, not by the wait running out"
    );

    // A task canceled on A is stopped by B's worker, which takes the next one.
    let id = a
        .imagine(&key, json!({"prompt": "canceled elsewhere"}))
        .await;
    a.wait_status(&key, &id, "processing", Duration::from_secs(30))
        .await;
    // Waiters on A for the same task are answered by the cancel.
    let watcher = {
        let (request, key) = (
            http.get(format!("{}/api/v1/tasks/{id}", a.base)),
            key.clone(),
        );
        tokio::spawn(async move { waiting(request, &key, 50).await })
    };
    let (status, record) = a
        .post(&key, &format!("/api/v1/tasks/{id}/cancel"), json!({}))
        .await;
    assert_eq!(status, 200, "{record}");
    assert_eq!(record["status"], "canceled");
    let (status, _, watched) = tokio::time::timeout(Duration::from_secs(45), watcher)
        .await
        .expect("the waiter is answered")
        .unwrap();
    assert_eq!(
        (status, watched["status"].as_str()),
        (200, Some("canceled"))
    );
    wait_for(Duration::from_secs(30), || async {
        let log = std::fs::read_to_string(&log_b).unwrap_or_default();
        log.lines()
            .any(|l| l.contains(&id) && l.contains("generation was stopped"))
            .then_some(())
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "B stops the canceled generation; its log:\n{}",
            std::fs::read_to_string(&log_b).unwrap_or_default()
        )
    });
    let (status, _, next) = waiting(
        http.post(format!("{}/api/v1/imagine", a.base))
            .json(&json!({"prompt": "after the cancel"})),
        &key,
        50,
    )
    .await;
    assert_eq!((status, next["status"].as_str()), (200, Some("finished")));
    assert_eq!(a.fetch(&key, &id).await["status"], "canceled");
    drop(b);
}
