//! easel survives its PostgreSQL: the real binary against a private PostgreSQL cluster that the
//! test stops (`pg_ctl stop -m immediate`, crash-like) and starts again under load, and one that
//! is not up yet when easel starts.
//!
//! The cluster is the test's own (`initdb` in a temporary directory, a free port on 127.0.0.1),
//! never the machine's shared server, which other tests use at the same time. It needs the
//! PostgreSQL server binaries (`/usr/lib/postgresql/*/bin`) and, when the test runs as root, the
//! `postgres` OS user to run them as; without them the tests say they are skipped, except under
//! `CI=true`, where they fail.

use crate::common;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use tempfile::TempDir;

/// A private PostgreSQL cluster: its data directory, sockets and log in a temporary directory,
/// listening on 127.0.0.1:`port`. Stopped (immediately) when dropped.
struct Cluster {
    bin: PathBuf,
    root: TempDir,
    port: u16,
    /// Whether the tools run as the `postgres` OS user (the test runs as root).
    as_postgres: bool,
}

impl Cluster {
    /// A new cluster, made with `initdb` but not started; None (with one line saying why) when
    /// this machine cannot make one. Under `CI=true` that is a failure instead.
    fn init() -> Option<Cluster> {
        let Some(bin) = server_binaries() else {
            return skipped("no PostgreSQL server binaries (/usr/lib/postgresql/*/bin/initdb)");
        };
        // initdb and postgres refuse to run as root: run them as the `postgres` user then.
        let as_postgres = unsafe { libc::geteuid() } == 0;
        if as_postgres
            && !Command::new("id")
                .args(["-u", "postgres"])
                .output()
                .is_ok_and(|o| o.status.success())
        {
            return skipped("running as root and there is no `postgres` user to run initdb as");
        }
        // The `postgres` user must reach the directory: under /tmp rather than a TMPDIR that may
        // sit in root's home.
        let root = if as_postgres {
            tempfile::tempdir_in("/tmp").unwrap()
        } else {
            tempfile::tempdir().unwrap()
        };
        std::fs::create_dir(root.path().join("sockets")).unwrap();
        if as_postgres {
            let chown = Command::new("chown")
                .args(["-R", "postgres:"])
                .arg(root.path())
                .output()
                .unwrap();
            assert!(chown.status.success(), "chown: {}", text(&chown));
        }
        let port = free_port();
        let cluster = Cluster {
            bin,
            root,
            port,
            as_postgres,
        };
        let data = cluster.data();
        let out = cluster.tool(
            "initdb",
            &[
                "-D",
                data.to_str().unwrap(),
                "--auth=trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                // Faster to make; the server itself runs with fsync on.
                "--no-sync",
            ],
        );
        assert!(out.status.success(), "initdb failed: {}", text(&out));
        Some(cluster)
    }

