//! Layered, validated settings: built-in defaults, then an optional `easel.toml`, then `EASEL_*`
//! environment variables, then command-line flags. Validated once at start; the rest of the
//! program only sees a [`Config`] that is known to be usable.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use std::collections::BTreeMap;

use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use serde::{Deserialize, Serialize};

use crate::domain::{OpKind, Shape};

/// Every setting easel reads. Field names are the TOML keys; `EASEL_<NAME>` in upper case sets
/// the same field from the environment (for example `EASEL_WEBHOOK_TIMEOUT=5s`).
#[derive(Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct Config {
    /// Address the HTTP API listens on.
    pub listen: SocketAddr,
    /// Where the SQLite database and the image files live.
    pub data_dir: PathBuf,
    /// Base URL that clients use to reach this server; image URLs are built from it.
    /// Default: `http://{listen}` (with the port actually bound).
    pub public_url: Option<String>,
    /// Database URL: `sqlite://PATH` or a plain path (SQLite), or `postgres://...` /
    /// `postgresql://...` (PostgreSQL, for several nodes). Default: `sqlite://{data_dir}/easel.db`.
    /// A password in it is never logged.
    pub database_url: Option<String>,
    /// Most connections this node opens to PostgreSQL (unused with SQLite). Every node's pool
    /// counts against the server's own `max_connections`.
    pub database_max_connections: u32,
    /// The roles this node runs: any of `api` (the HTTP API and image files), `worker` (claims
    /// and generates tasks) and `dispatcher` (sends webhooks). All three by default. In the
    /// environment: a comma-separated list.
    #[serde(deserialize_with = "string_list::deserialize")]
    pub roles: Vec<String>,
    /// The image backends (`[[backends]]` tables in the configuration file). Empty: one built-in
    /// `procedural` backend.
    pub backends: Vec<crate::generate::backends::BackendConfig>,
    /// How long one task may keep trying its generation over the backends (transient failures
    /// are tried again with backoff, on the same backend or another) before it fails.
    #[serde(with = "duration")]
    pub generation_budget: Duration,
    /// SQLite `synchronous` pragma: `full` (fsync on every commit, the default) or `normal`
    /// (survives a crash of the process, may lose the last commits on power loss).
    pub sqlite_synchronous: String,

    /// Where the images are kept: `local` (files under `{data_dir}/files`, the default) or `s3`
    /// (an S3-compatible bucket; credentials from the `AWS_*` environment variables only).
    pub blob_store: String,
    /// The bucket, with `blob_store = "s3"` (required there).
    pub s3_bucket: Option<String>,
    /// Prepended to every object key (`easel/` keeps the images under `easel/`). Empty by default.
    pub s3_prefix: String,
    /// The S3 API's URL, for S3-compatible servers (MinIO, Ceph, moto...). Default: AWS, or
    /// `AWS_ENDPOINT`. With virtual-hosted-style requests the endpoint names the bucket.
    pub s3_endpoint: Option<String>,
    /// The bucket's region. Default: `AWS_REGION`, else `us-east-1`.
    pub s3_region: Option<String>,
    /// Address the bucket in the path (`{endpoint}/{bucket}/{key}`) rather than the host name;
    /// most self-hosted S3-compatible servers need this.
    pub s3_path_style: bool,
    /// Base URL under which the bucket (or a CDN in front of it) serves the keys directly; image
    /// URLs are then `{blobs_public_url}/{key}`. Default: easel serves them at
    /// `{public_url}/files/{key}`.
    pub blobs_public_url: Option<String>,
    /// Free space to keep on the filesystem of the image folder (`{data_dir}/files`, beside the
    /// SQLite database) with `blob_store = "local"`: below it workers stop writing images until
    /// space returns, so that the database keeps room for submits, key checks and webhook
    /// records. A size (`512MiB`, `1GiB`, `2GB`; plain digits are bytes) or a share of the
    /// filesystem (`5%`); `0` turns it off. Not used with `s3`.
    pub min_free_space: String,

    /// How many tasks this node generates at once. Zero runs no workers here (an API-only node;
    /// the queue is served by other nodes sharing the store).
    pub workers: usize,
    /// Long side of each generated image, in pixels.
    pub image_size: u32,
    /// How long a claimed task is leased to its worker before another may take it over.
    #[serde(with = "duration")]
    pub lease: Duration,
    /// How often a worker renews its lease and records progress.
    #[serde(with = "duration")]
    pub heartbeat: Duration,
    /// A task whose worker is lost this many times fails.
    pub max_attempts: u32,
    /// Fallback polling interval for the queue and the webhook outbox (they are woken at once
    /// by work created in this process).
    #[serde(with = "duration")]
    pub poll_interval: Duration,
    /// Least time one procedural generation takes; use it to model a real image model's latency
    /// in demos and load tests. Zero by default.
    #[serde(with = "duration")]
    pub procedural_min_duration: Duration,
    /// Words and phrases that make a prompt fail with `content policy violation`. Matched as whole
    /// words, case-insensitively. In the environment: a comma-separated list.
    #[serde(deserialize_with = "string_list::deserialize")]
    pub blocked_terms: Vec<String>,

    /// Largest accepted request body, in bytes.
    pub body_limit: usize,
    /// Longest time fetching one input image may take (`image_url`, `image_urls`).
    #[serde(with = "duration")]
    pub input_timeout: Duration,
    /// Largest input image file, in bytes.
    pub input_max_bytes: u64,
    /// Most pixels of a decoded input image.
    pub input_max_pixels: u64,
    /// Largest request body of an operation that carries a mask (`inpaint`), in bytes.
    pub mask_body_limit: usize,
    /// A client must send a request's headers within this time, or its connection is closed.
    #[serde(with = "duration")]
    pub header_timeout: Duration,
    /// A request body must arrive within this time (408 otherwise).
    #[serde(with = "duration")]
    pub body_timeout: Duration,
    /// Most open client connections; more wait in the kernel's accept queue.
    pub max_connections: usize,
    /// Most tasks one account may have queued or running at once; more is refused with 429.
    pub max_pending_per_account: u32,
    /// How long shutdown waits for running tasks and deliveries before releasing them.
    #[serde(with = "duration")]
    pub shutdown_timeout: Duration,

    /// The whole-exchange timeout of one webhook attempt.
    #[serde(with = "duration")]
    pub webhook_timeout: Duration,
    /// Delays of the retries, each counted from the failure of the initial attempt.
    #[serde(with = "duration_list")]
    pub webhook_retry_schedule: Vec<Duration>,
    /// Allow `http://` webhook URLs (development and tests only).
    pub webhook_allow_http: bool,
    /// Allow webhook destinations on private, loopback and other non-public addresses
    /// (development and tests only).
    pub webhook_allow_private: bool,
    /// Most webhook deliveries in flight at once.
    pub webhook_concurrency: usize,

    /// Log format: `text` or `json`.
    pub log_format: String,

    /// Who may make an account in the dashboard: `open` (anyone, the default) or `closed`
    /// (accounts only from the command line, `easel accounts create`).
    pub signup: String,
    /// Credits an account made by signing up (or `easel accounts create`) starts with. Unset
    /// (the default): unlimited, and submits are never refused for credits.
    pub signup_credits: Option<i64>,
    /// Credits each operation costs, by its name (`imagine`, `upscale-1x`, ...); operations not
    /// named keep their default (see [`default_cost`]).
    pub costs: BTreeMap<String, i64>,
    /// How long a dashboard session lasts after signing in.
    #[serde(with = "duration")]
    pub session_ttl: Duration,
    /// Serve `GET /metrics` (Prometheus) on this separate address, without credentials: bind it
    /// to a private interface. Unset: no separate listener.
    pub metrics_listen: Option<SocketAddr>,
    /// Serve `GET /metrics` on the main listener to requests with `Authorization: Bearer
    /// <metrics_token>` (at least 16 characters). Unset: `/metrics` is not on the main listener.
    pub metrics_token: Option<String>,
    /// Request rate limits by account plan (`[rate_limits.<plan>]` tables with `rate`, requests
    /// per second, and `burst`), applied per API key and per account, on each node separately.
    /// A plan not listed is not limited; empty by default.
    pub rate_limits: std::collections::BTreeMap<String, PlanRate>,

    /// How long a task's images (and the record's links to them) are kept after the task became
    /// final: a duration of at least 1 minute (`30days`, `12h`), or `forever` (the default),
    /// which removes nothing. Past it, worker nodes delete the files from the blob store and
    /// the record says `data_removed`; the record itself stays.
    #[serde(with = "retention")]
    pub retention: Option<Duration>,
    /// How often a worker node looks for tasks whose data has expired (with `retention` set).
    #[serde(with = "duration")]
    pub retention_sweep_interval: Duration,
    /// How long a submit's first answer is replayed to requests with the same `Idempotency-Key`
    /// (1 minute to 30 days).
    #[serde(with = "duration")]
    pub idempotency_ttl: Duration,
    /// The longest a request with `Prefer: wait` is held (1 to 60 s, whole seconds): a longer
    /// wait asked for is served this long, and `Preference-Applied` says so.
    #[serde(with = "duration")]
    pub max_wait: Duration,
}

