//! Test harness: an easel spawned in-process on port 0 with its own data dir, typed helpers for
//! its API, and a local webhook receiver that records what it gets and can be told to misbehave.
#![allow(dead_code)]

pub mod binary;
pub mod chaos;
pub mod receiver;
pub mod s3;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tempfile::TempDir;
use tokio::sync::oneshot;

use easel::config::{Config, SqliteSynchronous};
use easel::store::SharedStore;
use easel::Application;

/// An easel built but not started: no server, worker or dispatcher runs, so the test drives each
/// step itself. With its first account and a live key for it.
pub struct Idle {
    pub app: Application,
    pub account: easel::store::Account,
    /// As `Store::submit` takes it.
    pub key: [u8; 32],
    pub dir: TempDir,
}

impl Idle {
    pub async fn build() -> Idle {
        let dir = tempfile::tempdir().unwrap();
        let app = Application::build(test_config(dir.path())).await.unwrap();
        let account = app.store().first_account().await.unwrap().unwrap();
        let key = key_hash(app.store().as_ref(), &account.id).await;
        Idle {
            app,
            account,
            key,
            dir,
        }
    }

    pub fn store(&self) -> &SharedStore {
        self.app.store()
    }
}

/// A task as `Store::submit` takes it: `mode` (turbo, fast or relax) at `priority`, no
/// webhook.
pub fn new_task(mode: &str, priority: i64) -> easel::store::NewTask {
    easel::store::NewTask {
        operation: easel::domain::Operation::Imagine,
        prompt: format!("{mode} task"),
        aspect_ratio: easel::domain::AspectRatio::SQUARE,
        process_mode: match mode {
            "turbo" => easel::domain::ProcessMode::Turbo,
            "fast" => easel::domain::ProcessMode::Fast,
            _ => easel::domain::ProcessMode::Relax,
        },
        priority,
        seed: 7,
        parent_seq: None,
        webhook_url: None,
        webhook_secret: None,
        cost: 0,
        idempotency: None,
        extras: Default::default(),
    }
}

/// Store `task` with `key`, which must be live and under quota; the task's public id.
pub async fn insert(
    store: &dyn easel::store::Store,
    task: &easel::store::NewTask,
    key: &[u8; 32],
) -> uuid::Uuid {
    match store.submit(task, key, &100.into()).await.unwrap() {
        easel::store::Submitted::Queued { task_id, .. } => task_id,
        other => panic!("not queued: {other:?}"),
    }
}

/// An empty database as the release before migration `version` left it (every migration below
/// it applied), for upgrade tests: its data dir, its URL and a connection to fill it through.
pub async fn database_before(version: i64) -> (TempDir, String, sqlx::SqliteConnection) {
    use sqlx::Connection;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("easel.db").display());
    let options = url
        .parse::<sqlx::sqlite::SqliteConnectOptions>()
        .unwrap()
        .create_if_missing(true);
    let mut conn = sqlx::SqliteConnection::connect_with(&options)
        .await
        .unwrap();
    let mut before = sqlx::migrate!("./migrations/sqlite");
    before.migrations = std::borrow::Cow::Owned(
        before
            .migrations
            .iter()
            .filter(|m| m.version < version)
            .cloned()
            .collect(),
    );
    before.run(&mut conn).await.unwrap();
    (dir, url, conn)
}

/// A new live key for the account, as the hash that `Store::submit` takes.
pub async fn key_hash(store: &dyn easel::store::Store, account_id: &str) -> [u8; 32] {
    let secret = easel::auth::create_key(store, account_id, "test")
        .await
        .expect("key created");
    easel::auth::hash_key(&secret)
}

/// Logs through libtest's capture, so they show only for failing tests.
pub fn init_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,sqlx=warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
}