    fn data(&self) -> PathBuf {
        self.root.path().join("data")
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// One of the server's tools, run as the `postgres` user where the test is root.
    fn tool(&self, name: &str, args: &[&str]) -> Output {
        let program = self.bin.join(name);
        let runuser = ["/usr/sbin/runuser", "/sbin/runuser"]
            .into_iter()
            .find(|p| Path::new(p).exists());
        let mut cmd = match (self.as_postgres, runuser) {
            (false, _) => Command::new(&program),
            (true, Some(runuser)) => {
                let mut cmd = Command::new(runuser);
                cmd.args(["-u", "postgres", "--"]).arg(&program);
                cmd
            }
            (true, None) => {
                let mut line = format!("exec {}", quote(program.to_str().unwrap()));
                for a in args {
                    line.push(' ');
                    line.push_str(&quote(a));
                }
                let mut cmd = Command::new("su");
                cmd.args(["postgres", "-s", "/bin/sh", "-c", &line]);
                cmd
            }
        };
        if !self.as_postgres || runuser.is_some() {
            cmd.args(args);
        }
        cmd.current_dir(self.root.path())
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// Start the server and wait until it accepts connections.
    fn start(&self) {
        let options = format!(
            "-k {} -p {} -c listen_addresses=127.0.0.1 -c fsync=on",
            self.root.path().join("sockets").display(),
            self.port
        );
        let data = self.data();
        let log = self.root.path().join("postgres.log");
        let out = self.tool(
            "pg_ctl",
            &[
                "-D",
                data.to_str().unwrap(),
                "-l",
                log.to_str().unwrap(),
                "-o",
                &options,
                "-w",
                "-t",
                "30",
                "start",
            ],
        );
        assert!(
            out.status.success(),
            "pg_ctl start failed: {}\nserver log:\n{}",
            text(&out),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        // pg_ctl waited on the socket; make sure TCP answers too.
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "the cluster's port never opened");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stop the server the way a crash would: no checkpoint, connections cut.
    fn stop_immediately(&self) {
        let out = self.pg_ctl_stop();
        assert!(out.status.success(), "pg_ctl stop failed: {}", text(&out));
    }

    fn pg_ctl_stop(&self) -> Output {
        let data = self.data();
        let data = data.to_str().unwrap();
        self.tool("pg_ctl", &["-D", data, "-m", "immediate", "-w", "stop"])
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.data().join("postmaster.pid").exists() {
            let _ = self.pg_ctl_stop();
        }
    }
}

/// The newest `/usr/lib/postgresql/<version>/bin` that has `initdb` and `pg_ctl`.
fn server_binaries() -> Option<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            (bin.join("initdb").exists() && bin.join("pg_ctl").exists()).then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin)
}

fn skipped(why: &str) -> Option<Cluster> {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("CI=true but this machine cannot run a private PostgreSQL cluster: {why}");
    }
    println!("skipped: {why}");
    None
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running `easel serve`, its stdout and stderr collected as they come. Killed when dropped.
struct Node {
    child: Child,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    _dir: TempDir,
}

impl Node {
    fn spawn(database_url: &str, extra_env: &[(&str, &str)]) -> Node {
        let dir = tempfile::tempdir().unwrap();
        let mut env = vec![
            ("EASEL_DATABASE_URL", database_url),
            ("EASEL_WORKERS", "2"),
            ("EASEL_PROCEDURAL_MIN_DURATION", "20ms"),
            ("EASEL_IMAGE_SIZE", "64"),
            ("EASEL_PLANS__SELF-HOSTED__MAX_PENDING", "100000"),
        ];
        env.extend_from_slice(extra_env);
        let mut child = common::binary::command(dir.path(), &env)
            .arg("serve")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = collect(child.stdout.take().unwrap());
        let stderr = collect(child.stderr.take().unwrap());
        Node {
            child,
            stdout,
            stderr,
            _dir: dir,
        }
    }