/// One plan's request rate limits: per API key, a sustained `rate` (requests per second, may be
/// fractional) and a `burst` of requests allowed at once; per account (all its keys together),
/// `account_rate` and `account_burst`, by default the same as the key's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanRate {
    pub rate: f64,
    pub burst: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account_rate: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account_burst: Option<u32>,
}

impl PlanRate {
    /// The account's (rate, burst).
    pub fn account(&self) -> (f64, u32) {
        (
            self.account_rate.unwrap_or(self.rate),
            self.account_burst.unwrap_or(self.burst),
        )
    }
}

/// What an operation costs unless `costs` says otherwise: one credit per image it makes (4 for
/// the grid operations, 1 for those that make one image), 1 for the text operations `describe`
/// and `shorten`, and nothing for `seed`, which only reads its parent's seed.
pub fn default_cost(kind: OpKind) -> i64 {
    match kind {
        OpKind::Seed => 0,
        OpKind::Describe | OpKind::Shorten => 1,
        kind => match kind.shape() {
            Shape::Grid => 4,
            _ => 1,
        },
    }
}

/// Most credits one operation may be configured to cost.
pub const COST_MAX: i64 = 1_000_000;
/// Shortest and longest `idempotency_ttl`.
pub const IDEMPOTENCY_TTL_RANGE: std::ops::RangeInclusive<Duration> =
    Duration::from_secs(60)..=Duration::from_secs(30 * 86_400);
