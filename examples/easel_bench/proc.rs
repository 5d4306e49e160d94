//! Child processes: a release `easel` (serve or bench-baseline) started with a clean environment,
//! its address and first key read from its stdout, its memory read from /proc, and a graceful
//! stop (SIGTERM, then SIGKILL after a bounded wait).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{bail, Context};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// A running `easel` process. Dropping it kills the process (SIGKILL), so an error or a panic
/// in the driver never leaves servers behind; [`Server::stop`] is the graceful way.
pub struct Server {
    child: Child,
    pub addr: SocketAddr,
    /// The API key printed on a first start (empty data dir), if there was one.
    pub key: Option<String>,
    pub log: PathBuf,
}

/// Resident memory of a process, from /proc/PID/status.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Mem {
    /// VmRSS: resident now, in MiB.
    pub rss_mib: f64,
    /// VmHWM: the highest resident size so far, in MiB.
    pub peak_mib: f64,
}

impl Server {
    /// Start `bin args...` in `dir` with only `env` among the EASEL_* variables, stderr to
    /// `dir/{name}.log`, and wait until it prints its address.
    pub async fn start(
        bin: &Path,
        args: &[&str],
        env: &[(&str, String)],
        dir: &Path,
        name: &str,
    ) -> anyhow::Result<Server> {
        std::fs::create_dir_all(dir)?;
        let log = dir.join(format!("{name}.log"));
        let stderr = std::fs::File::create(&log)?;
        let mut cmd = Command::new(bin);
        cmd.args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true);
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("EASEL_") {
                cmd.env_remove(k);
            }
        }
        // Settings come only from here: no easel.toml is read from the scratch directory. Logs
        // are easel's default (`info`: a line per request and per delivery), as served, into the
        // log file; only `EASEL_BENCH_RUST_LOG` changes that, for experiments.
        cmd.env("EASEL_CONFIG", dir.join("no-such-easel.toml"));
        cmd.env_remove("RUST_LOG");
        if let Ok(filter) = std::env::var("EASEL_BENCH_RUST_LOG") {
            cmd.env("RUST_LOG", filter);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let mut key = None;
        let found = tokio::time::timeout(Duration::from_secs(120), async {
            while let Some(line) = lines.next_line().await? {
                let text = line.trim();
                if text.starts_with("easel_") && !text.contains(' ') {
                    key = Some(text.to_string());
                }
                if let Some(rest) = text.split("listening on http://").nth(1) {
                    return Ok::<_, anyhow::Error>(Some(rest.trim().parse::<SocketAddr>()?));
                }
            }
            Ok(None)
        })
        .await;
        let addr = match found {
            Ok(Ok(Some(addr))) => addr,
            Ok(Ok(None)) => bail!("{name} exited before listening; see {}", log.display()),
            Ok(Err(e)) => bail!("{name}: {e}; see {}", log.display()),
            Err(_) => bail!("{name} did not start within 120 s; see {}", log.display()),
        };
        // Keep reading stdout so that the child can never block on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        // The listener is bound before the address is printed; check that it answers.
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(addr).await.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(Server {
            child,
            addr,
            key,
            log,
        })
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }

    pub fn mem(&self) -> anyhow::Result<Mem> {
        mem_of(self.pid())
    }

    /// SIGTERM, then SIGKILL if it has not exited within `grace`.
    pub async fn stop(mut self, grace: Duration) -> anyhow::Result<()> {
        if let Some(pid) = self.child.id() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        match tokio::time::timeout(grace, self.child.wait()).await {
            Ok(_) => Ok(()),
            Err(_) => {
                let _ = self.child.kill().await;
                bail!(
                    "the server did not stop within {grace:?} after SIGTERM; killed (see {})",
                    self.log.display()
                )
            }
        }
    }
}

/// CPU time (user + system, seconds) a process has used so far; `None` for this process.
pub fn cpu_secs(pid: Option<u32>) -> anyhow::Result<f64> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/stat"),
        None => "/proc/self/stat".to_string(),
    };
    let stat = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    // The fields after the command name (which is in parentheses and may hold spaces):
    // utime and stime are the 14th and 15th fields of the line, in clock ticks (100 per second
    // on Linux).
    let rest = stat.rsplit_once(')').context("malformed stat")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields
        .get(11..13)
        .context("malformed stat")?
        .iter()
        .map(|f| f.parse::<f64>().unwrap_or(0.0))
        .sum();
    Ok(ticks / 100.0)
}

/// The CPU time (seconds) each of `servers` has used so far.
pub fn cpu_of(servers: &[Server]) -> anyhow::Result<Vec<f64>> {
    servers.iter().map(|s| cpu_secs(Some(s.pid()))).collect()
}

/// The CPU time (seconds) `servers` used together since [`cpu_of`] read `before`.
pub fn cpu_since(servers: &[Server], before: &[f64]) -> anyhow::Result<f64> {
    Ok(cpu_of(servers)?
        .iter()
        .zip(before)
        .map(|(now, then)| now - then)
        .sum())
}

pub fn mem_of(pid: u32) -> anyhow::Result<Mem> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let field = |name: &str| -> anyhow::Result<f64> {
        let line = status
            .lines()
            .find(|l| l.starts_with(name))
            .with_context(|| format!("no {name} in /proc/{pid}/status"))?;
        let kib: f64 = line
            .split_whitespace()
            .nth(1)
            .context("malformed /proc status line")?
            .parse()?;
        Ok(kib / 1024.0)
    };
    Ok(Mem {
        rss_mib: field("VmRSS:")?,
        peak_mib: field("VmHWM:")?,
    })
}

/// Remove and recreate a scratch directory.
pub fn fresh_dir(dir: &Path) -> anyhow::Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir)?;
    Ok(())
}
