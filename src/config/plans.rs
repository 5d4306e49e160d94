//! Plans: every per-plan setting in one table each (`[plans.NAME]`), and `default_plan`, the
//! plan of an account whose own plan is not configured (docs/accounts.md, "Plans").
//!
//! What were `[rate_limits.<plan>]`, `[max_running_by_plan]`, the models' `plans`,
//! `max_pending_per_account` and `max_running_per_account` live here now; an old key is refused
//! at start by [`refuse_moved`] with where it went.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::limits::PlanRate;
use super::values::choice;

/// The plan accounts are on unless `default_plan` or an operator says otherwise (the accounts
/// table's default).
pub const SELF_HOSTED: &str = "self-hosted";
/// Most requests one batch may hold unless a plan's `batch_max` says otherwise.
pub const BATCH_MAX: u32 = 20;
/// The highest `batch_max` a plan may set.
pub const BATCH_MAX_LIMIT: u32 = 1000;

choice! {
    /// How often a plan's `credits_per_period` is granted: at the start of each UTC day, week
    /// (Monday) or month.
    pub enum Period ("period") {
        Day = "day",
        Week = "week",
        Month = "month",
    }
}

impl Period {
    /// The period that the time `at` (Unix ms) falls in, as the grants' table names it:
    /// `2026-11-29` (day), `2026-W48` (ISO week, from Monday), `2026-11` (month), all UTC.
    pub fn key(self, at: i64) -> String {
        use chrono::Datelike;
        let day = chrono::DateTime::from_timestamp_millis(at)
            .unwrap_or_default()
            .date_naive();
        match self {
            Period::Day => day.format("%Y-%m-%d").to_string(),
            Period::Week => {
                let week = day.iso_week();
                format!("{}-W{:02}", week.year(), week.week())
            }
            Period::Month => day.format("%Y-%m").to_string(),
        }
    }
}

/// One `[plans.NAME]` table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Plan {
    /// Credits granted at each period's start (a ledger row), none carried over; unset: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credits_per_period: Option<i64>,
    pub period: Period,
    /// Most tasks one account may have started and not ended, over every node; 0: no limit.
    pub max_running: u32,
    /// Most tasks one account may have queued or running; more is refused with 429.
    pub max_pending: u32,
    /// Request rate limits per API key and per account; unset: not limited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<PlanRate>,
    /// The models its accounts may use (and see listed); unset: every model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub models: Option<Vec<String>>,
    /// Most requests one batch (or `--repeat`, or a permutation) may make.
    pub batch_max: u32,
    /// The moderation term lists applied to its accounts' prompts, by name; unset: every list.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub moderation: Option<Vec<String>>,
}

impl Default for Plan {
    fn default() -> Self {
        Plan {
            credits_per_period: None,
            period: Period::Month,
            max_running: 0,
            max_pending: 1000,
            rate: None,
            models: None,
            batch_max: BATCH_MAX,
            moderation: None,
        }
    }
}

/// The plan settings: the plans and the default one.
#[derive(Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct Plans {
    /// The plans by name (`[plans.NAME]` tables). None configured: one plan, `default_plan`,
    /// with every setting at its default.
    pub plans: BTreeMap<String, Plan>,
    /// The plan of accounts whose plan is not one of `plans`.
    pub default_plan: String,
}

impl Default for Plans {
    fn default() -> Self {
        Plans {
            plans: BTreeMap::new(),
            default_plan: SELF_HOSTED.into(),
        }
    }
}

/// The plan of an empty `[plans]`: every setting at its default.
static IMPLICIT: std::sync::LazyLock<Plan> = std::sync::LazyLock::new(Plan::default);

impl Plans {
    /// The name an account on `plan` is treated as being on: `plan` when it is configured, else
    /// `default_plan`.
    pub fn resolve<'a>(&'a self, plan: &'a str) -> &'a str {
        if self.plans.contains_key(plan) {
            plan
        } else {
            &self.default_plan
        }
    }

    /// The settings of an account on `plan` (see [`Plans::resolve`]).
    pub fn of(&self, plan: &str) -> &Plan {
        self.plans
            .get(plan)
            .or_else(|| self.plans.get(&self.default_plan))
            .unwrap_or(&IMPLICIT)
    }

    /// The default plan's settings, made a table of its own when there was none (for tests and
    /// the command line's overrides).
    pub fn default_mut(&mut self) -> &mut Plan {
        self.plans.entry(self.default_plan.clone()).or_default()
    }

    /// Every plan an operator may put an account on, by name: the configured ones, or the
    /// default plan alone.
    pub fn names(&self) -> Vec<&str> {
        if self.plans.is_empty() {
            vec![self.default_plan.as_str()]
        } else {
            self.plans.keys().map(String::as_str).collect()
        }
    }

    /// Whether `plan` may be given to an account.
    pub fn knows(&self, plan: &str) -> bool {
        self.names().contains(&plan)
    }

    /// Each plan with its settings, the implicit default plan when none is configured.
    pub fn each(&self) -> Vec<(&str, &Plan)> {
        if self.plans.is_empty() {
            vec![(self.default_plan.as_str(), &*IMPLICIT)]
        } else {
            self.plans.iter().map(|(n, p)| (n.as_str(), p)).collect()
        }
    }

    /// The configured plans' names as a message lists them.
    pub fn listed(&self) -> String {
        let quoted: Vec<String> = self.names().iter().map(|n| format!("`{n}`")).collect();
        quoted.join(", ")
    }