/// Shortest and longest `session_ttl`.
pub const SESSION_TTL_RANGE: std::ops::RangeInclusive<Duration> =
    Duration::from_secs(60)..=Duration::from_secs(366 * 86_400);

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: "127.0.0.1:8080".parse().expect("valid default address"),
            data_dir: PathBuf::from("./data"),
            public_url: None,
            database_url: None,
            database_max_connections: 16,
            roles: vec!["api".into(), "worker".into(), "dispatcher".into()],
            backends: Vec::new(),
            generation_budget: Duration::from_secs(900),
            sqlite_synchronous: "full".into(),
            blob_store: "local".into(),
            s3_bucket: None,
            s3_prefix: String::new(),
            s3_endpoint: None,
            s3_region: None,
            s3_path_style: false,
            blobs_public_url: None,
            min_free_space: "256MiB".into(),
            workers: 2,
            image_size: 1024,
            lease: Duration::from_secs(60),
            heartbeat: Duration::from_secs(5),
            max_attempts: 3,
            poll_interval: Duration::from_secs(1),
            procedural_min_duration: Duration::ZERO,
            blocked_terms: ["nsfw", "nude", "naked", "porn", "gore"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            body_limit: 64 * 1024,
            mask_body_limit: 8 * 1024 * 1024,
            input_timeout: Duration::from_secs(30),
            input_max_bytes: 20 * 1024 * 1024,
            input_max_pixels: 25_000_000,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(15),
            max_connections: 4096,
            max_pending_per_account: 1000,
            shutdown_timeout: Duration::from_secs(30),
            webhook_timeout: Duration::from_secs(10),
            webhook_retry_schedule: vec![
                Duration::from_secs(10),
                Duration::from_secs(30),
                Duration::from_secs(90),
            ],
            webhook_allow_http: false,
            webhook_allow_private: false,
            webhook_concurrency: 64,
            log_format: "text".into(),
            signup: "open".into(),
            signup_credits: None,
            costs: OpKind::ALL
                .iter()
                .map(|k| (k.as_str().to_string(), default_cost(*k)))
                .collect(),
            session_ttl: Duration::from_secs(14 * 86_400),
            metrics_listen: None,
            metrics_token: None,
            rate_limits: std::collections::BTreeMap::new(),
            retention: None,
            retention_sweep_interval: Duration::from_secs(60),
            idempotency_ttl: Duration::from_secs(86_400),
            max_wait: Duration::from_secs(60),
        }
    }
}

/// Settings given on the command line; `None` leaves the lower layers in force.
/// No `Debug`: it may hold a database URL with its password.
#[derive(Clone, Default, Serialize)]
pub struct Overrides {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<SocketAddr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub public_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workers: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub roles: Option<Vec<String>>,
}

