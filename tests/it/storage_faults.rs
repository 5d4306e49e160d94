//! Storage faults (issue 20): a full disk or an object store that stops answering pauses the
//! workers; no acknowledged task fails, `/readyz` says why while it lasts, every task finishes
//! once storage is back, in queue order and with no operator action, and no image is left that
//! no task refers to.
//!
//! The disk tests mount a small tmpfs as the data directory (they need root, as in CI; where
//! `mount` is refused they say so in one line and return). The S3 test puts a TCP relay between
//! easel and the S3-compatible test server (`EASEL_TEST_S3_ENDPOINT`) and stops it: from
//! easel's side the server is gone (connections refused, open ones cut), while the bucket's
//! contents survive for the checks. The webhook test needs PostgreSQL (`EASEL_TEST_POSTGRES`).
//!
//! Each run prints its figures (tasks acknowledged, failed, finished after recovery, time to
//! recover); docs/reliability.md records them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::receiver::{Behaviour, Receiver};
use crate::common::{self, test_config, wait_for, TestApp};
use easel::blobs::Blobs;
use easel::config::Config;

/// A tmpfs mounted for one test, unmounted when dropped.
struct Tmpfs {
    path: PathBuf,
    _parent: tempfile::TempDir,
}

impl Tmpfs {
    /// A fresh tmpfs of `size` (`8m`), or None, after saying so, where it cannot be mounted.
    fn mount(size: &str) -> Option<Tmpfs> {
        let parent = tempfile::tempdir().unwrap();
        let path = parent.path().join("mnt");
        std::fs::create_dir(&path).unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&path)
            .output();
        match mounted {
            Ok(out) if out.status.success() => Some(Tmpfs {
                path,
                _parent: parent,
            }),
            Ok(out) => {
                eprintln!(
                    "skipped: cannot mount a tmpfs (needs root): {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
                None
            }
            Err(e) => {
                eprintln!("skipped: cannot run mount: {e}");
                None
            }
        }
    }

    /// Give it more room, as an operator freeing space would.
    fn grow(&self, size: &str) {
        let out = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.path)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazily: a file the test still holds open must not keep the mount.
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// `GET /readyz`: its status and body.
async fn readyz(app: &TestApp) -> (u16, Value) {
    let res = app.http.get(app.url("/readyz")).send().await.unwrap();
    common::split(res).await
}

/// Count of the app's tasks in `status`.
async fn count(app: &TestApp, status: &str) -> i64 {
    app.store
        .task_counts()
        .await
        .unwrap()
        .into_iter()
        .find(|(s, _)| s == status)
        .map_or(0, |(_, n)| n)
}

/// Submit one imagine task; its id when acknowledged, else the status and the `Retry-After`
/// header it was refused with.
async fn submit(app: &TestApp, i: usize) -> Result<String, (u16, Option<String>)> {
    let res = app
        .http
        .post(app.url("/api/v1/imagine"))
        .header("Authorization", &app.key)
        .json(&json!({ "prompt": format!("storage fault {i}, a lighthouse at dusk") }))
        .send()
        .await
        .unwrap();
    let retry_after = res
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    let (status, body) = common::split(res).await;
    if status == 200 {
        Ok(body["task_id"].as_str().unwrap().to_string())
    } else {
        Err((status, retry_after))
    }
}

/// Every key under `dir` (files only), `/`-separated.
fn files_under(dir: &Path) -> BTreeSet<String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeSet<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                out.insert(
                    path.strip_prefix(root)
                        .unwrap()
                        .to_string_lossy()
                        .replace('\\', "/"),
                );
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(dir, dir, &mut out);
    out
}

/// The image keys that the finished tasks among `ids` refer to; panics on a task that is not
/// finished.
async fn referenced_keys(app: &TestApp, ids: &[String]) -> BTreeSet<String> {
    let ids: Vec<uuid::Uuid> = ids.iter().map(|id| id.parse().unwrap()).collect();
    let mut keys = BTreeSet::new();
    for chunk in ids.chunks(100) {
        for task in app.store.tasks_by_id(chunk).await.unwrap() {
            assert_eq!(
                task.status,
                easel::domain::TaskStatus::Finished,
                "task {} is {}",
                task.id,
                task.status
            );
            let columns = task
                .output
                .expect("a finished task has an output")
                .to_columns();
            keys.extend(columns.grid_key);
            keys.extend(columns.image_keys.unwrap_or_default());
        }
    }
    keys
}