    /// The plans that may use the model `name`; None when every plan may (so that submits of
    /// that model need not look the caller's plan up).
    pub fn allowed_for(&self, model: &str) -> Option<Vec<String>> {
        let each = self.each();
        let allowed: Vec<String> = each
            .iter()
            .filter(|(_, p)| {
                p.models
                    .as_ref()
                    .is_none_or(|m| m.iter().any(|m| m == model))
            })
            .map(|(n, _)| n.to_string())
            .collect();
        (allowed.len() < each.len()).then_some(allowed)
    }

    /// Check the plans; `models` are the configured models' names.
    pub fn validate(&self, models: &[&str]) -> anyhow::Result<()> {
        use anyhow::bail;
        if !valid_name(&self.default_plan) {
            bail!("configuration: default_plan: `{}` is not a plan name (letters, digits, `-`, `_`, `.`)", self.default_plan);
        }
        if !self.plans.is_empty() && !self.plans.contains_key(&self.default_plan) {
            bail!(
                "configuration: default_plan: `{}` is not a plan; the plans are {}",
                self.default_plan,
                self.listed()
            );
        }
        for (name, plan) in &self.plans {
            let at = |key: &str| format!("configuration: plans.{name}.{key}");
            if !valid_name(name) {
                bail!("configuration: plans.{name}: a plan's name is letters, digits, `-`, `_` and `.`, at most 64");
            }
            if plan
                .credits_per_period
                .is_some_and(|c| !(0..=i64::MAX / 4).contains(&c))
            {
                bail!("{}: must not be negative", at("credits_per_period"));
            }
            if plan.max_pending == 0 {
                bail!("{}: must be at least 1", at("max_pending"));
            }
            if !(1..=BATCH_MAX_LIMIT).contains(&plan.batch_max) {
                bail!("{}: must be from 1 to {BATCH_MAX_LIMIT}", at("batch_max"));
            }
            if let Some(limit) = &plan.rate {
                let (account_rate, account_burst) = limit.account();
                for (key, rate) in [("rate", limit.rate), ("account_rate", account_rate)] {
                    if !(rate.is_finite() && (0.001..=1_000_000.0).contains(&rate)) {
                        bail!(
                            "{}: must be between 0.001 and 1000000 requests per second",
                            at(&format!("rate.{key}"))
                        );
                    }
                }
                if limit.burst == 0 || account_burst == 0 {
                    bail!("{}: burst and account_burst must be at least 1", at("rate"));
                }
            }
            if let Some(named) = &plan.models {
                if let Some(unknown) = named.iter().find(|m| !models.contains(&m.as_str())) {
                    bail!(
                        "{}: no model is named `{unknown}` (the models are {})",
                        at("models"),
                        models.join(", ")
                    );
                }
            }
            if let Some(lists) = &plan.moderation {
                if lists.iter().any(|l| !valid_name(l)) {
                    bail!(
                        "{}: a list's name is letters, digits, `-`, `_` and `.`",
                        at("moderation")
                    );
                }
            }
        }
        Ok(())
    }
}

/// A plan's (or a list's) name: 1 to 64 of letters, digits, `-`, `_` and `.`.
pub fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Where each old key went, for the message that refuses it.
const MOVED: &[(&str, &str)] = &[
    ("rate_limits", "`rate` of a `[plans.NAME]` table"),
    (
        "max_running_by_plan",
        "`max_running` of a `[plans.NAME]` table",
    ),
    (
        "max_running_per_account",
        "`max_running` of a `[plans.NAME]` table (the default plan's for every account)",
    ),
    (
        "max_pending_per_account",
        "`max_pending` of a `[plans.NAME]` table (the default plan's for every account)",
    ),
];

/// Refuse a key of the file (`file_keys`, its top level and each `[[models]]` table's keys) or
/// an `EASEL_*` variable (`env`) that moved into the plans, saying where it went.
pub fn refuse_moved(
    file_keys: &[String],
    model_keys: &[Vec<String>],
    env: &[String],
) -> anyhow::Result<()> {
    for (key, went) in MOVED {
        if file_keys.iter().any(|k| k == key) {
            anyhow::bail!(
                "configuration: `{key}` moved: it is now the {went} (docs/accounts.md, \"Plans\")"
            );
        }
        let var = format!("EASEL_{}", key.to_ascii_uppercase());
        if env.contains(&var) {
            anyhow::bail!("configuration: `{var}` moved: `{key}` is now the {went}; set it in the configuration file (docs/accounts.md, \"Plans\")");
        }
    }
    if model_keys.iter().flatten().any(|k| k == "plans") {
        anyhow::bail!(
            "configuration: a model's `plans` moved: list the models a plan may use in its \
             `[plans.NAME]` table's `models` (docs/accounts.md, \"Plans\")"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_period_is_named_by_its_utc_day_iso_week_or_month() {
        // 2026-11-29T23:59:59.999Z, a Sunday: the last moment of ISO week 48.
        let sunday = 1_795_996_799_999;
        assert_eq!(Period::Day.key(sunday), "2026-11-29");
        assert_eq!(Period::Week.key(sunday), "2026-W48");
        assert_eq!(Period::Month.key(sunday), "2026-11");
        let monday = sunday + 1;
        assert_eq!(Period::Day.key(monday), "2026-11-30");
        assert_eq!(Period::Week.key(monday), "2026-W49");
        // 2027-01-01 is in ISO week 53 of 2026.
        assert_eq!(Period::Week.key(1_798_761_600_000), "2026-W53");
        assert_eq!(Period::Month.key(1_798_761_600_000), "2027-01");
    }
}