impl Config {
    /// Load the layers. `file` is the TOML file to read; when `None`, `easel.toml` in the working
    /// directory is read if it exists (`EASEL_CONFIG` names another).
    pub fn load(file: Option<PathBuf>, overrides: &Overrides) -> anyhow::Result<Config> {
        let file = file
            .or_else(|| std::env::var_os("EASEL_CONFIG").map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from("easel.toml"));
        let config: Config = Figment::from(Serialized::defaults(Config::default()))
            .merge(Toml::file(&file))
            .merge(Env::prefixed("EASEL_").ignore(&["config"]))
            .merge(Serialized::defaults(overrides))
            .extract()
            .map_err(|e| anyhow::anyhow!("configuration: {e}"))?;
        let mut config = config;
        // Workflow files are named relative to the configuration file, as people write them.
        if let Some(dir) = file.parent() {
            for backend in &mut config.backends {
                let paths = backend
                    .workflow
                    .iter_mut()
                    .chain(backend.workflows.values_mut());
                for path in paths {
                    if path.is_relative() {
                        *path = dir.join(&*path);
                    }
                }
            }
        }
        config.validate()?;
        Ok(config)
    }

    /// Check the values that types alone do not.
    pub fn validate(&self) -> anyhow::Result<()> {
        use anyhow::bail;
        let mut names = std::collections::HashSet::new();
        for backend in &self.backends {
            backend
                .validate()
                .map_err(|e| anyhow::anyhow!("configuration: {e}"))?;
            if !names.insert(backend.name.as_str()) {
                bail!(
                    "configuration: backends: the name {:?} is used twice",
                    backend.name
                );
            }
        }
        if self.workers > 256 {
            bail!("configuration: workers must be at most 256");
        }
        if !(64..=4096).contains(&self.image_size) {
            bail!("configuration: image_size must be between 64 and 4096");
        }
        if self.heartbeat.is_zero() || self.heartbeat * 2 > self.lease {
            bail!("configuration: heartbeat must be non-zero and at most half of lease");
        }
        if self.max_attempts == 0 {
            bail!("configuration: max_attempts must be at least 1");
        }
        if self.poll_interval.is_zero() {
            bail!("configuration: poll_interval must be non-zero");
        }
        if self.body_limit < 1024 {
            bail!("configuration: body_limit must be at least 1024 bytes");
        }
        if self.input_timeout.is_zero() || self.input_max_bytes == 0 || self.input_max_pixels == 0 {
            bail!("configuration: input_timeout, input_max_bytes and input_max_pixels must be > 0");
        }
        if self.mask_body_limit < self.body_limit {
            bail!("configuration: mask_body_limit must be at least body_limit");
        }
        if self.header_timeout.is_zero() || self.body_timeout.is_zero() {
            bail!("configuration: header_timeout and body_timeout must be non-zero");
        }
        if self.max_connections == 0 {
            bail!("configuration: max_connections must be at least 1");
        }
        if self.webhook_timeout.is_zero() {
            bail!("configuration: webhook_timeout must be non-zero");
        }
        if self.webhook_concurrency == 0 {
            bail!("configuration: webhook_concurrency must be at least 1");
        }
        if self.webhook_retry_schedule.windows(2).any(|w| w[0] > w[1]) {
            bail!("configuration: webhook_retry_schedule must not decrease");
        }
        if !matches!(self.sqlite_synchronous.as_str(), "full" | "normal") {
            bail!("configuration: sqlite_synchronous must be `full` or `normal`");
        }
        if !matches!(self.log_format.as_str(), "text" | "json") {
            bail!("configuration: log_format must be `text` or `json`");
        }
        if let Some(url) = &self.database_url {
            crate::store::Backend::from_url(url)?;
        }
        if self.database_max_connections < 2 {
            bail!("configuration: database_max_connections must be at least 2");
        }
        if self.roles.is_empty() {
            bail!("configuration: roles must name at least one of api, worker, dispatcher");
        }
        if let Some(role) = self.roles.iter().find(|r| !Role::ALL.contains(&r.as_str())) {
            bail!(
                "configuration: roles: `{role}` is not a role; the roles are api, worker and \
                 dispatcher"
            );
        }
        for (name, url) in [
            ("public_url", &self.public_url),
            ("s3_endpoint", &self.s3_endpoint),
            ("blobs_public_url", &self.blobs_public_url),
        ] {
            if let Some(url) = url {
                let parsed = url::Url::parse(url)
                    .map_err(|e| anyhow::anyhow!("configuration: {name}: {e}"))?;
                if !matches!(parsed.scheme(), "http" | "https") {
                    bail!("configuration: {name} must be an http or https URL");
                }
            }
        }
        if self.metrics_token.as_ref().is_some_and(|t| t.len() < 16) {
            bail!("configuration: metrics_token must be at least 16 characters");
        }
        if self.listen.port() != 0 && self.metrics_listen == Some(self.listen) {
            bail!("configuration: metrics_listen must differ from listen");
        }
        for (plan, limit) in &self.rate_limits {
            let (account_rate, account_burst) = limit.account();
            for (name, rate) in [("rate", limit.rate), ("account_rate", account_rate)] {
                if !(rate.is_finite() && (0.001..=1_000_000.0).contains(&rate)) {
                    bail!(
                        "configuration: rate_limits.{plan}.{name} must be between 0.001 and \
                         1000000 requests per second"
                    );
                }
            }
            if limit.burst == 0 || account_burst == 0 {
                bail!(
                    "configuration: rate_limits.{plan}: burst and account_burst must be at least 1"
                );
            }
        }
        match self.blob_store.as_str() {
            "local" => {}
            "s3" => {
                if self
                    .s3_bucket
                    .as_deref()
                    .is_none_or(|b| b.trim().is_empty())
                {
                    bail!("configuration: s3_bucket is required with blob_store = \"s3\"");
                }
            }
            other => bail!("configuration: blob_store must be `local` or `s3`, not `{other}`"),
        }
        if !matches!(self.signup.as_str(), "open" | "closed") {
            bail!("configuration: signup must be `open` or `closed`");
        }
        if self
            .signup_credits
            .is_some_and(|c| !(0..=i64::MAX / 2).contains(&c))
        {
            bail!("configuration: signup_credits must not be negative");
        }
        for (name, cost) in &self.costs {
            if name.parse::<OpKind>().is_err() {
                bail!(
                    "configuration: costs: `{name}` is not an operation; the operations are {}",
                    OpKind::ALL
                        .iter()
                        .map(|k| k.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
            if !(0..=COST_MAX).contains(cost) {
                bail!("configuration: costs: {name} must be from 0 to {COST_MAX} credits");
            }
        }
        if !SESSION_TTL_RANGE.contains(&self.session_ttl) {
            bail!("configuration: session_ttl must be from 1 minute to 366 days");
        }
        if self.retention.is_some_and(|r| r.is_zero()) || self.retention_sweep_interval.is_zero() {
            bail!("configuration: retention and retention_sweep_interval must be non-zero");
        }
        if !IDEMPOTENCY_TTL_RANGE.contains(&self.idempotency_ttl) {
            bail!("configuration: idempotency_ttl must be from 1 minute to 30 days");
        }
        let wait_max = Duration::from_secs(crate::tasks::wait::WAIT_MAX_SECS);
        if !(Duration::from_secs(1)..=wait_max).contains(&self.max_wait)
            || self.max_wait.subsec_nanos() != 0
        {
            bail!("configuration: max_wait must be whole seconds from 1 s to 60 s");
        }
        self.min_free_space()?;
        Ok(())
    }

    /// What one submit of `kind` costs, in credits.
    pub fn cost(&self, kind: OpKind) -> i64 {
        self.costs
            .get(kind.as_str())
            .copied()
            .unwrap_or_else(|| default_cost(kind))
    }

    /// Whether anyone may sign up in the dashboard.
    pub fn signup_open(&self) -> bool {
        self.signup == "open"
    }

    /// `min_free_space`, parsed.
    pub fn min_free_space(&self) -> anyhow::Result<FreeSpace> {
        FreeSpace::parse(&self.min_free_space)
            .map_err(|e| anyhow::anyhow!("configuration: min_free_space: {e}"))
    }

    /// Whether this node runs `role` (one of [`Role::ALL`]).
    pub fn runs(&self, role: &str) -> bool {
        self.roles.iter().any(|r| r == role)
    }

    /// The database URL in force.
    pub fn database_url(&self) -> String {
        self.database_url
            .clone()
            .unwrap_or_else(|| format!("sqlite://{}", self.data_dir.join("easel.db").display()))
    }
}

/// The settings as JSON, with a password in `database_url` replaced by `***`: a `Config` that
/// reaches a log or a panic message gives away no secret (AWS keys are never in it).
impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut shown = self.clone();
        shown.database_url = shown.database_url.as_deref().map(crate::store::redact);
        shown.metrics_token = shown.metrics_token.map(|_| "***".into());
        match serde_json::to_string(&shown) {
            Ok(json) => write!(f, "Config {json}"),
            Err(_) => f.write_str("Config { .. }"),
        }
    }
}

/// A floor of free space: a number of bytes, or a share of the filesystem.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FreeSpace {
    Bytes(u64),
    /// Per cent of the filesystem's size, above 0 and below 100.
    Percent(f64),
}

