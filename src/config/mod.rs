//! Layered, validated settings: built-in defaults, then an optional `easel.toml`, then `EASEL_*`
//! environment variables, then command-line flags. Validated once at start; the rest of the
//! program only sees a [`Config`] that is known to be usable.
//!
//! The file stays flat (`workers = 4`, `webhook_timeout = "5s"`, `[[backends]]`,
//! `[plans.<name>]`, `[costs]`), and `EASEL_<KEY>` sets the same key. In the program the
//! settings are grouped by concern, one struct per section, each checking its own values. A key
//! in the file that no section knows is refused by its name.

pub mod accounts;
pub mod backends;
pub mod blobs;
pub mod database;
pub mod limits;
pub mod live;
pub mod models;
pub mod moderation;
pub mod plans;
pub mod retention;
pub mod samplers;
pub mod server;
pub(crate) mod values;
pub mod webhooks;
pub mod worker;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use figment::providers::{Env, Format, Serialized, Toml};
use figment::{Figment, Provider};
use serde::{Deserialize, Serialize};

pub use accounts::{
    default_cost, Accounts, Signup, COST_MAX, SESSION_TTL_RANGE, SIGNUPS_PER_HOUR, SIGNUP_CREDITS,
};
pub use backends::{BackendConfig, BackendKind};
pub use blobs::{BlobStoreKind, Blobs, FreeSpace};
pub use database::{Database, DatabaseKind, SqliteSynchronous};
pub use limits::{
    DecodeMemoryBudget, Limits, PlanRate, DECODE_MEMORY_BUDGET_RANGE, IDEMPOTENCY_TTL_RANGE,
    WAIT_MAX_SECS,
};
pub use live::Live;
pub use models::{Catalogue, Model, ModelConfig};
pub use moderation::{Checkers, OnError};
pub use plans::{Period, Plan, Plans, SELF_HOSTED};
pub use retention::{Retention, RETENTION_MIN};
pub use server::{LogFormat, Role, Server};
pub use values::{duration, redact};
pub use webhooks::Webhooks;
pub use worker::Worker;

use crate::domain::OpKind;

/// Every setting easel reads, by section. Each section is flattened: its fields' keys sit at
/// the top of the file and of the environment, as they always have.
#[derive(Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct Config {
    /// Where the SQLite database and the image files live.
    pub data_dir: PathBuf,
    #[serde(flatten)]
    pub server: Server,
    #[serde(flatten)]
    pub database: Database,
    #[serde(flatten)]
    pub blobs: Blobs,
    #[serde(flatten)]
    pub worker: Worker,
    /// The image backends (`[[backends]]` tables in the configuration file). Empty: one built-in
    /// `procedural` backend.
    pub backends: Vec<BackendConfig>,
    /// The models callers pick from (`[[models]]` tables). Empty: each backend is its own
    /// model (see [`models`]).
    pub models: Vec<ModelConfig>,
    #[serde(flatten)]
    pub limits: Limits,
    #[serde(flatten)]
    pub webhooks: Webhooks,
    #[serde(flatten)]
    pub accounts: Accounts,
    #[serde(flatten)]
    pub plans: Plans,
    #[serde(flatten)]
    pub retention: Retention,
    /// The operator's moderation services (`[moderation]` table).
    pub moderation: Checkers,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            data_dir: PathBuf::from("./data"),
            server: Server::default(),
            database: Database::default(),
            blobs: Blobs::default(),
            worker: Worker::default(),
            backends: Vec::new(),
            models: Vec::new(),
            limits: Limits::default(),
            webhooks: Webhooks::default(),
            accounts: Accounts::default(),
            plans: Plans::default(),
            retention: Retention::default(),
            moderation: Checkers::default(),
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
        refuse_moved_keys(&file)?;
        refuse_unknown_keys(&file)?;
        // `__` nests: `EASEL_PLANS__FREE__MAX_PENDING` is `max_pending` of `[plans.free]`.
        let figment = Figment::from(Serialized::defaults(Config::default()))
            .merge(Toml::file(&file))
            .merge(Env::prefixed("EASEL_").ignore(&["config"]).split("__"))
            .merge(Serialized::defaults(overrides));
        // Section by section, so that an error names the key and where it was set.
        let fail = |e: figment::Error| anyhow::anyhow!("configuration: {e}");
        let mut config = Config {
            data_dir: figment.extract_inner("data_dir").map_err(fail)?,
            server: figment.extract().map_err(fail)?,
            database: figment.extract().map_err(fail)?,
            blobs: figment.extract().map_err(fail)?,
            worker: figment.extract().map_err(fail)?,
            backends: figment.extract_inner("backends").map_err(fail)?,
            models: figment.extract_inner("models").map_err(fail)?,
            limits: figment.extract().map_err(fail)?,
            webhooks: figment.extract().map_err(fail)?,
            accounts: figment.extract().map_err(fail)?,
            plans: figment.extract().map_err(fail)?,
            retention: figment.extract().map_err(fail)?,
            moderation: figment.extract_inner("moderation").map_err(fail)?,
        };
        if let Some(dir) = file.parent() {
            backends::resolve_workflows(&mut config.backends, dir);
        }
        config.validate()?;
        Ok(config)
    }

    /// Check the values that types alone do not, section by section.
    pub fn validate(&self) -> anyhow::Result<()> {
        backends::validate(&self.backends)?;
        let catalogue = self.catalogue()?;
        let models: Vec<&str> = catalogue.models.iter().map(|m| m.name.as_str()).collect();
        self.plans.validate(&models)?;
        self.server.validate()?;
        self.database.validate()?;
        self.blobs.validate()?;
        self.worker.validate()?;
        self.limits.validate()?;
        self.webhooks.validate()?;
        self.accounts.validate()?;
        self.retention.validate()?;
        self.moderation.validate()?;
        Ok(())
    }

    /// The models, every default and limit filled in; an error naming the broken setting.
    pub fn catalogue(&self) -> anyhow::Result<Catalogue> {
        let mut catalogue = Catalogue::build(&self.models, &self.backends)
            .map_err(|e| anyhow::anyhow!("configuration: {e}"))?;
        for model in &mut catalogue.models {
            model.plans = self.plans.allowed_for(&model.name);
        }
        Ok(catalogue)
    }

    /// What one submit of `kind` costs, in credits.
    pub fn cost(&self, kind: OpKind) -> i64 {
        self.accounts.cost(kind)
    }

    /// Whether anyone may sign up in the dashboard.
    pub fn signup_open(&self) -> bool {
        self.accounts.signup_open()
    }

    /// Whether this node runs `role`.
    pub fn runs(&self, role: Role) -> bool {
        self.server.runs(role)
    }

    /// The database URL in force.
    pub fn database_url(&self) -> String {
        self.database.url_in(&self.data_dir)
    }

    /// Every key the file may hold at its top level: the keys the defaults are written with.
    pub fn known_keys() -> BTreeSet<String> {
        match serde_json::to_value(Config::default()) {
            Ok(serde_json::Value::Object(keys)) => keys.keys().cloned().collect(),
            _ => BTreeSet::new(),
        }
    }
}