/// What a fault run measured.
#[derive(Debug, Default)]
struct Figures {
    acknowledged: usize,
    refused: usize,
    finished_before: i64,
    failed: i64,
    finished_after_recovery: i64,
    /// From the fault's end to `/readyz` answering 200 again.
    ready_ms: u128,
    /// From the fault's end to the last task finished.
    recover_ms: u128,
}

/// Submit `n` tasks, 8 at a time; the ids acknowledged, and how many were refused.
async fn submit_many(app: &TestApp, from: usize, n: usize) -> (Vec<String>, usize) {
    use futures::StreamExt;
    let results: Vec<Result<String, (u16, Option<String>)>> = futures::stream::iter(from..from + n)
        .map(|i| submit(app, i))
        .buffered(8)
        .collect()
        .await;
    let mut ids = Vec::new();
    let mut refused = 0;
    for result in results {
        match result {
            Ok(id) => ids.push(id),
            Err((status, retry_after)) => {
                // The database itself out of room: a 503 to try again, never a 500.
                assert_eq!(status, 503, "a submit refused with {status}");
                assert!(retry_after.is_some(), "a 503 without Retry-After");
                refused += 1;
            }
        }
    }
    (ids, refused)
}

/// Wait for `/readyz` to answer `status`; its body.
async fn wait_ready(app: &TestApp, status: u16, within: Duration) -> Value {
    wait_for(within, || async {
        let (s, body) = readyz(app).await;
        (s == status).then_some(body)
    })
    .await
    .unwrap_or_else(|| panic!("/readyz did not answer {status} within {within:?}"))
}

/// The shared course of a fault run, once the fault is under way: submits keep being taken,
/// nothing fails and nothing more finishes while it lasts; then `recover` ends it, and every
/// acknowledged task finishes.
async fn ride_out(
    app: &TestApp,
    mut ids: Vec<String>,
    mut figures: Figures,
    database_may_fill: bool,
    recover: impl FnOnce(),
) -> (Vec<String>, Figures) {
    // Work is paused, not churned: once the tasks that were running have ended (or gone back
    // to the queue), nothing fails and nothing finishes meanwhile. Where the database itself
    // can run out of room, a running task may be unable to record even its return to the queue:
    // it stays `processing` until there is room again, and the count stops changing instead.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = (-1, -1);
    let mut since = Instant::now();
    loop {
        let running = count(app, "starting").await + count(app, "processing").await;
        if running == 0 {
            break;
        }
        let now = (running, count(app, "finished").await);
        if now != seen {
            (seen, since) = (now, Instant::now());
        } else if database_may_fill && since.elapsed() >= Duration::from_secs(3) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "running tasks end or go back to the queue ({running} still running)"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let finished = count(app, "finished").await;
    let (more, refused) = submit_many(app, 1000, 10).await;
    figures.refused += refused;
    ids.extend(more);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        count(app, "failed").await,
        0,
        "a task failed during the fault"
    );
    assert_eq!(
        count(app, "finished").await,
        finished,
        "tasks finished while storage was failing"
    );
    // Reads and key checks keep working meanwhile.
    let t = app.fetch(&ids[0]).await;
    assert!(t["status"].is_string(), "{t}");
    let (status, _) = app
        .post_as("not-a-key", "/api/v1/fetch", &json!({"task_id": ids[0]}))
        .await;
    assert_eq!(status, 401);
    figures.finished_before = count(app, "finished").await;

    let started = Instant::now();
    recover();
    wait_ready(app, 200, Duration::from_secs(30)).await;
    figures.ready_ms = started.elapsed().as_millis();
    let total = ids.len() as i64;
    wait_for(Duration::from_secs(120), || async {
        (count(app, "finished").await + count(app, "failed").await >= total).then_some(())
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "not every task ended after recovery: {} of {total} finished",
            futures::executor::block_on(count(app, "finished"))
        )
    });
    figures.recover_ms = started.elapsed().as_millis();
    figures.failed = count(app, "failed").await;
    figures.finished_after_recovery = total - figures.finished_before;
    figures.acknowledged = ids.len();
    assert_eq!(figures.failed, 0, "acknowledged tasks failed: {figures:?}");
    wait_ready(app, 200, Duration::from_secs(10)).await;
    (ids, figures)
}