pub struct TestApp {
    pub base: String,
    pub key: String,
    pub http: reqwest::Client,
    pub store: SharedStore,
    pub config: Config,
    pub dir: TempDir,
    /// The node's progress deliveries, as its workers get them.
    pub progress: easel::webhooks::progress::ProgressHooks,
    stop: Option<oneshot::Sender<()>>,
    handle: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

/// The PostgreSQL database the tests may make schemas in (`EASEL_TEST_POSTGRES`, set by
/// `scripts/test.sh`), or None when there is none. Under CI there must be one.
pub fn postgres() -> Option<String> {
    match std::env::var("EASEL_TEST_POSTGRES") {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("CI=true but EASEL_TEST_POSTGRES is not set: the PostgreSQL tests may not be skipped")
        }
        _ => None,
    }
}

/// Whether this run of the integration suite is against PostgreSQL (`EASEL_TEST_STORE=postgres`)
/// rather than SQLite.
pub fn on_postgres() -> bool {
    std::env::var("EASEL_TEST_STORE").is_ok_and(|v| v == "postgres")
}

/// A connection to the database `config` names, whichever it is, for tests that look at or
/// change rows from outside as an operator or another node could. Statements must be written so
/// that both databases take them (values inline, no placeholders).
pub async fn database(config: &Config) -> sqlx::AnyConnection {
    use sqlx::Connection;
    sqlx::any::install_default_drivers();
    sqlx::AnyConnection::connect(&config.database_url())
        .await
        .unwrap()
}

/// True (and the test should return) when the suite runs on PostgreSQL and the test is about
/// `what`, a part of the SQLite store alone (the conformance suite covers the rules for both).
pub fn sqlite_only(what: &str) -> bool {
    if on_postgres() {
        eprintln!("skipped on PostgreSQL: this test is about {what}");
    }
    on_postgres()
}

/// A database URL of its own for one test: a fresh schema in the tests' PostgreSQL database,
/// which the URL's connections use as their `search_path`.
pub fn fresh_postgres_url(base: &str) -> String {
    let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
    let create = format!("CREATE SCHEMA {schema}");
    let admin = base.to_string();
    // A thread of its own: callers may or may not be inside a runtime.
    std::thread::spawn(move || {
        use sqlx::Connection;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut conn = sqlx::PgConnection::connect(&admin).await.unwrap();
            sqlx::query(&create).execute(&mut conn).await.unwrap();
            conn.close().await.unwrap();
        })
    })
    .join()
    .unwrap();
    let sep = if base.contains('?') { '&' } else { '?' };
    format!("{base}{sep}options=-c%20search_path%3D{schema}")
}

/// Settings for fast tests: small images, short leases and schedules, local webhooks allowed.
/// The store is SQLite in `dir`, or with `EASEL_TEST_STORE=postgres` a fresh PostgreSQL schema.
pub fn test_config(dir: &std::path::Path) -> Config {
    let database_url = on_postgres().then(|| {
        let base = postgres().expect("EASEL_TEST_STORE=postgres needs EASEL_TEST_POSTGRES");
        fresh_postgres_url(&base)
    });
    let mut config = Config {
        data_dir: dir.to_path_buf(),
        ..Config::default()
    };
    config.database.url = database_url;
    config.database.max_connections = 6;
    config.database.sqlite_synchronous = SqliteSynchronous::Normal;
    config.server.listen = "127.0.0.1:0".parse().unwrap();
    config.server.shutdown_timeout = Duration::from_secs(5);
    config.worker.image_size = 128;
    config.worker.poll_interval = Duration::from_millis(100);
    config.worker.lease = Duration::from_secs(3);
    config.worker.heartbeat = Duration::from_millis(200);
    config.webhooks.timeout = Duration::from_secs(2);
    config.webhooks.retry_schedule = vec![
        Duration::from_millis(300),
        Duration::from_millis(600),
        Duration::from_millis(900),
    ];
    config.webhooks.allow_http = true;
    config.webhooks.allow_private = true;
    config
}

impl TestApp {
    pub async fn spawn() -> TestApp {
        Self::spawn_with(|_| {}).await
    }

    pub async fn spawn_with(adjust: impl FnOnce(&mut Config)) -> TestApp {
        let dir = tempfile::tempdir().unwrap();
        let mut config = test_config(dir.path());
        adjust(&mut config);
        Self::start(dir, config).await
    }

