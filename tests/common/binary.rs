//! The real `easel` binary, started as a child process on port 0 with its own data dir.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use super::{split, wait_for};

pub const BIN: &str = env!("CARGO_BIN_EXE_easel");

/// A running `easel serve`.
pub struct Easel {
    pub child: Child,
    pub base: String,
    pub first_key: Option<String>,
    pub http: reqwest::Client,
}

pub fn command(dir: &Path, extra_env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.current_dir(dir)
        .env("EASEL_DATA_DIR", dir.join("data"))
        .env("EASEL_LISTEN", "127.0.0.1:0")
        .env("EASEL_IMAGE_SIZE", "128")
        .env("EASEL_LEASE", "2s")
        .env("EASEL_HEARTBEAT", "200ms")
        .env("EASEL_POLL_INTERVAL", "100ms")
        .env("EASEL_SHUTDOWN_TIMEOUT", "3s")
        .env("EASEL_WEBHOOK_ALLOW_HTTP", "true")
        .env("EASEL_WEBHOOK_ALLOW_PRIVATE", "true")
        .env("EASEL_WEBHOOK_TIMEOUT", "1s")
        .env("EASEL_WEBHOOK_RETRY_SCHEDULE", "300ms,600ms,900ms")
        .env("RUST_LOG", "warn");
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    cmd
}

impl Easel {
    pub fn start(dir: &Path, extra_env: &[(&str, &str)]) -> Easel {
        Easel::start_with(dir, extra_env, Stdio::inherit())
    }

    /// As `start`, with easel's stderr (its logs) going to `stderr`.
    pub fn start_with(dir: &Path, extra_env: &[(&str, &str)], stderr: Stdio) -> Easel {
        Easel::start_serve(dir, &[], extra_env, stderr)
    }

    /// As `start_with`, with `args` after `serve` (for example `["--role", "api"]`).
    pub fn start_serve(
        dir: &Path,
        args: &[&str],
        extra_env: &[(&str, &str)],
        stderr: Stdio,
    ) -> Easel {
        let mut child = command(dir, extra_env)
            .arg("serve")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut first_key = None;
        let base = loop {
            let line = lines.next().expect("easel printed its address").unwrap();
            if let Some(key) = line.trim().strip_prefix("easel_") {
                first_key = Some(format!("easel_{key}"));
            }
            if let Some(addr) = line.strip_prefix("easel listening on ") {
                break addr.to_string();
            }
        };
        // Keep draining stdout so the child never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Easel {
            child,
            base,
            first_key,
            http: reqwest::Client::new(),
        }
    }

    pub async fn post(&self, key: &str, path: &str, body: Value) -> (u16, Value) {
        let res = self
            .http
            .post(format!("{}{path}", self.base))
            .header("Authorization", key)
            .json(&body)
            .send()
            .await
            .unwrap();
        split(res).await
    }

    /// Submit an imagine task with `key`: its id (panics unless 200).
    pub async fn imagine(&self, key: &str, body: Value) -> String {
        let (status, answer) = self.post(key, "/api/v1/imagine", body.clone()).await;
        assert_eq!(status, 200, "imagine {body}: {answer}");
        answer["task_id"]
            .as_str()
            .unwrap_or_else(|| panic!("no task id: {answer}"))
            .to_string()
    }

    pub async fn fetch(&self, key: &str, id: &str) -> Value {
        let (status, body) = self
            .post(key, "/api/v1/fetch", json!({ "task_id": id }))
            .await;
        assert_eq!(status, 200, "{body}");
        body
    }

    /// Poll the task with `key` until its status is `status`: its record then.
    pub async fn wait_status(&self, key: &str, id: &str, status: &str, within: Duration) -> Value {
        wait_for(within, || async {
            let t = self.fetch(key, id).await;
            (t["status"] == status).then_some(t)
        })
        .await
        .unwrap_or_else(|| panic!("task {id} not {status} within {within:?}"))
    }

    pub fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    pub fn terminate(&self) {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
    }
}

impl Drop for Easel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn run_cli(dir: &Path, args: &[&str]) -> (bool, String) {
    let out = command(dir, &[]).args(args).output().unwrap();
    (out.status.success(), String::from_utf8(out.stdout).unwrap())
}