    fn stdout(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The last lines of easel's log, for failure messages.
    fn log_tail(&self) -> String {
        let log = self.stderr();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Wait (up to `within`) for the line `easel listening on ...`; the base URL and the first
    /// key it printed.
    async fn listening(&mut self, within: Duration) -> (String, String) {
        let deadline = Instant::now() + within;
        loop {
            let out = self.stdout();
            if let Some(base) = out
                .lines()
                .find_map(|l| l.strip_prefix("easel listening on "))
            {
                let key = out
                    .lines()
                    .find_map(|l| l.trim().starts_with("easel_").then(|| l.trim().to_string()))
                    .expect("easel printed the first account's key");
                return (base.to_string(), key);
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!(
                    "easel exited ({status}) before listening:\n{}",
                    self.log_tail()
                );
            }
            assert!(
                Instant::now() < deadline,
                "easel did not listen within {within:?}:\n{}",
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A thread that reads `from` to its end into the returned string.
fn collect(from: impl std::io::Read + Send + 'static) -> Arc<Mutex<String>> {
    let into: Arc<Mutex<String>> = Arc::default();
    let sink = into.clone();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(from).lines() {
            let Ok(line) = line else { break };
            let mut sink = sink.lock().unwrap();
            sink.push_str(&line);
            sink.push('\n');
        }
    });
    into
}

/// One answer to a submit (or readiness probe) under load; times are since the load began.
#[derive(Clone, Debug)]
struct Answer {
    start: Duration,
    end: Duration,
    /// None when no HTTP answer came (a refused connection, a timeout).
    status: Option<u16>,
    retry_after: Option<String>,
    body: Option<Value>,
    error: Option<String>,
}

impl Answer {
    fn latency(&self) -> Duration {
        self.end - self.start
    }

    fn task_id(&self) -> Option<String> {
        (self.status == Some(200))
            .then(|| self.body.as_ref()?["task_id"].as_str().map(str::to_string))
            .flatten()
    }
}

async fn ask(request: reqwest::RequestBuilder, t0: Instant) -> Answer {
    let start = t0.elapsed();
    let (status, retry_after, body, error) = match request.send().await {
        Ok(res) => {
            let status = res.status().as_u16();
            let retry_after = res
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap_or("(not text)").to_string());
            match res.json::<Value>().await {
                Ok(body) => (Some(status), retry_after, Some(body), None),
                Err(e) => (Some(status), retry_after, None, Some(e.to_string())),
            }
        }
        Err(e) => (None, None, None, Some(e.to_string())),
    };
    Answer {
        start,
        end: t0.elapsed(),
        status,
        retry_after,
        body,
        error,
    }
}

/// Whether `body` is exactly `{"errors":[{"msg": <text>, "code":"unavailable"}]}`.
fn is_unavailable_body(body: &Value) -> bool {
    let Some([only]) = body["errors"].as_array().map(Vec::as_slice) else {
        return false;
    };
    body.as_object().is_some_and(|o| o.len() == 1)
        && only.as_object().is_some_and(|o| o.len() == 2)
        && only["msg"].as_str().is_some_and(|m| !m.is_empty())
        && only["code"] == "unavailable"
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

fn unix_ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

/// PostgreSQL restarted under load: while it is down every submit is answered 503 with
/// `Retry-After` and the `unavailable` error body, promptly (no 500s, no hangs); `/readyz` says 503
/// meanwhile and 200 after; submits succeed again by themselves soon after it is back; every
/// acknowledged task is stored and finishes. Prints how long requests got 503, how long until
/// submits and work resumed, and how many tasks were acknowledged and lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_acknowledged_is_lost_when_postgres_restarts_under_load() {
    const CLIENTS: usize = 6;
    const PER_CLIENT: usize = 2000;
    const GAP: Duration = Duration::from_millis(80);
    const MAX_LATENCY: Duration = Duration::from_secs(10);
    const RESUME_WITHIN: Duration = Duration::from_secs(15);
    const DOWN: Duration = Duration::from_secs(4);

    // Each test starts a cluster and an easel: two at once would time each other out.
    let _turn = crate::one_at_a_time().await;
    let Some(cluster) = Cluster::init() else {
        return;
    };
    cluster.start();
    // Info from the PostgreSQL store, for the wake-up listener's line when it is back.
    let mut node = Node::spawn(
        &cluster.url(),
        &[("RUST_LOG", "warn,easel::store::postgres=info")],
    );
    let (base, key) = node.listening(Duration::from_secs(30)).await;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();

    let t0 = Instant::now();
    let wall0 = SystemTime::now();
    // A time stamp (Unix ms, from easel or its log) as a time since `t0`; None before `t0`.
    let since_t0 = |ms: i64| {
        u64::try_from(ms - unix_ms(wall0))
            .ok()
            .map(Duration::from_millis)
    };
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for c in 0..CLIENTS {
        let (http, base, key, stop) = (http.clone(), base.clone(), key.clone(), stop.clone());
        clients.push(tokio::spawn(async move {
            let mut answers = Vec::new();
            for i in 0..PER_CLIENT {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let request = http
                    .post(format!("{base}/api/v1/imagine"))
                    .header("Authorization", &key)
                    .json(&json!({ "prompt": format!("restart {c}/{i}") }));
                answers.push(ask(request, t0).await);
                tokio::time::sleep(GAP).await;
            }
            answers
        }));
    }
    let probe = {
        let (http, base, stop) = (http.clone(), base.clone(), stop.clone());
        tokio::spawn(async move {
            let mut answers = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let request = http.get(format!("{base}/readyz"));
                answers.push(ask(request, t0).await);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            answers
        })
    };

    tokio::time::sleep(Duration::from_secs(2)).await;
    let stopping = t0.elapsed();
    cluster.stop_immediately();
    let stopped = t0.elapsed();
    tokio::time::sleep(DOWN).await;
    let restarting = t0.elapsed();
    cluster.start();
    let restarted = t0.elapsed();

    // Load on for 3 s more, and until a submit sent after the restart is acknowledged (bounded):
    // the clients' answers are collected only when they end, so this loop sends its own.
    let mut side: Vec<Answer> = Vec::new();
    loop {
        if !side.iter().any(|a| a.status == Some(200)) {
            let request = http
                .post(format!("{base}/api/v1/imagine"))
                .header("Authorization", &key)
                .json(&json!({ "prompt": "after the restart" }));
            side.push(ask(request, t0).await);
        }
        let seen_200_after = side.iter().any(|a| a.status == Some(200));
        let since = t0.elapsed() - restarted;
        if (since >= Duration::from_secs(3) && seen_200_after) || since > RESUME_WITHIN {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut answers: Vec<Answer> = side;
    for client in clients {
        answers.extend(
            tokio::time::timeout(Duration::from_secs(30), client)
                .await
                .expect("the clients stop")
                .unwrap(),
        );
    }
    let probes = probe.await.unwrap();
    answers.sort_by_key(|a| a.end);
    // Every answer was a 200 with a task id or a 503 as documented, and came promptly.
    for a in &answers {
        assert!(
            a.latency() < MAX_LATENCY,
            "a submit took {:?}: {a:?}",
            a.latency()
        );
        match a.status {
            Some(200) => assert!(a.task_id().is_some(), "200 without a task id: {a:?}"),
            Some(503) => {
                let retry = a.retry_after.as_deref().unwrap_or_default();
                assert!(
                    retry.parse::<u64>().is_ok_and(|s| s > 0),
                    "503 without a usable Retry-After: {a:?}"
                );
                assert!(
                    a.body.as_ref().is_some_and(is_unavailable_body),
                    "503 with an unexpected body: {a:?}"
                );
            }
            _ => panic!(
                "a submit was answered neither 200 nor 503 ({}): {a:?}\n{}",
                a.error.as_deref().unwrap_or("an HTTP answer"),
                node.log_tail()
            ),
        }
    }
    // Before the stop everything was acknowledged; while it was down, nothing. An answer counts as
    // given while down when it came after the server had been gone for half a second (a commit
    // made just before the stop may still be answered just after it) and before it was started
    // again. (While the server is down, each request waits out the pool's `acquire_timeout`, 3 s,
    // for a connection, so the server stays down for 4 s to see some whole.)
    let while_down =
        |a: &Answer| a.end > stopped + Duration::from_millis(500) && a.end < restarting;
    let before: Vec<&Answer> = answers.iter().filter(|a| a.end < stopping).collect();
    assert!(
        before.iter().all(|a| a.status == Some(200)),
        "a submit failed before PostgreSQL stopped: {:?}",
        before.iter().find(|a| a.status != Some(200))
    );
    let down: Vec<&Answer> = answers.iter().filter(|a| while_down(a)).collect();
    assert!(
        !down.is_empty(),
        "no submit was answered while PostgreSQL was down"
    );
    assert!(
        down.iter().all(|a| a.status == Some(503)),
        "a submit was acknowledged while PostgreSQL was down: {:?}",
        down.iter().find(|a| a.status != Some(503))
    );
    // Submits work again by themselves. (The server accepts connections a little before
    // `pg_ctl start` returns, so anything acknowledged after `pg_ctl start` was run counts.)
    let resumed = answers
        .iter()
        .find(|a| a.status == Some(200) && a.end > restarting)
        .map(|a| a.end)
        .unwrap_or_else(|| {
            panic!(
                "no submit was acknowledged within {RESUME_WITHIN:?} of PostgreSQL's return\n{}",
                node.log_tail()
            )
        });
    assert!(
        resumed < restarted + RESUME_WITHIN,
        "submits resumed only {:?} after PostgreSQL's return",
        resumed - restarted
    );
    let unavailable: Vec<&Answer> = answers.iter().filter(|a| a.status == Some(503)).collect();
    let first_503 = unavailable.first().unwrap();
    let last_503 = unavailable.last().unwrap();
    assert!(
        last_503.end < restarted + RESUME_WITHIN,
        "submits were still answered 503 at {:?}, {:?} after the restart",
        last_503.end,
        last_503.end - restarted
    );

    // Readiness followed the database.
    assert!(
        probes
            .iter()
            .filter(|p| p.end < stopping)
            .all(|p| p.status == Some(200)),
        "/readyz was not 200 before the stop: {probes:?}"
    );
    let probes_down: Vec<&Answer> = probes.iter().filter(|p| while_down(p)).collect();
    assert!(
        !probes_down.is_empty() && probes_down.iter().all(|p| p.status == Some(503)),
        "/readyz was not 503 while PostgreSQL was down: {probes_down:?}"
    );
    assert!(
        probes_down.iter().all(|p| p.latency() < MAX_LATENCY
            && p.retry_after.is_some()
            && p.body.as_ref().is_some_and(is_unavailable_body)),
        "/readyz answered slowly, without Retry-After or with another body while down: \
         {probes_down:?}"
    );
    let ready = common::wait_for(RESUME_WITHIN, || async {
        let res = http.get(format!("{base}/readyz")).send().await.ok()?;
        (res.status() == 200).then_some(())
    })
    .await;
    assert!(ready.is_some(), "/readyz never said 200 again");

    // Every acknowledged task is stored and finishes.
    let acked: Vec<String> = answers.iter().filter_map(Answer::task_id).collect();
    let unique: HashSet<&String> = acked.iter().collect();
    assert_eq!(unique.len(), acked.len(), "a task id was handed out twice");
    let acked_before = answers
        .iter()
        .filter(|a| a.status == Some(200) && a.end < stopping)
        .count();
    let acked_after = answers
        .iter()
        .filter(|a| a.status == Some(200) && a.end > restarted)
        .count();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut finals: HashMap<String, Value> = HashMap::new();
    let mut missing: HashSet<String> = HashSet::new();
    while finals.len() + missing.len() < acked.len() {
        assert!(
            Instant::now() < deadline,
            "{} of {} acknowledged tasks ended in time\n{}",
            finals.len(),
            acked.len(),
            node.log_tail()
        );
        let pending: Vec<&String> = acked
            .iter()
            .filter(|id| !finals.contains_key(*id) && !missing.contains(*id))
            .collect();
        for chunk in pending.chunks(20) {
            let res = http
                .post(format!("{base}/api/v1/fetch-many"))
                .header("Authorization", &key)
                .json(&json!({ "task_ids": chunk }))
                .send()
                .await
                .unwrap();
            assert_eq!(res.status(), 200);
            let body: Value = res.json().await.unwrap();
            let tasks = body["tasks"].as_array().unwrap();
            let found: HashSet<&str> = tasks.iter().filter_map(|t| t["task_id"].as_str()).collect();
            for id in chunk {
                if !found.contains(id.as_str()) {
                    missing.insert((*id).clone());
                }
            }
            for t in tasks {
                if matches!(t["status"].as_str(), Some("finished" | "failed")) {
                    finals.insert(t["task_id"].as_str().unwrap().to_string(), t.clone());
                }
            }
        }
        if finals.len() + missing.len() < acked.len() {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
    let failed: Vec<&Value> = finals
        .values()
        .filter(|t| t["status"] != "finished")
        .collect();
    // The first task to finish after the restart: work resumed.
    let first_finish_after = finals
        .values()
        .filter_map(|t| {
            let at = chrono::DateTime::parse_from_rfc3339(t["finished_at"].as_str()?).ok()?;
            since_t0(at.timestamp_millis())
        })
        .filter(|&at| at > restarting)
        .min();

    // The wake-up listener is back: it lost its connection at the stop and says when it listens
    // again (at info, which this test asks for).
    let log = node.stderr();
    let listener_back = log
        .lines()
        .filter(|l| l.contains("listening for other nodes' wake-ups again"))
        .filter_map(|l| {
            let at = chrono::DateTime::parse_from_rfc3339(l.split_whitespace().next()?).ok()?;
            since_t0(at.timestamp_millis())
        })
        .filter(|&at| at > restarting)
        .max();

    // When the server itself said it was ready again (its log), as opposed to when `pg_ctl`
    // noticed.
    let server_ready = std::fs::read_to_string(cluster.root.path().join("postgres.log"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("database system is ready to accept connections"))
        .filter_map(|l| {
            let at = chrono::NaiveDateTime::parse_from_str(l.get(..23)?, "%Y-%m-%d %H:%M:%S%.3f")
                .ok()?;
            since_t0(at.and_utc().timestamp_millis())
        })
        .filter(|&at| at > restarting)
        .max();
    let after_stop = |t: Duration| format!("+{:.2} s", t.saturating_sub(stopping).as_secs_f64());
    // After the server accepted connections again (negative: between `pg_ctl start` being run and
    // its return).
    let after_up = |t: Duration| {
        let d = t.as_secs_f64() - restarted.as_secs_f64();
        format!("{d:+.2} s after `pg_ctl start` returned")
    };
    let max_503 = unavailable.iter().map(|a| a.latency()).max().unwrap();
    println!(
        "PostgreSQL restarted under load: {} submits from {CLIENTS} clients, times from `pg_ctl stop -m immediate`:",
        answers.len()
    );
    println!(
        "  server gone {}, `pg_ctl start` run {}, server ready (its log) {}, `pg_ctl start` \
         returned {} (down {})",
        after_stop(stopped),
        after_stop(restarting),
        server_ready.map_or("?".to_string(), after_stop),
        after_stop(restarted),
        secs(restarted - stopping)
    );
    let first_503_sent = unavailable.iter().map(|a| a.start).min().unwrap();
    let last_503_sent = unavailable.iter().map(|a| a.start).max().unwrap();
    println!(
        "  submits answered 503 from {} to {}: for {} ({} answers, to submits sent from {} to \
         {}; the slowest took {}; none 500)",
        after_stop(first_503.end),
        after_stop(last_503.end),
        secs(last_503.end - first_503.end),
        unavailable.len(),
        after_stop(first_503_sent),
        after_stop(last_503_sent),
        secs(max_503)
    );
    println!(
        "  /readyz answered 503 {} times while down, 200 again after",
        probes.iter().filter(|p| p.status == Some(503)).count()
    );
    println!(
        "  first submit acknowledged after the restart: {} ({})",
        after_stop(resumed),
        after_up(resumed)
    );
    match first_finish_after {
        Some(t) => println!(
            "  first task finished after the restart: {} ({})",
            after_stop(t),
            after_up(t)
        ),
        None => println!("  first task finished after the restart: none"),
    }
    match listener_back {
        Some(t) => println!(
            "  wake-up listener listening again: {} ({})",
            after_stop(t),
            after_up(t)
        ),
        None => println!("  wake-up listener listening again: no log line"),
    }
    println!(
        "  acknowledged: {} in all ({acked_before} before the stop, {acked_after} after the restart), \
         {} finished",
        acked.len(),
        finals.len() - failed.len()
    );
    println!(
        "  lost: {} (not stored: {}, not finished: {})",
        missing.len() + failed.len(),
        missing.len(),
        failed.len()
    );
    assert!(
        missing.is_empty(),
        "acknowledged tasks are not stored: {missing:?}"
    );
    assert!(
        failed.is_empty(),
        "acknowledged tasks did not finish: {failed:?}"
    );
    assert!(
        first_finish_after.is_some(),
        "no task finished after the restart"
    );
    assert!(
        listener_back.is_some(),
        "the wake-up listener did not say it listens again after the restart:\n{}",
        node.log_tail()
    );
    assert!(
        node.child.try_wait().unwrap().is_none(),
        "easel exited:\n{}",
        node.log_tail()
    );
}

/// easel started while its PostgreSQL is not up yet waits for it, saying so in its log (without
/// the URL's password), and serves once it is up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn easel_waits_for_a_postgres_that_is_not_up_yet() {
    const PASSWORD: &str = "hunter2";
    // Each test starts a cluster and an easel: two at once would time each other out.
    let _turn = crate::one_at_a_time().await;
    let Some(cluster) = Cluster::init() else {
        return;
    };
    // Trust authentication ignores the password; it is there to be kept out of the logs.
    let url = format!(
        "postgres://postgres:{PASSWORD}@127.0.0.1:{}/postgres",
        cluster.port
    );
    let mut node = Node::spawn(&url, &[("RUST_LOG", "debug")]);
    // Each try waits out the pool's acquire timeout (3 s) before it is logged.
    let said = common::wait_for(Duration::from_secs(10), || async {
        node.stderr()
            .lines()
            .any(|l| l.contains("cannot reach PostgreSQL") && l.contains("retrying"))
            .then_some(())
    })
    .await;
    assert!(
        node.child.try_wait().unwrap().is_none(),
        "easel exited instead of waiting for PostgreSQL:\n{}",
        node.log_tail()
    );
    let log = node.stderr();
    assert!(
        said.is_some(),
        "no log line says easel is waiting for PostgreSQL:\n{log}"
    );
    let waiting: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("cannot reach PostgreSQL") && l.contains("retrying"))
        .collect();
    println!(
        "while PostgreSQL is down, easel logs ({} such lines so far):\n  {}",
        waiting.len(),
        waiting[0]
    );

    let starting = Instant::now();
    cluster.start();
    let (base, key) = node.listening(Duration::from_secs(15)).await;
    println!(
        "easel listening {} after PostgreSQL started",
        secs(starting.elapsed())
    );
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let res = http
        .post(format!("{base}/api/v1/imagine"))
        .header("Authorization", &key)
        .json(&json!({ "prompt": "after the wait" }))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let id = res.json::<Value>().await.unwrap()["task_id"]
        .as_str()
        .unwrap()
        .to_string();
    let finished = common::wait_for(Duration::from_secs(15), || async {
        let res = http
            .post(format!("{base}/api/v1/fetch"))
            .header("Authorization", &key)
            .json(&json!({ "task_id": id }))
            .send()
            .await
            .ok()?;
        let task: Value = res.json().await.ok()?;
        (task["status"] == "finished").then_some(())
    })
    .await;
    assert!(finished.is_some(), "the task did not finish");

    let (stdout, stderr) = (node.stdout(), node.stderr());
    assert!(
        !stdout.contains(PASSWORD) && !stderr.contains(PASSWORD),
        "the database password appears in easel's output:\n{}",
        stdout
            .lines()
            .chain(stderr.lines())
            .filter(|l| l.contains(PASSWORD))
            .collect::<Vec<_>>()
            .join("\n")
    );
}
