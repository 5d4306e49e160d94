//! The real binary's operator commands: `easel backup` taken while submits go on and `easel
//! restore` into a new data dir (every task acknowledged before the backup began comes back,
//! and its images are served), restore refusing a data dir that is not empty, `easel
//! healthcheck`'s exit status, and `easel --version`.

use std::path::Path;
use std::process::Output;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::binary::{command, Easel};
use crate::common::{self, wait_for};
use serde_json::json;

/// Submits made during the backup test.
const SUBMITS: usize = 1000;
/// Submits in flight at once.
const CLIENTS: usize = 8;
/// Acknowledged submits before the backup starts.
const BEFORE_BACKUP: usize = 200;

fn run(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    command(dir, env).args(args).output().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The path of an image URL, to ask it of another server.
fn path_of(url: &str) -> &str {
    let start = url
        .find("/files/")
        .unwrap_or_else(|| panic!("not an image URL: {url}"));
    &url[start..]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backup_under_load_restores_every_acknowledged_task_with_its_images() {
    if common::sqlite_only("backing up the embedded SQLite store") {
        return;
    }
    let original = tempfile::tempdir().unwrap();
    let env = [
        ("EASEL_PLANS__SELF-HOSTED__MAX_PENDING", "5000"),
        ("EASEL_WORKERS", "4"),
    ];
    let easel = Easel::start(original.path(), &env);
    let key = easel.first_key.clone().unwrap();

    // A task finished before the load begins, so that the copy holds a finished task however
    // slowly the machine generates under the load (on a slow one none of the load's had
    // finished when the backup was taken).
    let first = easel
        .imagine(&key, json!({"prompt": "a lighthouse at dawn"}))
        .await;
    easel
        .wait_status(&key, &first, "finished", Duration::from_secs(60))
        .await;

    // 1,000 submits from CLIENTS clients; each acknowledged id is recorded as it comes back.
    let acked: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(vec![first]));
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let (acked, next) = (acked.clone(), next.clone());
        let (http, base, key) = (easel.http.clone(), easel.base.clone(), key.clone());
        clients.push(tokio::spawn(async move {
            while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < SUBMITS {
                let res = http
                    .post(format!("{base}/api/v1/imagine"))
                    .header("Authorization", &key)
                    .json(&json!({"prompt": "a lighthouse in a storm"}))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(res.status(), 200);
                let body: serde_json::Value = res.json().await.unwrap();
                acked
                    .lock()
                    .unwrap()
                    .push(body["task_id"].as_str().unwrap().to_string());
            }
        }));
    }
    wait_for(Duration::from_secs(60), || async {
        (acked.lock().unwrap().len() > BEFORE_BACKUP).then_some(())
    })
    .await
    .expect("the first submits were acknowledged");

    // Every task acknowledged by now must be in the backup.
    let before: Vec<String> = acked.lock().unwrap().clone();
    let backup = original.path().join("backup");
    let backup_arg = backup.to_str().unwrap().to_string();
    let dir = original.path().to_path_buf();
    let started = Instant::now();
    let out = tokio::task::spawn_blocking(move || run(&dir, &[], &["backup", &backup_arg]))
        .await
        .unwrap();
    let took = started.elapsed();
    assert!(out.status.success(), "backup failed: {}", stderr(&out));
    let during = acked.lock().unwrap().len();
    eprintln!(
        "backup took {took:?}; {} tasks acknowledged when it began, {during} when it ended",
        before.len()
    );
    for client in clients {
        client.await.unwrap();
    }
    assert!(
        during <= SUBMITS,
        "the backup ended after every submit: it was not taken under load"
    );
    easel.terminate();
    drop(easel);

    // The copy holds finished tasks, whose images come from the copied files and not from
    // generating them again.
    let finished_in_copy: i64 = {
        use sqlx::Connection;
        let url = format!("sqlite://{}?mode=ro", backup.join("easel.db").display());
        let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
        sqlx::query_scalar("SELECT count(*) FROM tasks WHERE status = 'finished'")
            .fetch_one(&mut conn)
            .await
            .unwrap()
    };
    assert!(finished_in_copy > 0, "no task had finished at the backup");

    let restored = tempfile::tempdir().unwrap();
    let out = run(restored.path(), &[], &["restore", backup.to_str().unwrap()]);
    assert!(out.status.success(), "restore failed: {}", stderr(&out));
    let easel = Easel::start(restored.path(), &env);
    assert!(
        easel.first_key.is_none(),
        "the restored data has its account"
    );
    for id in &before {
        let record = easel
            .wait_status(&key, id, "finished", Duration::from_secs(120))
            .await;
        let mut urls = vec![record["original_image_url"].as_str().unwrap().to_string()];
        for url in record["image_urls"].as_array().unwrap() {
            urls.push(url.as_str().unwrap().to_string());
        }
        for url in urls {
            let res = easel
                .http
                .get(format!("{}{}", easel.base, path_of(&url)))
                .send()
                .await
                .unwrap();
            assert_eq!(res.status(), 200, "{url} of task {id}");
            assert_eq!(res.headers()["content-type"], "image/png", "{url}");
        }
    }
}

