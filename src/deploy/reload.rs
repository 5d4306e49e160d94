//! Reload: the configuration file and the environment read again while easel runs (`easel
//! reload`, SIGHUP, `POST /api/v1/admin/reload`), and what may change without a restart put in
//! place: the backends and models, the plans (limits, rates, models, lists), and the
//! `[moderation]` checkers. Everything new is built before anything is replaced, so a
//! configuration that does not validate, or a backend that cannot be built, changes nothing.
//! A change to any other setting (the listen address, the database, the workers...) needs a
//! restart, and a reload that holds one is refused naming it. Each node reloads itself.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use crate::config::{Config, Live, Overrides};
use crate::net::moderation::ModerationServices;
use crate::net::DestinationPolicy;
use crate::ratelimit::RateLimits;
use crate::store::{ClaimRules, NewAudit, PendingLimits};
use crate::tasks::Tasks;
use crate::worker::Claims;

/// The settings a reload puts in place; a change to any other is refused.
pub const RELOADABLE: &[&str] = &["backends", "models", "plans", "default_plan", "moderation"];

/// Where the settings came from: read again, the same way, by a reload.
#[derive(Clone)]
pub struct ConfigSource {
    /// The file named on the command line, if one was (else `EASEL_CONFIG` or `easel.toml`).
    pub file: Option<PathBuf>,
    pub overrides: Overrides,
}

/// What a reload changed.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct Reloaded {
    /// The reloadable settings whose values changed (top-level keys of the file).
    pub changed: Vec<String>,
    /// Backends that are new, or whose settings changed (by name).
    pub backends_added: Vec<String>,
    /// Backends that are gone, or whose settings changed: they get no new job, and the jobs
    /// they run finish on them.
    pub backends_removed: Vec<String>,
}

/// Why a reload changed nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// The node was not started from a configuration it can read again.
    NoSource,
    /// The settings do not validate, or a backend cannot be built: the reasons.
    Invalid(String),
    /// These settings changed, and only a restart applies them.
    RestartOnly(Vec<String>),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::NoSource => f.write_str("this node was not started from a configuration it can read again"),
            Refused::Invalid(why) => write!(f, "the configuration is not valid, nothing changed: {why}"),
            Refused::RestartOnly(keys) => write!(
                f,
                "these settings change only with a restart, nothing changed: {} (a reload applies {})",
                keys.join(", "),
                RELOADABLE.join(", ")
            ),
        }
    }
}

/// Everything a reload replaces, and the settings it compares with.
pub struct Reloader {
    source: Mutex<Option<ConfigSource>>,
    /// The settings as last loaded (before the node's own adjustments, such as `workers`).
    loaded: Mutex<Config>,
    tasks: Arc<Tasks>,
    rate_limits: Arc<RateLimits>,
    claims: Claims,
    services: Arc<Live<Option<ModerationServices>>>,
    destinations: DestinationPolicy,
    /// One reload at a time.
    running: tokio::sync::Mutex<()>,
}

impl Reloader {
    pub fn new(
        loaded: Config,
        tasks: Arc<Tasks>,
        rate_limits: Arc<RateLimits>,
        claims: Claims,
        services: Arc<Live<Option<ModerationServices>>>,
        destinations: DestinationPolicy,
    ) -> Reloader {
        Reloader {
            source: Mutex::new(None),
            loaded: Mutex::new(loaded),
            tasks,
            rate_limits,
            claims,
            services,
            destinations,
            running: tokio::sync::Mutex::new(()),
        }
    }

    /// Where a reload reads the settings from (`easel serve` sets it; a node built from a
    /// `Config` alone cannot reload).
    pub fn set_source(&self, source: ConfigSource) {
        *self.source.lock().unwrap_or_else(|e| e.into_inner()) = Some(source);
    }

    /// Read the settings again and put what changed in place, for `actor` (as the audit log
    /// names who did it: `admin:<email>`, `signal:SIGHUP`).
    pub async fn reload(&self, actor: &str) -> Result<Reloaded, Refused> {
        let _one = self.running.lock().await;
        let source = self
            .source
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or(Refused::NoSource)?;
        let new = tokio::task::spawn_blocking(move || Config::load(source.file, &source.overrides))
            .await
            .map_err(|e| Refused::Invalid(e.to_string()))?
            .map_err(|e| Refused::Invalid(format!("{e:#}")))?;
        let old = self
            .loaded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let (changed, restart_only) = differences(&old, &new);
        if !restart_only.is_empty() {
            return Err(Refused::RestartOnly(restart_only));
        }
        // Built whole before anything is replaced. The workers are as the node started them.
        let mut building = new.clone();
        building.worker.workers = self.tasks.config.worker.workers;
        let pool = crate::generate::backends::build(&building)
            .map_err(|e| Refused::Invalid(format!("{e:#}")))?;
        let services = ModerationServices::new(
            &new.moderation,
            self.destinations,
            &crate::webhooks::user_agent(),
        )
        .map_err(|e| Refused::Invalid(format!("configuration: {e}")))?;

        let replaced = self.tasks.pool.replace(pool);
        self.tasks.pending.set(PendingLimits::of_plans(&new.plans));
        self.tasks.line.reload(ClaimRules::of(&new.plans));
        self.claims.reload(&new.plans);
        self.rate_limits.reload(&new.plans);
        self.tasks.plans.set(new.plans.clone());
        self.services.set(services);
        *self.loaded.lock().unwrap_or_else(|e| e.into_inner()) = new;
        let reloaded = Reloaded {
            changed,
            backends_added: replaced.added,
            backends_removed: replaced.removed,
        };
        tracing::info!(
            actor,
            changed = ?reloaded.changed,
            added = ?reloaded.backends_added,
            removed = ?reloaded.backends_removed,
            "configuration reloaded"
        );
        // The audit names what changed, not the values (a checker's key is among them).
        let recorded = self
            .tasks
            .store
            .record_audit(&NewAudit {
                actor: actor.to_string(),
                action: "config.reload".into(),
                account_id: None,
                before: json!({ "backends": reloaded.backends_removed }),
                after: json!({
                    "changed": reloaded.changed,
                    "backends": reloaded.backends_added,
                }),
            })
            .await;
        if let Err(e) = recorded {
            tracing::warn!(error = %e, "the reload is not in the audit log");
        }
        Ok(reloaded)
    }
}

/// The top-level settings whose values differ: those a reload applies, and the others.
fn differences(old: &Config, new: &Config) -> (Vec<String>, Vec<String>) {
    let as_map = |c: &Config| match serde_json::to_value(c) {
        Ok(Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    };
    let (old, new) = (as_map(old), as_map(new));
    let mut keys: Vec<&String> = old.keys().chain(new.keys()).collect();
    keys.sort();
    keys.dedup();
    let (mut changed, mut restart_only) = (Vec::new(), Vec::new());
    for key in keys {
        if old.get(key) == new.get(key) {
            continue;
        }
        if RELOADABLE.contains(&key.as_str()) {
            changed.push(key.clone());
        } else {
            restart_only.push(key.clone());
        }
    }
    (changed, restart_only)
}