    /// Start on an existing data dir (a restart).
    pub async fn start(dir: TempDir, config: Config) -> TestApp {
        init_logs();
        let app = Application::build(config.clone()).await.unwrap();
        let base = format!("http://{}", app.local_addr());
        let store = app.store().clone();
        let progress = app.progress_hooks().clone();
        let key = match app.first_key() {
            Some(k) => k.to_string(),
            None => easel::auth::create_key(
                store.as_ref(),
                &store.first_account().await.unwrap().unwrap().id,
                "test",
            )
            .await
            .unwrap(),
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let handle = tokio::spawn(app.run(async {
            let _ = stopped.await;
        }));
        TestApp {
            base,
            key,
            http: reqwest::Client::new(),
            store,
            config,
            dir,
            progress,
            stop: Some(stop),
            handle: Some(handle),
        }
    }

    /// Shut down gracefully and wait for it; returns the data dir for a restart.
    pub async fn stop(mut self) -> (TempDir, Config) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(handle) = self.handle.take() {
            handle.await.unwrap().unwrap();
        }
        let dir = std::mem::replace(&mut self.dir, tempfile::tempdir().unwrap());
        (dir, self.config.clone())
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// POST JSON with this app's key.
    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.post_as(&self.key, path, body).await
    }

    pub async fn post_as(&self, key: &str, path: &str, body: &Value) -> (u16, Value) {
        let res = self
            .http
            .post(self.url(path))
            .header("Authorization", key)
            .json(body)
            .send()
            .await
            .unwrap();
        split(res).await
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.get_as(&self.key, path).await
    }

    pub async fn get_as(&self, key: &str, path: &str) -> (u16, Value) {
        let res = self
            .http
            .get(self.url(path))
            .header("Authorization", key)
            .send()
            .await
            .unwrap();
        split(res).await
    }