#[tokio::test]
async fn restore_refuses_a_data_dir_that_is_not_empty() {
    if common::sqlite_only("backing up the embedded SQLite store") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let easel = Easel::start(dir.path(), &[]);
    let key = easel.first_key.clone().unwrap();
    let id = easel
        .imagine(&key, json!({"prompt": "a quiet harbour"}))
        .await;
    let backup = dir.path().join("backup");
    let out = run(dir.path(), &[], &["backup", backup.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));

    // A backup never mixes with an earlier one.
    let out = run(dir.path(), &[], &["backup", backup.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("is not empty"), "{}", stderr(&out));

    // The running instance's own data dir is not empty: restoring there is refused and
    // changes nothing.
    let out = run(dir.path(), &[], &["restore", backup.to_str().unwrap()]);
    assert!(!out.status.success());
    let message = stderr(&out);
    assert!(
        message.contains("the data dir") && message.contains("is not empty"),
        "{message}"
    );
    assert_eq!(easel.fetch(&key, &id).await["task_id"], id.as_str());

    // A folder that is not a backup.
    let other = tempfile::tempdir().unwrap();
    let out = run(
        other.path(),
        &[],
        &["restore", dir.path().to_str().unwrap()],
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("is not a complete easel backup"),
        "{}",
        stderr(&out)
    );
    assert!(
        !other.path().join("data").exists(),
        "a refused restore creates nothing"
    );
}

#[tokio::test]
async fn healthcheck_exits_0_while_the_server_answers_and_1_when_it_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let easel = Easel::start(dir.path(), &[]);
    let out = run(dir.path(), &[], &["healthcheck", "--url", &easel.base]);
    assert!(out.status.success(), "{}", stderr(&out));
    // Without --url, the `listen` setting says where; a wildcard address is asked on loopback.
    let port = easel.base.rsplit(':').next().unwrap().to_string();
    let listen = format!("0.0.0.0:{port}");
    let out = run(dir.path(), &[("EASEL_LISTEN", &listen)], &["healthcheck"]);
    assert!(out.status.success(), "{}", stderr(&out));

    easel.kill9();
    let out = run(dir.path(), &[("EASEL_LISTEN", &listen)], &["healthcheck"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("did not answer"), "{}", stderr(&out));
    let out = run(dir.path(), &[], &["healthcheck"]);
    assert_eq!(out.status.code(), Some(1), "port 0 cannot be checked");
    assert!(stderr(&out).contains("pass --url"), "{}", stderr(&out));
}

#[test]
fn version_names_the_release_and_the_commit() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(dir.path(), &[], &["--version"]);
    assert!(out.status.success());
    let commit = std::env::var("EASEL_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| {
            let git = std::process::Command::new("git")
                .args(["rev-parse", "--short=12", "HEAD"])
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .output()
                .ok()?;
            git.status
                .success()
                .then(|| String::from_utf8_lossy(&git.stdout).trim().to_string())
        })
        .unwrap_or_else(|| "unknown".to_string());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("easel {} ({commit})", env!("CARGO_PKG_VERSION"))
    );
}