/// A key that moved into `[plans.NAME]` (in the file, a `[[models]]` table, or the
/// environment) is refused saying where it went.
fn refuse_moved_keys(file: &Path) -> anyhow::Result<()> {
    let data = Toml::file(file)
        .data()
        .map_err(|e| anyhow::anyhow!("configuration: {e}"))?;
    let mut top = Vec::new();
    let mut models = Vec::new();
    for dict in data.values() {
        top.extend(dict.keys().cloned());
        if let Some(list) = dict.get("models").and_then(|m| m.as_array()) {
            for model in list {
                if let Some(table) = model.as_dict() {
                    models.push(table.keys().cloned().collect());
                }
            }
        }
    }
    let env: Vec<String> = std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .filter(|k| k.starts_with("EASEL_"))
        .collect();
    plans::refuse_moved(&top, &models, &env)
}

/// A key in the file that no setting has (a misspelt key, or a misspelt table such as
/// `[[backend]]`) is refused by its name rather than silently ignored. Only the file is checked:
/// the environment holds other programs' `EASEL_*` variables too, and tables below the top
/// (`[[backends]]`, `[[models]]`, `[plans.<name>]`, `[costs]`) check their own keys.
fn refuse_unknown_keys(file: &Path) -> anyhow::Result<()> {
    let data = Toml::file(file)
        .data()
        .map_err(|e| anyhow::anyhow!("configuration: {e}"))?;
    let known = Config::known_keys();
    let unknown: Vec<&String> = data
        .values()
        .flat_map(|dict| dict.keys())
        .filter(|key| !known.contains(*key))
        .collect();
    if let Some(key) = unknown.first() {
        anyhow::bail!(
            "configuration: {}: `{key}` is not a setting{}",
            file.display(),
            match closest(key, &known) {
                Some(near) => format!(" (did you mean `{near}`?)"),
                None => String::new(),
            }
        );
    }
    Ok(())
}

/// The known key nearest to a misspelt one, when it is near enough to be what was meant.
fn closest<'a>(key: &str, known: &'a BTreeSet<String>) -> Option<&'a str> {
    known
        .iter()
        .map(|k| (strsim::levenshtein(key, k), k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 4))
        .min()
        .map(|(_, k)| k.as_str())
}

/// The settings as JSON, with a password in `database_url` replaced by `***`: a `Config` that
/// reaches a log or a panic message gives away no secret (AWS keys are never in it).
impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut shown = self.clone();
        shown.database.url = shown.database.url.as_deref().map(crate::config::redact);
        shown.server.metrics_token = shown.server.metrics_token.map(|_| "***".into());
        shown.moderation.api_key = shown.moderation.api_key.map(|_| "***".into());
        match serde_json::to_string(&shown) {
            Ok(json) => write!(f, "Config {json}"),
            Err(_) => f.write_str("Config { .. }"),
        }
    }
}

#[cfg(test)]
mod tests;