    /// The text of `/metrics`, asked with `token`.
    pub async fn metrics(&self, token: &str) -> String {
        let res = self
            .http
            .get(self.url("/metrics"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200, "{res:?}");
        res.text().await.unwrap()
    }

    /// The value of the counter or gauge `name` (no labels) on `/metrics`, asked with `token`.
    pub async fn metric(&self, token: &str, name: &str) -> f64 {
        let text = self.metrics(token).await;
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no {name} in {text}"))
            .trim()
            .parse()
            .unwrap()
    }

    /// Submit `op` (`imagine`, `upscale-1x`, ...) with `body`: the task's id (panics unless 200).
    pub async fn submit(&self, op: &str, body: Value) -> String {
        self.submit_as(&self.key, op, body).await
    }

    /// As `submit`, with `key` (another account's, say).
    pub async fn submit_as(&self, key: &str, op: &str, body: Value) -> String {
        let (status, answer) = self.post_as(key, &format!("/api/v1/{op}"), &body).await;
        assert_eq!(status, 200, "{op} {body}: {answer}");
        answer["task_id"]
            .as_str()
            .unwrap_or_else(|| panic!("no task id: {answer}"))
            .to_string()
    }

    /// Submit an imagine task and return its id (panics unless 200).
    pub async fn imagine(&self, body: Value) -> String {
        self.submit("imagine", body).await
    }

    /// Submit an imagine task with `key`: its id (panics unless 200).
    pub async fn imagine_as(&self, key: &str, body: Value) -> String {
        self.submit_as(key, "imagine", body).await
    }

    /// Submit `op` and wait for its end: its final record, which must say `finished`.
    pub async fn finished(&self, op: &str, body: Value, within: Duration) -> Value {
        let id = self.submit(op, body.clone()).await;
        let record = self.wait_final(&id, within).await;
        assert_eq!(record["status"], "finished", "{op} {body}: {record}");
        record
    }

    pub async fn fetch(&self, task_id: &str) -> Value {
        self.fetch_as(&self.key, task_id).await
    }

    /// The task's record as `key` sees it (panics unless 200).
    pub async fn fetch_as(&self, key: &str, task_id: &str) -> Value {
        let (status, body) = self
            .post_as(key, "/api/v1/fetch", &json!({ "task_id": task_id }))
            .await;
        assert_eq!(status, 200, "{body}");
        body
    }

    /// Poll until the task is finished or failed.
    pub async fn wait_final(&self, task_id: &str, within: Duration) -> Value {
        self.wait_final_as(&self.key, task_id, within).await
    }

    /// As `wait_final`, polling with `key`.
    pub async fn wait_final_as(&self, key: &str, task_id: &str, within: Duration) -> Value {
        wait_for(within, || async {
            let t = self.fetch_as(key, task_id).await;
            matches!(t["status"].as_str(), Some("finished" | "failed")).then_some(t)
        })
        .await
        .unwrap_or_else(|| panic!("task {task_id} did not end within {within:?}"))
    }

    /// How many tasks the store holds, in every state.
    pub async fn stored_tasks(&self) -> i64 {
        let counts = self.store.task_counts().await.unwrap();
        counts.iter().map(|(_, n)| n).sum()
    }

    /// Poll until the task's status is `status` (`processing`, say): its record then.
    pub async fn wait_status(&self, task_id: &str, status: &str, within: Duration) -> Value {
        wait_for(within, || async {
            let t = self.fetch(task_id).await;
            (t["status"] == status).then_some(t)
        })
        .await
        .unwrap_or_else(|| panic!("task {task_id} not {status} within {within:?}"))
    }

    /// Poll until the task's webhook status is `status` (`delivered`, `undeliverable`): its
    /// record then.
    pub async fn wait_webhook(&self, task_id: &str, status: &str, within: Duration) -> Value {
        wait_for(within, || async {
            let t = self.fetch(task_id).await;
            (t["webhook"]["status"] == status).then_some(t)
        })
        .await
        .unwrap_or_else(|| panic!("task {task_id}'s webhook not {status} within {within:?}"))
    }

    /// The delivery attempts recorded for the task's webhook (`GET .../webhook-attempts`).
    pub async fn webhook_attempts(&self, task_id: &str) -> Vec<Value> {
        let (status, body) = self
            .get(&format!("/api/v1/tasks/{task_id}/webhook-attempts"))
            .await;
        assert_eq!(status, 200, "{body}");
        body["attempts"].as_array().unwrap().clone()
    }

    /// The file at `url` (a record's URL field, such as `image_urls[0]`), which must answer 200.
    pub async fn bytes(&self, url: &Value) -> Vec<u8> {
        let url = url.as_str().unwrap_or_else(|| panic!("not a URL: {url}"));
        let res = self.http.get(url).send().await.unwrap();
        assert_eq!(res.status(), 200, "{url}");
        res.bytes().await.unwrap().to_vec()
    }

    /// The PNG image at `url`, as `bytes` fetches it, decoded.
    pub async fn image(&self, url: &Value) -> easel::images::RgbaImage {
        easel::images::decode_png(&self.bytes(url).await).unwrap()
    }

    /// A new account with `credits` (None: unlimited), and a key of it: its id and the key.
    pub async fn account_with(&self, email: &str, credits: Option<i64>) -> (String, String) {
        let account = self
            .store
            .create_user(&easel::store::NewAccount {
                email: email.into(),
                password_hash: None,
                signing_secret: easel::webhooks::signing::generate_secret(),
                admin: false,
                credits,
            })
            .await
            .unwrap()
            .expect("a new email");
        let key = easel::auth::create_key(self.store.as_ref(), &account.id, "test")
            .await
            .unwrap();
        (account.id, key)
    }

    /// A key for another account.
    pub async fn key_for(&self, email: &str) -> String {
        let account = self
            .store
            .ensure_account(email, &easel::webhooks::signing::generate_secret())
            .await
            .unwrap();
        easel::auth::create_key(self.store.as_ref(), &account.id, "other")
            .await
            .unwrap()
    }
}

pub async fn split(res: reqwest::Response) -> (u16, Value) {
    let status = res.status().as_u16();
    let ct = res
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string());
    let text = res.text().await.unwrap();
    assert_eq!(
        ct.as_deref(),
        Some("application/json"),
        "every API response is JSON (status {status}, body {text})"
    );
    (status, serde_json::from_str(&text).unwrap())
}

/// Call `check` until it returns Some, at most for `within`.
pub async fn wait_for<T, F, Fut>(within: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = check().await {
            return Some(v);
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
