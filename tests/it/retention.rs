//! Retention through the real HTTP API: `expires_at` in every record, the sweep that deletes an
//! expired task's files and marks its record `data_removed`, follow-ups refused on such a
//! parent, the inpaint mask removed with the data, and a sweep that survives restarts and a
//! failing blob store. Runs on SQLite, or with `EASEL_TEST_STORE=postgres` on PostgreSQL.
//!
//! Most tests make their tasks under a retention of an hour, look at them, and restart the same
//! data dir with a retention of a second: the tasks expired "while the server was down", and
//! nothing races the checks made before.

use std::time::Duration;

use base64::Engine;
use serde_json::{json, Value};
use sqlx::Row;

use crate::common::{self, wait_for, TestApp};
use easel::config::Config;
use easel::images::{encode_png, RgbaImage};

const WITHIN: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);

/// A short retention and sweep, for the restarted app.
fn expire_fast(config: &mut Config) {
    config.retention.keep = Some(Duration::from_secs(1));
    config.retention.sweep_interval = Duration::from_millis(100);
}

async fn restart_expiring(app: TestApp) -> TestApp {
    let (dir, mut config) = app.stop().await;
    expire_fast(&mut config);
    TestApp::start(dir, config).await
}

/// Wait until the task's record says its data was removed; the record.
async fn wait_removed(app: &TestApp, task_id: &str) -> Value {
    wait_for(WITHIN, || async {
        let t = app.fetch(task_id).await;
        (t["data_removed"] == true).then_some(t)
    })
    .await
    .unwrap_or_else(|| panic!("the data of {task_id} was not removed"))
}