/// Settings for a fault run on a small data directory: images large enough that a few tasks
/// fill it, and an attempt counted only when its worker is lost.
fn fault_config(data_dir: &Path) -> Config {
    let mut config = test_config(data_dir);
    config.worker.image_size = 256;
    config.worker.workers = 2;
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn below_min_free_space_the_workers_pause_and_every_task_finishes() {
    let Some(disk) = Tmpfs::mount("8m") else {
        return;
    };
    let mut config = fault_config(&disk.path);
    config.blobs.min_free_space = "3MiB".parse().unwrap();
    let app = TestApp::start(tempfile::tempdir().unwrap(), config).await;
    let mut figures = Figures::default();

    // More than fits above the floor; every submit is taken (the database has its room).
    let (ids, refused) = submit_many(&app, 0, 40).await;
    assert_eq!(refused, 0, "submits refused above the floor");
    let body = wait_ready(&app, 503, Duration::from_secs(60)).await;
    let msg = body["errors"][0]["msg"].as_str().unwrap().to_string();
    assert!(msg.contains("min_free_space"), "{msg}");
    println!("readyz while below the floor: {msg}");

    let (ids, figures_after) = ride_out(&app, ids, figures, false, || disk.grow("64m")).await;
    figures = figures_after;
    let on_disk = files_under(&disk.path.join("files"));
    let referenced = referenced_keys(&app, &ids).await;
    assert_eq!(
        on_disk, referenced,
        "files that no task refers to, or missing"
    );
    println!("min_free_space run: {figures:?}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_disk_pauses_the_workers_and_every_task_finishes() {
    let Some(disk) = Tmpfs::mount("8m") else {
        return;
    };
    // No floor: the writes themselves run out of space (ENOSPC), and so may the database.
    let mut config = fault_config(&disk.path);
    config.blobs.min_free_space = "0".parse().unwrap();
    let app = TestApp::start(tempfile::tempdir().unwrap(), config).await;
    let mut figures = Figures::default();

    let (ids, refused) = submit_many(&app, 0, 60).await;
    figures.refused = refused;
    let body = wait_ready(&app, 503, Duration::from_secs(60)).await;
    let msg = body["errors"][0]["msg"].as_str().unwrap().to_string();
    assert!(msg.contains("image store is failing"), "{msg}");
    println!("readyz with the disk full: {msg}");
    assert!(
        !files_under(&disk.path.join("files"))
            .iter()
            .any(|f| f.ends_with(".partial")),
        "a failed write left its temporary file"
    );

    // No floor: the database shares the full disk.
    let (ids, figures) = ride_out(&app, ids, figures, true, || disk.grow("64m")).await;
    let on_disk = files_under(&disk.path.join("files"));
    let referenced = referenced_keys(&app, &ids).await;
    assert_eq!(
        on_disk, referenced,
        "files that no task refers to, or missing"
    );
    println!("full disk run: {figures:?}");
    app.stop().await;
}

/// Take every byte left on the filesystem of `path` with a file there.
fn fill(path: &Path) {
    use std::io::Write;
    let mut file = std::fs::File::create(path).unwrap();
    for chunk in [1 << 20, 64 << 10, 4 << 10, 512, 1] {
        let bytes = vec![7u8; chunk];
        while file.write_all(&bytes).is_ok() {}
    }
    let _ = file.sync_all();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_database_answers_503_and_loses_nothing_it_acknowledged() {
    if common::sqlite_only("SQLite on a full disk") {
        return;
    }
    let Some(disk) = Tmpfs::mount("8m") else {
        return;
    };
    let mut config = fault_config(&disk.path);
    config.blobs.min_free_space = "0".parse().unwrap();
    let app = TestApp::start(tempfile::tempdir().unwrap(), config).await;
    // Acknowledged, and most still waiting when the disk fills: no byte is left for the
    // images or the database.
    let (mut ids, _) = submit_many(&app, 0, 30).await;
    let filler = disk.path.join("filler");
    fill(&filler);
    let waiting = ids.len() as i64 - count(&app, "finished").await;
    let mut refused = 0;
    for i in 100..3100 {
        match submit(&app, i).await {
            Ok(id) => ids.push(id),
            Err((status, retry_after)) => {
                assert_eq!(status, 503, "a submit refused with {status}");
                assert!(retry_after.is_some(), "a 503 without Retry-After");
                refused += 1;
                if refused == 20 {
                    break;
                }
            }
        }
    }
    assert!(refused > 0, "the database never ran out of room");
    println!(
        "full database: {waiting} tasks waiting, {} more submits acknowledged, then {refused} \
         answered 503",
        ids.len() - 30
    );
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(count(&app, "failed").await, 0);

    let started = Instant::now();
    // Room for every task's images this time.
    std::fs::remove_file(&filler).unwrap();
    disk.grow("64m");
    // The database takes writes again at once.
    let (more, refused) = submit_many(&app, 5000, 5).await;
    assert_eq!(refused, 0, "submits refused once space is back");
    ids.extend(more);
    let total = ids.len() as i64;
    wait_for(Duration::from_secs(120), || async {
        (count(&app, "finished").await + count(&app, "failed").await >= total).then_some(())
    })
    .await
    .expect("every acknowledged task ends once space is back");
    assert_eq!(count(&app, "failed").await, 0);
    println!(
        "full database run: {total} acknowledged, 0 failed, every one finished {} ms after \
         the space came back",
        started.elapsed().as_millis()
    );
    // Each acknowledged task is there, finished, with its images; nothing else is on disk.
    let referenced = referenced_keys(&app, &ids).await;
    assert_eq!(files_under(&disk.path.join("files")), referenced);
    app.stop().await;
}

/// A TCP relay from a local port to `target`, which can be stopped (its port refuses
/// connections, and those open are cut) and started again on the same port.
struct Relay {
    port: u16,
    target: String,
    running: Mutex<Option<tokio::task::JoinHandle<()>>>,
    conns: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl Relay {
    async fn start(target: &str) -> Relay {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let relay = Relay {
            port: listener.local_addr().unwrap().port(),
            target: target.to_string(),
            running: Mutex::new(None),
            conns: Arc::default(),
        };
        relay.serve(listener);
        relay
    }

    fn serve(&self, listener: tokio::net::TcpListener) {
        let target = self.target.clone();
        let conns = self.conns.clone();
        let accept = tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    return;
                };
                let target = target.clone();
                let conn = tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                conns.lock().unwrap().push(conn);
            }
        });
        *self.running.lock().unwrap() = Some(accept);
    }

    fn stop(&self) {
        if let Some(accept) = self.running.lock().unwrap().take() {
            accept.abort();
        }
        for conn in self.conns.lock().unwrap().drain(..) {
            conn.abort();
        }
    }

    async fn restart(&self) {
        let listener = wait_for(Duration::from_secs(10), || async {
            tokio::net::TcpListener::bind(("127.0.0.1", self.port))
                .await
                .ok()
        })
        .await
        .expect("the relay's port is free again");
        self.serve(listener);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_object_store_that_stops_answering_pauses_the_workers_and_every_task_finishes() {
    let Some(endpoint) = common::s3::endpoint() else {
        eprintln!("skipped: EASEL_TEST_S3_ENDPOINT is not set (scripts/test.sh starts moto)");
        return;
    };
    let bucket = common::s3::new_bucket(&endpoint).await;
    let target = endpoint.trim_start_matches("http://").to_string();
    let relay = Relay::start(&target).await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = fault_config(dir.path());
    config.blobs = s3_settings(
        config.blobs,
        bucket,
        format!("http://127.0.0.1:{}", relay.port),
    );
    let app = TestApp::start(dir, config.clone()).await;
    let mut figures = Figures::default();

    let (mut ids, _) = submit_many(&app, 0, 30).await;
    wait_for(Duration::from_secs(60), || async {
        (count(&app, "finished").await >= 3).then_some(())
    })
    .await
    .expect("tasks finish while the store answers");
    relay.stop();
    let stopped = Instant::now();
    let (more, refused) = submit_many(&app, 100, 20).await;
    assert_eq!(
        refused, 0,
        "submits refused while only the object store is down"
    );
    ids.extend(more);
    let body = wait_ready(&app, 503, Duration::from_secs(60)).await;
    let msg = body["errors"][0]["msg"].as_str().unwrap().to_string();
    assert!(msg.contains("image store is failing"), "{msg}");
    println!(
        "readyz {} ms after the object store stopped: {msg}",
        stopped.elapsed().as_millis()
    );

    let restart = tokio::runtime::Handle::current();
    let (ids, figures_after) = ride_out(&app, ids, figures, false, || {
        tokio::task::block_in_place(|| restart.block_on(relay.restart()))
    })
    .await;
    figures = figures_after;
    let blobs = open_blobs(&config).await;
    let future = std::time::SystemTime::now() + Duration::from_secs(3600);
    let in_bucket = || async {
        let keys = blobs.old_keys(future, 100_000).await.unwrap();
        keys.into_iter().collect::<BTreeSet<String>>()
    };
    let referenced = referenced_keys(&app, &ids).await;
    // A task that finished as the store stopped could not remove its other folders (its
    // previews) then: that clean-up is tried again once the store answers, so the bucket holds
    // exactly the tasks' images soon after, not necessarily at once.
    let settled = wait_for(Duration::from_secs(30), || async {
        (in_bucket().await == referenced).then_some(())
    })
    .await;
    if settled.is_none() {
        assert_eq!(
            in_bucket().await,
            referenced,
            "objects that no task refers to, or missing"
        );
    }
    println!("object store run: {figures:?}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_tasks_clean_up_that_meets_a_stopped_store_is_done_once_it_answers() {
    let Some(endpoint) = common::s3::endpoint() else {
        eprintln!("skipped: EASEL_TEST_S3_ENDPOINT is not set (scripts/test.sh starts moto)");
        return;
    };
    let bucket = common::s3::new_bucket(&endpoint).await;
    let relay = Relay::start(endpoint.trim_start_matches("http://")).await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = fault_config(dir.path());
    config.blobs = s3_settings(
        config.blobs,
        bucket,
        format!("http://127.0.0.1:{}", relay.port),
    );
    let blobs = open_blobs(&config).await;
    let task = uuid::Uuid::new_v4().to_string();
    let (kept, stale) = (Blobs::new_folder(&task), Blobs::new_folder(&task));
    for key in [format!("{kept}/0.png"), format!("{stale}/preview-1.jpg")] {
        blobs.put(&key, b"not an image".to_vec()).await.unwrap();
    }
    relay.stop();
    // Returns, though nothing could be removed: the task's ending does not wait for the store.
    tokio::time::timeout(
        Duration::from_secs(30),
        blobs.remove_stale_attempts(&task, Some(&kept)),
    )
    .await
    .expect("the clean-up returns while the store is stopped");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    relay.restart().await;
    let left = wait_for(Duration::from_secs(30), || async {
        let keys = blobs.list(&task).await.ok()?;
        (keys.len() == 1).then_some(keys)
    })
    .await
    .expect("the earlier attempt's folder is removed once the store answers");
    assert_eq!(left, vec![format!("{kept}/0.png")]);
}

/// A file at `key` below `root`, written `age` ago.
fn plant(root: &Path, key: &str, age: Duration) {
    let path = root.join(key);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, b"not an image").unwrap();
    let file = std::fs::File::options().write(true).open(&path).unwrap();
    file.set_modified(std::time::SystemTime::now() - age)
        .unwrap();
}

#[tokio::test]
async fn the_sweep_removes_only_images_that_no_task_refers_to() {
    let app = TestApp::spawn().await;
    let id = app
        .imagine(json!({"prompt": "a quiet harbour, for the sweep"}))
        .await;
    let task = app.wait_final(&id, Duration::from_secs(30)).await;
    assert_eq!(task["status"], "finished", "{task}");
    let (app_dir, config) = app.stop().await;
    let root = app_dir.path().join("files");
    let kept = files_under(&root);
    assert!(!kept.is_empty());

    let hour = Duration::from_secs(7200);
    let token = "0123456789abcdef0123456789abcdef";
    let unknown = uuid::Uuid::new_v4();
    let orphans = [
        format!("{id}/{token}/0.png"),
        format!("{id}/{token}/grid.partial"),
        format!("{unknown}/{token}/grid.png"),
        "storage-probe/0a0b0c0d.bin".to_string(),
    ];
    for key in &orphans {
        plant(&root, key, hour);
    }
    // Not easel's layout, and too young: both stay.
    let foreign = "backups/notes.txt";
    plant(&root, foreign, hour);
    let young = format!("{unknown}/fedcba9876543210fedcba9876543210/0.png");
    plant(&root, &young, Duration::ZERO);

    let store = easel::store::open(&config.database, &config.data_dir)
        .await
        .unwrap();
    let blobs = open_blobs(&config).await;
    let removed = easel::worker::sweep_orphans(&store, &blobs, Duration::from_secs(3600), 1000)
        .await
        .unwrap();
    assert_eq!(removed, orphans.len());
    let mut expected = kept.clone();
    expected.insert(foreign.to_string());
    expected.insert(young.clone());
    assert_eq!(files_under(&root), expected);
    // The finished task's images are still served.
    assert!(kept.iter().all(|k| root.join(k).exists()));
    // Emptied folders went with their files.
    assert!(!root.join(unknown.to_string()).join(token).exists());
    store.close().await;
}

#[tokio::test]
async fn a_webhook_attempt_whose_record_cannot_be_written_is_recorded_later_and_sent_once() {
    let Some(base) = common::postgres() else {
        eprintln!("skipped: EASEL_TEST_POSTGRES is not set");
        return;
    };
    let receiver = Receiver::start(vec![Behaviour::Status(200)]).await;
    let app = TestApp::spawn_with(|c| {
        c.database.url = Some(common::fresh_postgres_url(&base));
    })
    .await;
    // The database refuses to store attempts, or tasks, as one out of disk space does
    // (SQLSTATE 53100 disk_full), while the matching flag is set.
    let mut db = common::database(&app.config).await;
    for statement in [
        "CREATE TABLE fault (attempts_full BOOLEAN NOT NULL, tasks_full BOOLEAN NOT NULL)",
        "INSERT INTO fault VALUES (false, false)",
        "CREATE FUNCTION refuse_attempts() RETURNS trigger AS $$
         BEGIN
             IF (SELECT attempts_full FROM fault) THEN
                 RAISE EXCEPTION 'could not extend file: No space left on device'
                     USING ERRCODE = 'disk_full';
             END IF;
             RETURN NEW;
         END $$ LANGUAGE plpgsql",
        "CREATE FUNCTION refuse_tasks() RETURNS trigger AS $$
         BEGIN
             IF (SELECT tasks_full FROM fault) THEN
                 RAISE EXCEPTION 'could not extend file: No space left on device'
                     USING ERRCODE = 'disk_full';
             END IF;
             RETURN NEW;
         END $$ LANGUAGE plpgsql",
        "CREATE TRIGGER full_attempts BEFORE INSERT ON webhook_attempts
         FOR EACH ROW EXECUTE FUNCTION refuse_attempts()",
        "CREATE TRIGGER full_tasks BEFORE INSERT ON tasks
         FOR EACH ROW EXECUTE FUNCTION refuse_tasks()",
        "UPDATE fault SET attempts_full = true",
    ] {
        sqlx::query(statement).execute(&mut db).await.unwrap();
    }
    let id = app
        .imagine(json!({"prompt": "a webhook in a storm", "webhook_url": receiver.url}))
        .await;
    app.wait_final(&id, Duration::from_secs(30)).await;
    wait_for(Duration::from_secs(10), || async {
        (receiver.count() == 1).then_some(())
    })
    .await
    .expect("the webhook is sent");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(
        app.webhook_attempts(&id).await.is_empty(),
        "recorded while refused"
    );

    // Space comes back: the attempt already made is recorded, well within the delivery's
    // lease, and the receiver never gets a second copy.
    sqlx::query("UPDATE fault SET attempts_full = false")
        .execute(&mut db)
        .await
        .unwrap();
    let recorded = wait_for(Duration::from_secs(5), || async {
        let list = app.webhook_attempts(&id).await;
        (!list.is_empty()).then_some(list)
    })
    .await
    .expect("the attempt is recorded once the store takes writes again");
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert_eq!(recorded[0]["status_code"], 200, "{recorded:?}");
    let task = app.fetch(&id).await;
    assert_eq!(task["webhook"]["status"], "delivered", "{task}");
    assert_eq!(receiver.count(), 1, "sent twice");

    // The database out of room for tasks: a submit is answered 503 with Retry-After and
    // nothing is stored; once it has room, submits are taken again.
    sqlx::query("UPDATE fault SET tasks_full = true")
        .execute(&mut db)
        .await
        .unwrap();
    let refused = submit(&app, 1)
        .await
        .expect_err("a submit while the database is full");
    assert_eq!(refused.0, 503);
    assert!(refused.1.is_some(), "503 without Retry-After");
    sqlx::query("UPDATE fault SET tasks_full = false")
        .execute(&mut db)
        .await
        .unwrap();
    submit(&app, 2)
        .await
        .expect("a submit once the database has room");
    let stored = app.stored_tasks().await;
    assert_eq!(stored, 2, "the refused submit was stored");
    app.stop().await;
}

/// An S3 endpoint that answers every request with `status` and an S3 error `code`.
async fn s3_answering(status: u16, code: &'static str) -> String {
    use axum::http::StatusCode;
    let app = axum::Router::new().fallback(move || async move {
        (
            StatusCode::from_u16(status).unwrap(),
            [("content-type", "application/xml")],
            format!("<Error><Code>{code}</Code><Message>as told</Message></Error>"),
        )
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

/// `blobs` set to an S3-compatible store at `endpoint`, bucket `bucket`.
fn s3_settings(
    blobs: easel::config::Blobs,
    bucket: String,
    endpoint: String,
) -> easel::config::Blobs {
    easel::config::Blobs {
        store: easel::config::BlobStoreKind::S3,
        s3_bucket: Some(bucket),
        s3_endpoint: Some(endpoint),
        s3_path_style: true,
        s3_region: Some("us-east-1".into()),
        ..blobs
    }
}

/// The blob store `config` names, opened beside the application (as easel opens it).
async fn open_blobs(config: &Config) -> Blobs {
    Blobs::open(
        &config.blobs,
        &config.data_dir,
        config.database.sqlite_synchronous,
        "http://127.0.0.1",
    )
    .await
    .unwrap()
}

/// Whether a write to an S3 store at `endpoint` fails transiently.
async fn s3_put_fails_transiently(endpoint: &str) -> bool {
    common::s3::test_credentials();
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.blobs = s3_settings(config.blobs, "images".into(), endpoint.to_string());
    let blobs = open_blobs(&config).await;
    let key = format!(
        "{}/0.png",
        Blobs::new_folder(&uuid::Uuid::new_v4().to_string())
    );
    let error = blobs
        .put(&key, b"png".to_vec())
        .await
        .expect_err("the store refuses every request");
    error.is_transient()
}

#[tokio::test]
async fn object_store_answers_are_sorted_by_whether_they_can_pass() {
    for (status, code, transient) in [
        (503, "SlowDown", true),
        (429, "TooManyRequests", true),
        (500, "InternalError", true),
        (502, "BadGateway", true),
        (403, "AccessDenied", false),
        (404, "NoSuchBucket", false),
        (400, "InvalidRequest", false),
    ] {
        let endpoint = s3_answering(status, code).await;
        assert_eq!(
            s3_put_fails_transiently(&endpoint).await,
            transient,
            "{status} {code}"
        );
    }
    // Nothing listening: connections refused.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    assert!(s3_put_fails_transiently(&format!("http://127.0.0.1:{port}")).await);
}