impl FreeSpace {
    /// `512MiB`, `1GiB`, `2GB`, `1048576` (bytes), `5%`, `0`. Units: B, KB, MB, GB, TB (powers of
    /// 1000) and KiB, MiB, GiB, TiB (powers of 1024), in any case; a space may come before the
    /// unit.
    pub fn parse(text: &str) -> Result<FreeSpace, String> {
        let text = text.trim();
        let bad = || {
            format!(
                "`{text}` is neither a size (like 512MiB, 1GiB, 2GB or a number of bytes) nor \
                 a share of the filesystem (like 5%)"
            )
        };
        if let Some(share) = text.strip_suffix('%') {
            let share: f64 = share.trim().parse().map_err(|_| bad())?;
            if !(share.is_finite() && share > 0.0 && share < 100.0) {
                return Err(format!("`{text}`: a share must be above 0% and below 100%"));
            }
            return Ok(FreeSpace::Percent(share));
        }
        let split = text
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        let number: f64 = number.parse().map_err(|_| bad())?;
        let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "kb" | "k" => 1000,
            "mb" | "m" => 1000_u64.pow(2),
            "gb" | "g" => 1000_u64.pow(3),
            "tb" | "t" => 1000_u64.pow(4),
            "kib" => 1 << 10,
            "mib" => 1 << 20,
            "gib" => 1 << 30,
            "tib" => 1 << 40,
            _ => return Err(bad()),
        };
        let bytes = number * scale as f64;
        if !bytes.is_finite() || bytes >= u64::MAX as f64 {
            return Err(bad());
        }
        Ok(FreeSpace::Bytes(bytes as u64))
    }

    /// The floor in bytes on a filesystem of `total` bytes.
    pub fn bytes_of(&self, total: u64) -> u64 {
        match *self {
            FreeSpace::Bytes(bytes) => bytes,
            FreeSpace::Percent(share) => (total as f64 * share / 100.0) as u64,
        }
    }

    pub fn is_off(&self) -> bool {
        *self == FreeSpace::Bytes(0)
    }
}

