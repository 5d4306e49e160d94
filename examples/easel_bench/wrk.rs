//! Runs wrk (the load generator) with one of the Lua scripts in bench/wrk and reads back the
//! JSON line that bench/wrk/report.lua prints.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

/// wrk's figures for one run. Latencies in microseconds, from send to full response, per request.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct WrkResult {
    pub requests: u64,
    pub duration_us: u64,
    pub bytes: u64,
    pub errors_connect: u64,
    pub errors_read: u64,
    pub errors_write: u64,
    /// Responses with a status of 400 or more.
    pub errors_status: u64,
    pub errors_timeout: u64,
    pub latency_mean_us: f64,
    pub latency_p50_us: u64,
    pub latency_p90_us: u64,
    pub latency_p99_us: u64,
    pub latency_p999_us: u64,
    pub latency_max_us: u64,
    /// Connections used.
    #[serde(default)]
    pub connections: usize,
}

impl WrkResult {
    pub fn rps(&self) -> f64 {
        self.requests as f64 / (self.duration_us as f64 / 1e6)
    }
    pub fn p50_ms(&self) -> f64 {
        self.latency_p50_us as f64 / 1000.0
    }
    pub fn p99_ms(&self) -> f64 {
        self.latency_p99_us as f64 / 1000.0
    }
    pub fn errors(&self) -> u64 {
        self.errors_connect
            + self.errors_read
            + self.errors_write
            + self.errors_status
            + self.errors_timeout
    }
}

/// Where wrk runs from: bench/wrk, so that the scripts find report.lua.
pub struct Wrk {
    pub lua_dir: PathBuf,
}

impl Wrk {
    /// Run `script` against `url` for `secs` seconds with `connections` open connections.
    /// One wrk thread: on a small machine every core wrk takes is one the server does not get,
    /// and one thread drives tens of thousands of requests per second.
    pub async fn run(
        &self,
        script: &str,
        url: &str,
        connections: usize,
        secs: u64,
        env: &[(&str, String)],
    ) -> anyhow::Result<WrkResult> {
        let mut cmd = tokio::process::Command::new("wrk");
        cmd.current_dir(&self.lua_dir)
            .args(["-t1", "--latency", "--timeout", "5s"])
            .arg(format!("-c{connections}"))
            .arg(format!("-d{secs}s"))
            .args(["-s", script, url])
            .stdin(Stdio::null())
            .kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = tokio::time::timeout(Duration::from_secs(secs + 60), cmd.output())
            .await
            .context("wrk did not finish in time")?
            .context("running wrk (install it: apt-get install -y wrk)")?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            bail!(
                "wrk failed ({}): {stdout}{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let line = stdout
            .lines()
            .find_map(|l| l.strip_prefix("WRK_JSON "))
            .with_context(|| format!("no WRK_JSON line in wrk's output:\n{stdout}"))?;
        let mut result: WrkResult = serde_json::from_str(line)?;
        result.connections = connections;
        Ok(result)
    }
}
