//! Reload on the real binary: the configuration file changed while easel serves, then SIGHUP,
//! `POST /api/v1/admin/reload` or `easel reload`. Backends come and go with tasks running and
//! none lost; plans' limits change on the next request; a bad file changes nothing.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::binary::{command, Easel};
use crate::common::{split, wait_for};

const SLOW: &str = "procedural_min_duration = \"1500ms\"\n";

fn write_config(dir: &Path, text: &str) -> String {
    let path = dir.join("easel.toml");
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

fn backend(name: &str) -> String {
    format!("[[backends]]\nname = \"{name}\"\nkind = \"procedural\"\nconcurrency = 2\n")
}

async fn backends_up(easel: &Easel) -> Vec<String> {
    let res = easel
        .http
        .get(format!("{}/readyz", easel.base))
        .send()
        .await
        .unwrap();
    let (_, body) = split(res).await;
    body["backends"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|b| b["name"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

async fn reload(easel: &Easel, key: &str) -> (u16, Value) {
    let res = easel
        .http
        .post(format!("{}/api/v1/admin/reload", easel.base))
        .header("Authorization", key)
        .send()
        .await
        .unwrap();
    split(res).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sighup_swaps_backends_while_tasks_run_and_loses_none() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_config(dir.path(), &format!("{SLOW}{}", backend("first")));
    let easel = Easel::start_serve(
        dir.path(),
        &["--config", &file],
        &[],
        std::process::Stdio::inherit(),
    );
    let key = easel.first_key.clone().unwrap();
    assert_eq!(backends_up(&easel).await, ["first"]);
    let mut tasks = Vec::new();
    for i in 0..6 {
        tasks.push(
            easel
                .imagine(&key, json!({ "prompt": format!("before {i}") }))
                .await,
        );
    }
    // Running on `first` now.
    easel
        .wait_status(&key, &tasks[0], "processing", Duration::from_secs(20))
        .await;

    write_config(dir.path(), &format!("{SLOW}{}", backend("second")));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(easel.child.id() as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    let swapped = wait_for(Duration::from_secs(10), || async {
        (backends_up(&easel).await == ["second"]).then_some(())
    })
    .await;
    assert!(swapped.is_some(), "{:?}", backends_up(&easel).await);
    tasks.push(easel.imagine(&key, json!({ "prompt": "after" })).await);
    for task in &tasks {
        let record = easel
            .wait_status(&key, task, "finished", Duration::from_secs(60))
            .await;
        assert_eq!(record["status"], "finished", "{record}");
    }

    // The reload is in the audit log, by the signal, naming what changed.
    let res = easel
        .http
        .get(format!("{}/api/v1/admin/audit", easel.base))
        .header("Authorization", &key)
        .send()
        .await
        .unwrap();
    let (_, audit) = split(res).await;
    let entry = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["action"] == "config.reload")
        .unwrap_or_else(|| panic!("{audit}"))
        .clone();
    assert_eq!(entry["actor"], "signal:SIGHUP");
    assert_eq!(entry["after"]["changed"], json!(["backends"]));
    assert_eq!(entry["after"]["backends"], json!(["second"]));
    assert_eq!(entry["before"]["backends"], json!(["first"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_applies_plans_at_once_and_a_bad_file_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let plan = |pending: u32| {
        format!(
            "workers = 0\n{}[plans.self-hosted]\nmax_pending = {pending}\n",
            backend("only")
        )
    };
    let file = write_config(dir.path(), &plan(1));
    let easel = Easel::start_serve(
        dir.path(),
        &["--config", &file],
        &[],
        std::process::Stdio::inherit(),
    );
    let key = easel.first_key.clone().unwrap();
    let submit = || async {
        let (status, body) = easel
            .post(&key, "/api/v1/imagine", json!({"prompt": "a"}))
            .await;
        assert!(status == 200 || status == 429, "{status} {body}");
        status
    };
    assert_eq!(submit().await, 200);
    assert_eq!(submit().await, 429, "one pending at most");

    write_config(dir.path(), &plan(3));
    let (status, body) = reload(&easel, &key).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["changed"], json!(["plans"]), "{body}");
    assert_eq!(
        body["backends_added"],
        json!([]),
        "an unchanged backend stays: {body}"
    );
    assert_eq!(submit().await, 200);
    assert_eq!(submit().await, 200);
    assert_eq!(submit().await, 429, "three pending at most");

    // A file that does not validate: refused with its reason, and the running settings stay.
    write_config(
        dir.path(),
        &format!(
            "{}[plans.self-hosted]\nmax_pending = 100\nbatch_max = 0\n",
            backend("only")
        ),
    );
    let (status, body) = reload(&easel, &key).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["errors"][0]["code"], "invalid_configuration", "{body}");
    assert!(
        body["errors"][0]["msg"]
            .as_str()
            .unwrap()
            .contains("batch_max"),
        "{body}"
    );
    assert_eq!(submit().await, 429, "still three");

    // A setting only a restart applies: refused naming it.
    write_config(dir.path(), &format!("max_connections = 77\n{}", plan(100)));
    let (status, body) = reload(&easel, &key).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["errors"][0]["code"], "restart_required", "{body}");
    assert!(
        body["errors"][0]["msg"]
            .as_str()
            .unwrap()
            .contains("max_connections"),
        "{body}"
    );
    assert_eq!(submit().await, 429, "still three");
    assert_eq!(backends_up(&easel).await, ["only"]);

    // Only operators may reload.
    let (ok, out) = crate::common::binary::run_cli(
        dir.path(),
        &[
            "keys",
            "create",
            "--name",
            "user",
            "--account",
            "user@example.com",
        ],
    );
    assert!(ok, "{out}");
    let (status, _) = reload(&easel, out.trim()).await;
    assert_eq!(status, 404);

    // `easel reload` from the command line, with an operator's key.
    write_config(dir.path(), &plan(4));
    let out = command(dir.path(), &[("EASEL_API_KEY", key.as_str())])
        .args(["--config", &file, "reload", "--url", &easel.base])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("reloaded; changed: plans"), "{said}");
    assert_eq!(submit().await, 200, "four now");
}