/// The roles a node can run.
pub struct Role;

impl Role {
    pub const API: &'static str = "api";
    pub const WORKER: &'static str = "worker";
    pub const DISPATCHER: &'static str = "dispatcher";
    pub const ALL: [&'static str; 3] = [Role::API, Role::WORKER, Role::DISPATCHER];
}

/// Durations as human-readable strings (`10s`, `1m 30s`, `250ms`), or plain integers as seconds.
pub(crate) mod duration {
    use serde::{de, Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Secs(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Secs(s) => Ok(Duration::from_secs(s)),
            Raw::Text(t) => parse(&t).map_err(de::Error::custom),
        }
    }

    pub fn parse(text: &str) -> Result<Duration, String> {
        humantime::parse_duration(text.trim())
            .map_err(|e| format!("`{text}` is not a duration like 10s: {e}"))
    }
}

/// `retention`: `forever` (None), or a duration of at least [`RETENTION_MIN`] given as for
/// [`duration`]. The least is checked here, where a person's setting is read, so that tests may
/// build a `Config` with a shorter one.
mod retention {
    use serde::{de, Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => super::duration::serialize(d, s),
            None => s.serialize_str("forever"),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Secs(u64),
            Text(String),
        }
        let retention = match Raw::deserialize(d)? {
            Raw::Secs(s) => Duration::from_secs(s),
            Raw::Text(t) if matches!(t.trim(), "forever" | "") => return Ok(None),
            Raw::Text(t) => super::duration::parse(&t)
                .map_err(|e| de::Error::custom(format!("retention: {e}; or `forever`")))?,
        };
        if retention < super::RETENTION_MIN {
            return Err(de::Error::custom(
                "retention must be at least 1 minute, or `forever`",
            ));
        }
        Ok(Some(retention))
    }
}

/// The shortest `retention` a setting may give.
pub const RETENTION_MIN: Duration = Duration::from_secs(60);