/// The status of GET `url` on `app`, without credentials (image files are public). The URL may
/// be from before a restart, on another port: its path is asked of `app`.
async fn status_of(app: &TestApp, url: &Value) -> u16 {
    let url = url.as_str().unwrap_or_else(|| panic!("not a URL: {url}"));
    let path = &url[url.find("/files/").expect("one of easel's own files")..];
    app.http
        .get(app.url(path))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// Every image URL of a record.
fn image_urls(record: &Value) -> Vec<Value> {
    let mut urls: Vec<Value> = record["image_urls"].as_array().cloned().unwrap_or_default();
    for field in ["original_image_url", "image_url"] {
        if record[field].is_string() {
            urls.push(record[field].clone());
        }
    }
    urls
}

fn ms(rfc3339: &Value) -> i64 {
    chrono::DateTime::parse_from_rfc3339(rfc3339.as_str().unwrap())
        .unwrap()
        .timestamp_millis()
}

#[tokio::test]
async fn an_expired_tasks_files_are_deleted_and_its_record_says_so_keeping_prompt_and_seed() {
    let app = TestApp::spawn_with(|c| c.retention.keep = Some(HOUR)).await;
    let id = app
        .imagine(json!({"prompt": "a lighthouse in the fog", "seed": 1234}))
        .await;
    let before = app.wait_final(&id, WITHIN).await;
    assert_eq!(before["status"], "finished", "{before}");
    assert_eq!(before["data_removed"], false);
    assert_eq!(
        ms(&before["expires_at"]),
        ms(&before["finished_at"]) + 3_600_000,
        "{before}"
    );
    let urls = image_urls(&before);
    assert_eq!(urls.len(), 5, "{before}");
    for url in &urls {
        assert_eq!(status_of(&app, url).await, 200, "{url} exists before");
    }

    // Down for longer than the new retention: the task expired meanwhile.
    let app = restart_expiring(app).await;
    let after = wait_removed(&app, &id).await;
    for url in &urls {
        assert_eq!(status_of(&app, url).await, 404, "{url} was deleted");
    }
    for field in ["original_image_url", "image_urls", "image_url"] {
        assert!(after.get(field).is_none(), "{field} left out: {after}");
    }
    assert_eq!(after["prompt"], "a lighthouse in the fog");
    assert_eq!(after["seed"], 1234);
    assert_eq!(after["status"], "finished");
    assert_eq!(after["finished_at"], before["finished_at"]);
    assert_eq!(
        ms(&after["expires_at"]),
        ms(&after["finished_at"]) + 1_000,
        "expires_at follows the node's current retention: {after}"
    );
    // The listing shows the same record.
    let (status, list) = app.get("/api/v1/tasks").await;
    assert_eq!(status, 200, "{list}");
    let listed = &list["tasks"].as_array().unwrap()[0];
    assert_eq!(listed["task_id"], id.as_str());
    assert_eq!(listed["data_removed"], true);
    assert!(listed.get("image_urls").is_none(), "{listed}");
    app.stop().await;
}

#[tokio::test]
async fn a_task_that_finishes_while_the_server_runs_is_removed_once_it_expires() {
    const TOKEN: &str = "metrics-token-for-tests";
    let app = TestApp::spawn_with(|c| {
        expire_fast(c);
        c.server.metrics_token = Some(TOKEN.into());
    })
    .await;
    let id = app.imagine(json!({"prompt": "a short-lived kite"})).await;
    let record = wait_removed(&app, &id).await;
    assert_eq!(record["status"], "finished");
    assert_eq!(
        ms(&record["expires_at"]),
        ms(&record["finished_at"]) + 1_000
    );
    assert!(record.get("image_urls").is_none(), "{record}");
    // The sweep counts what it removed (in this process, which other tests share).
    let removed = app
        .metric(TOKEN, "easel_retention_removed_tasks_total")
        .await;
    assert!(removed >= 1.0, "{removed}");
    app.stop().await;
}

#[tokio::test]
async fn with_retention_forever_nothing_expires_and_nothing_is_removed() {
    let app = TestApp::spawn_with(|c| c.retention.sweep_interval = Duration::from_millis(50)).await;
    assert_eq!(app.config.retention.keep, None, "forever is the default");
    let id = app.imagine(json!({"prompt": "an everlasting oak"})).await;
    let record = app.wait_final(&id, WITHIN).await;
    assert_eq!(record["expires_at"], Value::Null, "{record}");
    assert_eq!(record["data_removed"], false);
    // Move the task's end far into the past, as years passing would.
    let mut db = common::database(&app.config).await;
    sqlx::query("UPDATE tasks SET finished_at = 1")
        .execute(&mut db)
        .await
        .unwrap();
    // Many sweep intervals later, everything is still there.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let later = app.fetch(&id).await;
    assert_eq!(later["data_removed"], false, "{later}");
    assert_eq!(later["expires_at"], Value::Null);
    for url in image_urls(&later) {
        assert_eq!(status_of(&app, &url).await, 200, "{url}");
    }
    app.stop().await;
}

#[tokio::test]
async fn a_task_that_is_not_final_never_expires() {
    // No worker loops (the sweep still runs): tasks stay pending until the test runs one.
    common::init_logs();
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::test_config(dir.path());
    config.worker.workers = 0;
    expire_fast(&mut config);
    let app = easel::Application::build(config).await.unwrap();
    let worker = app.worker().clone();
    let base = format!("http://{}", app.local_addr());
    let key = app.first_key().unwrap().to_string();
    let stop = tokio_util::sync::CancellationToken::new();
    let stopped = stop.clone();
    let running = tokio::spawn(app.run(async move { stopped.cancelled().await }));
    let http = reqwest::Client::new();
    let call = |path: String, body: Option<Value>| {
        let req = match body {
            Some(body) => http.post(format!("{base}{path}")).json(&body),
            None => http.get(format!("{base}{path}")),
        };
        let req = req.header("Authorization", &key);
        async move { common::split(req.send().await.unwrap()).await }
    };
    let mut ids = Vec::new();
    for prompt in ["ends first", "waits"] {
        let (status, body) =
            call("/api/v1/imagine".into(), Some(json!({ "prompt": prompt }))).await;
        assert_eq!(status, 200, "{body}");
        ids.push(body["task_id"].as_str().unwrap().to_string());
    }
    // The older task runs and ends; the other one stays pending through the sweeps that
    // remove the first one's data.
    let never = tokio_util::sync::CancellationToken::new();
    assert_eq!(
        worker.run_one_task(&never).await.unwrap(),
        easel::worker::Ran::Completed
    );
    wait_for(WITHIN, || async {
        let (_, t) = call(format!("/api/v1/tasks/{}", ids[0]), None).await;
        (t["data_removed"] == true).then_some(())
    })
    .await
    .expect("the finished task's data was removed");
    let (status, waiting) = call(format!("/api/v1/tasks/{}", ids[1]), None).await;
    assert_eq!(status, 200, "{waiting}");
    assert_eq!(waiting["status"], "pending");
    assert_eq!(waiting["expires_at"], Value::Null, "{waiting}");
    assert_eq!(waiting["data_removed"], false);
    stop.cancel();
    running.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_follow_up_on_a_task_whose_images_were_removed_is_refused_but_seed_is_not() {
    let app = TestApp::spawn_with(|c| c.retention.keep = Some(HOUR)).await;
    let grid = app
        .finished(
            "imagine",
            json!({"prompt": "a red fox", "seed": 77}),
            WITHIN,
        )
        .await;
    let grid_id = grid["task_id"].as_str().unwrap().to_string();
    let up = app
        .finished(
            "upscale-1x",
            json!({"parent_task_id": grid_id, "index": "1"}),
            WITHIN,
        )
        .await;
    let up_id = up["task_id"].as_str().unwrap().to_string();

    let app = restart_expiring(app).await;
    wait_removed(&app, &grid_id).await;
    wait_removed(&app, &up_id).await;
    let refused = [
        (
            "upscale-1x",
            json!({"parent_task_id": grid_id, "index": "2"}),
        ),
        (
            "variations",
            json!({"parent_task_id": grid_id, "index": "1"}),
        ),
        (
            "upscale-highres",
            json!({"parent_task_id": up_id, "type": "2x"}),
        ),
        ("pan", json!({"parent_task_id": up_id, "direction": "up"})),
        (
            "outpaint",
            json!({"parent_task_id": up_id, "zoom_ratio": 1.5}),
        ),
        (
            "variations",
            json!({"parent_task_id": up_id, "index": "strong"}),
        ),
    ];
    for (op, body) in refused {
        let (status, answer) = app.post(&format!("/api/v1/{op}"), &body).await;
        assert_eq!(status, 400, "{op} {body}: {answer}");
        assert_eq!(
            answer,
            json!({"errors": [{
                "msg": "parent_task_id: the task's images were removed (retention)",
                "code": "data_removed"
            }]}),
            "{op}"
        );
    }
    // `seed` reads the stored seed, which stays.
    let seed = app
        .finished("seed", json!({"task_id": grid_id}), WITHIN)
        .await;
    assert_eq!(seed["seed"], 77, "{seed}");
    app.stop().await;
}

#[tokio::test]
async fn an_inpaint_tasks_mask_is_removed_from_the_store_with_its_data() {
    let app = TestApp::spawn_with(|c| c.retention.keep = Some(HOUR)).await;
    let grid = app
        .finished("imagine", json!({"prompt": "a quiet harbour"}), WITHIN)
        .await;
    let up = app
        .finished(
            "upscale-1x",
            json!({"parent_task_id": grid["task_id"], "index": "1"}),
            WITHIN,
        )
        .await;
    let mut mask = RgbaImage::new(128, 128);
    for pixel in mask.data.chunks_mut(4).take(128 * 40) {
        pixel.copy_from_slice(&[255, 255, 255, 255]);
    }
    let png = base64::engine::general_purpose::STANDARD.encode(encode_png(&mask));
    let inpaint = app
        .finished(
            "inpaint",
            json!({"parent_task_id": up["task_id"], "mask": format!("data:image/png;base64,{png}"),
               "prompt": "a red boat"}),
            WITHIN,
        )
        .await;
    let inpaint_id = inpaint["task_id"].as_str().unwrap().to_string();
    let params = || async {
        let mut db = common::database(&app.config).await;
        let row = sqlx::query("SELECT params FROM tasks WHERE task_type = 'inpaint'")
            .fetch_one(&mut db)
            .await
            .unwrap();
        row.get::<String, _>(0)
    };
    assert!(
        params().await.contains(&png),
        "the mask is stored until then"
    );

    let app = restart_expiring(app).await;
    let record = wait_removed(&app, &inpaint_id).await;
    assert_eq!(record["task_type"], "inpaint");
    assert_eq!(record["prompt"], "a red boat");
    let mut db = common::database(&app.config).await;
    let stored: String = sqlx::query("SELECT params FROM tasks WHERE task_type = 'inpaint'")
        .fetch_one(&mut db)
        .await
        .unwrap()
        .get(0);
    assert!(!stored.contains(&png), "the mask is gone: {stored}");
    let readable: Value = serde_json::from_str(&stored).unwrap();
    assert_eq!(readable["op"], "inpaint");
    assert_eq!(readable["mask"], "", "{stored}");
    app.stop().await;
}

#[tokio::test]
async fn a_failing_blob_store_stops_the_round_without_marking_and_a_later_round_finishes() {
    let app = TestApp::spawn_with(|c| c.retention.keep = Some(HOUR)).await;
    let id = app.imagine(json!({"prompt": "a stubborn file"})).await;
    let record = app.wait_final(&id, WITHIN).await;
    let grid_url = record["original_image_url"].as_str().unwrap().to_string();
    let key = grid_url.split("/files/").nth(1).unwrap().to_string();
    let (dir, config) = app.stop().await;
    // The grid's file cannot be deleted while a folder stands in its place.
    let path = dir.path().join("files").join(&key);
    std::fs::remove_file(&path).unwrap();
    std::fs::create_dir_all(path.join("in-the-way")).unwrap();

    let mut expiring = config.clone();
    expire_fast(&mut expiring);
    let app = TestApp::start(dir, expiring).await;
    // The round deletes what it can and stops before marking anything.
    let image = record["image_urls"][0].clone();
    wait_for(WITHIN, || async {
        (status_of(&app, &image).await == 404).then_some(())
    })
    .await
    .expect("a round ran and deleted the images it could");
    let mut db = common::database(&app.config).await;
    let marked: Option<i64> = sqlx::query("SELECT data_removed_at FROM tasks")
        .fetch_one(&mut db)
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        marked, None,
        "a task whose files are still there is not marked"
    );
    assert_eq!(app.fetch(&id).await["data_removed"], false);

    // Storage works again: a later round finishes, without anyone's help.
    std::fs::remove_dir_all(&path).unwrap();
    let after = wait_removed(&app, &id).await;
    assert!(after.get("original_image_url").is_none(), "{after}");
    app.stop().await;
}

#[tokio::test]
async fn a_sweep_interrupted_between_its_deletes_and_its_mark_finishes_after_a_restart() {
    let app = TestApp::spawn_with(|c| c.retention.keep = Some(HOUR)).await;
    let id = app.imagine(json!({"prompt": "half gone"})).await;
    let record = app.wait_final(&id, WITHIN).await;
    let (dir, config) = app.stop().await;
    // What a node that stopped after deleting the files, before marking the task, left.
    for url in image_urls(&record) {
        let key = url
            .as_str()
            .unwrap()
            .split("/files/")
            .nth(1)
            .unwrap()
            .to_string();
        std::fs::remove_file(dir.path().join("files").join(key)).unwrap();
    }
    let mut expiring = config.clone();
    expire_fast(&mut expiring);
    let app = TestApp::start(dir, expiring).await;
    let after = wait_removed(&app, &id).await;
    assert!(after.get("image_urls").is_none(), "{after}");
    app.stop().await;
}

#[tokio::test]
async fn more_expired_tasks_than_one_batch_are_all_removed_batch_after_batch() {
    let idle = common::Idle::build().await;
    let store = idle.store().clone();
    let worker = idle.app.worker();
    let never = tokio_util::sync::CancellationToken::new();
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(common::insert(store.as_ref(), &common::new_task("fast", 1), &idle.key).await);
        assert_eq!(
            worker.run_one_task(&never).await.unwrap(),
            easel::worker::Ran::Completed
        );
    }
    let files = idle.dir.path().join("files");
    let count_files = || {
        walkdir(&files)
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "png"))
            .count()
    };
    assert_eq!(count_files(), 25, "five grids of five files");

    // Batches of 2: three of them, one after the other, in one round.
    let removed = easel::worker::retention::sweep_expired(&store, &worker.blobs, Duration::ZERO, 2)
        .await
        .unwrap();
    assert_eq!(removed, 5);
    assert_eq!(count_files(), 0, "every file is gone");
    assert!(store
        .expired_tasks(easel::store::now_ms(), 10)
        .await
        .unwrap()
        .is_empty());
    for task in store.tasks_by_id(&ids).await.unwrap() {
        assert!(task.data_removed(), "{}", task.id);
    }
    // A round with nothing left to do.
    let again = easel::worker::retention::sweep_expired(&store, &worker.blobs, Duration::ZERO, 2)
        .await
        .unwrap();
    assert_eq!(again, 0);
}

/// Every file below `dir`.
fn walkdir(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                found.extend(walkdir(&path));
            } else {
                found.push(path);
            }
        }
    }
    found
}

#[tokio::test]
async fn a_text_tasks_content_stays_when_its_data_is_removed() {
    let app = TestApp::spawn_with(expire_fast).await;
    let (status, answer) = app
        .post(
            "/api/v1/shorten",
            &json!({"prompt": "a very long and winding prompt about a castle on a hill at dawn"}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    let id = answer["task_id"].as_str().unwrap().to_string();
    let record = wait_removed(&app, &id).await;
    assert_eq!(record["status"], "finished", "{record}");
    let content = record["content"].as_array().expect("content stays");
    assert!(!content.is_empty(), "{record}");
    app.stop().await;
}