/// A list of durations: a TOML array, or a comma-separated string (`10s,30s,90s`).
mod duration_list {
    use serde::{de, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &[Duration], s: S) -> Result<S::Ok, S::Error> {
        let text: Vec<String> = d
            .iter()
            .map(|d| humantime::format_duration(*d).to_string())
            .collect();
        s.serialize_str(&text.join(","))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Duration>, D::Error> {
        super::string_list::deserialize(d)?
            .iter()
            .map(|t| super::duration::parse(t).map_err(de::Error::custom))
            .collect()
    }
}

/// A list of strings: an array, or one comma-separated string. Empty items are dropped.
mod string_list {
    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            List(Vec<String>),
            Text(String),
        }
        let items = match Raw::deserialize(d)? {
            Raw::List(list) => list,
            Raw::Text(text) => text.split(',').map(str::to_string).collect(),
        };
        Ok(items
            .into_iter()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate() {
        Config::default().validate().unwrap();
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's Jail API returns figment::Error
    fn layers_apply_in_order() {
        figment::Jail::expect_with(|jail| {
            jail.create_file(
                "easel.toml",
                "workers = 7\nwebhook_timeout = \"4s\"\nblocked_terms = [\"x\"]\n",
            )?;
            jail.set_env("EASEL_WEBHOOK_TIMEOUT", "3s");
            jail.set_env("EASEL_WEBHOOK_RETRY_SCHEDULE", "1s, 2s,5s");
            jail.set_env("EASEL_WEBHOOK_ALLOW_HTTP", "true");
            let overrides = Overrides {
                workers: Some(3),
                ..Overrides::default()
            };
            let c = Config::load(None, &overrides).map_err(|e| e.to_string())?;
            assert_eq!(c.workers, 3);
            assert_eq!(c.webhook_timeout, Duration::from_secs(3));
            assert_eq!(
                c.webhook_retry_schedule,
                vec![
                    Duration::from_secs(1),
                    Duration::from_secs(2),
                    Duration::from_secs(5)
                ]
            );
            assert!(c.webhook_allow_http);
            assert_eq!(c.blocked_terms, vec!["x".to_string()]);
            Ok(())
        });
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's Jail API returns figment::Error
    fn the_example_file_holds_the_defaults() {
        let example = include_str!("../easel.example.toml");
        figment::Jail::expect_with(|jail| {
            jail.create_file("easel.toml", example)?;
            let c = Config::load(None, &Overrides::default()).map_err(|e| e.to_string())?;
            let d = Config::default();
            assert_eq!(
                serde_json::to_value(&c).unwrap(),
                serde_json::to_value(&d).unwrap()
            );
            Ok(())
        });
    }

    #[test]
    fn a_database_password_never_shows_in_debug_output() {
        let config = Config {
            database_url: Some("postgres://easel:hunter2@db:5432/easel".into()),
            ..Config::default()
        };
        let shown = format!("{config:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(
            shown.contains("postgres://easel:***@db:5432/easel"),
            "{shown}"
        );
    }

    #[test]
    fn bad_values_are_refused() {
        let c = Config {
            workers: 1000,
            ..Config::default()
        };
        assert!(c.validate().is_err());
        let c = Config {
            webhook_retry_schedule: vec![Duration::from_secs(5), Duration::from_secs(1)],
            ..Config::default()
        };
        assert!(c.validate().is_err());
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's Jail API returns figment::Error
    fn account_settings_are_merged_and_checked() {
        figment::Jail::expect_with(|jail| {
            jail.create_file(
                "easel.toml",
                "signup = \"closed\"\nsignup_credits = 50\nsession_ttl = \"2h\"\n[costs]\nimagine = 9\n",
            )?;
            let c = Config::load(None, &Overrides::default()).map_err(|e| e.to_string())?;
            assert!(!c.signup_open());
            assert_eq!(c.signup_credits, Some(50));
            assert_eq!(c.session_ttl, Duration::from_secs(7200));
            assert_eq!(c.cost(OpKind::Imagine), 9);
            assert_eq!(
                c.cost(OpKind::Upscale1x),
                1,
                "the others keep their defaults"
            );
            assert_eq!(c.cost(OpKind::Seed), 0);
            Ok(())
        });
        for (bad, named) in [
            (
                Config {
                    signup: "invite".into(),
                    ..Config::default()
                },
                "signup",
            ),
            (
                Config {
                    signup_credits: Some(-1),
                    ..Config::default()
                },
                "signup_credits",
            ),
            (
                Config {
                    costs: [("imagin".to_string(), 1)].into_iter().collect(),
                    ..Config::default()
                },
                "imagin",
            ),
            (
                Config {
                    costs: [("imagine".to_string(), -2)].into_iter().collect(),
                    ..Config::default()
                },
                "costs: imagine",
            ),
            (
                Config {
                    session_ttl: Duration::from_secs(5),
                    ..Config::default()
                },
                "session_ttl",
            ),
            (
                Config {
                    idempotency_ttl: Duration::from_secs(31 * 86_400),
                    ..Config::default()
                },
                "idempotency_ttl",
            ),
            (
                Config {
                    idempotency_ttl: Duration::from_secs(59),
                    ..Config::default()
                },
                "idempotency_ttl",
            ),
            (
                Config {
                    max_wait: Duration::from_secs(61),
                    ..Config::default()
                },
                "max_wait",
            ),
            (
                Config {
                    max_wait: Duration::from_millis(1500),
                    ..Config::default()
                },
                "max_wait",
            ),
        ] {
            let e = bad.validate().unwrap_err().to_string();
            assert!(e.contains(named), "{e}");
        }
    }

    #[test]
    fn metrics_and_rate_limit_settings_are_checked() {
        let c = Config {
            metrics_token: Some("short".into()),
            ..Config::default()
        };
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("metrics_token"), "{e}");
        let shown = format!(
            "{:?}",
            Config {
                metrics_token: Some("a-secret-metrics-token".into()),
                ..Config::default()
            }
        );
        assert!(!shown.contains("a-secret-metrics-token"), "{shown}");
        for (rate, burst, account_burst) in [
            (0.0, 5, None),
            (f64::NAN, 5, None),
            (1.0, 0, None),
            (1.0, 5, Some(0)),
        ] {
            let mut c = Config::default();
            c.rate_limits.insert(
                "free".into(),
                PlanRate {
                    rate,
                    burst,
                    account_rate: None,
                    account_burst,
                },
            );
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains("rate_limits.free"), "{e}");
        }
    }

    #[test]
    fn min_free_space_takes_sizes_and_shares() {
        let parse = |t: &str| FreeSpace::parse(t);
        assert_eq!(parse("1GiB"), Ok(FreeSpace::Bytes(1 << 30)));
        assert_eq!(parse("512 MiB"), Ok(FreeSpace::Bytes(512 << 20)));
        assert_eq!(parse("2GB"), Ok(FreeSpace::Bytes(2_000_000_000)));
        assert_eq!(parse("1.5gib"), Ok(FreeSpace::Bytes(3 << 29)));
        assert_eq!(parse("4096"), Ok(FreeSpace::Bytes(4096)));
        assert_eq!(parse("0"), Ok(FreeSpace::Bytes(0)));
        assert!(parse("0").unwrap().is_off());
        assert_eq!(parse("5%"), Ok(FreeSpace::Percent(5.0)));
        assert_eq!(parse("5%").unwrap().bytes_of(1000), 50);
        for bad in [
            "", "GiB", "-1GiB", "1 parsec", "0%", "100%", "150%", "x%", "1e400",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        let c = Config {
            min_free_space: "lots".into(),
            ..Config::default()
        };
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("min_free_space") && e.contains("`lots`"), "{e}");
    }

    #[test]
    fn blob_store_settings_are_checked_and_named() {
        let c = Config {
            blob_store: "s3".into(),
            ..Config::default()
        };
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("s3_bucket"), "{e}");
        let c = Config {
            blob_store: "ftp".into(),
            ..Config::default()
        };
        let e = c.validate().unwrap_err().to_string();
        assert!(
            e.contains("blob_store") && e.contains("`local` or `s3`"),
            "{e}"
        );
        let c = Config {
            blob_store: "s3".into(),
            s3_bucket: Some("images".into()),
            s3_endpoint: Some("localhost:9000".into()),
            ..Config::default()
        };
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("s3_endpoint"), "{e}");
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's Jail API returns figment::Error
    fn retention_is_forever_by_default_and_at_least_a_minute_when_set() {
        figment::Jail::expect_with(|jail| {
            let load = || Config::load(None, &Overrides::default()).map_err(|e| e.to_string());
            assert_eq!(load()?.retention, None);
            jail.create_file("easel.toml", "retention = \"30days\"\n")?;
            assert_eq!(load()?.retention, Some(Duration::from_secs(30 * 86_400)));
            jail.set_env("EASEL_RETENTION", "forever");
            assert_eq!(load()?.retention, None);
            jail.set_env("EASEL_RETENTION", "12h");
            assert_eq!(load()?.retention, Some(Duration::from_secs(12 * 3600)));
            jail.set_env("EASEL_RETENTION", "30s");
            let e = load().unwrap_err();
            assert!(e.contains("retention must be at least 1 minute"), "{e}");
            jail.set_env("EASEL_RETENTION", "soon");
            let e = load().unwrap_err();
            assert!(e.contains("retention") && e.contains("`soon`"), "{e}");
            Ok(())
        });
        let c = Config {
            retention_sweep_interval: Duration::ZERO,
            ..Config::default()
        };
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("retention_sweep_interval"), "{e}");
    }
}
