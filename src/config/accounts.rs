//! Accounts and what they pay: who may sign up and how often, the credits they start with, what
//! each operation costs, and how long a dashboard session lasts.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;
use std::time::Duration;

use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

use super::values::{choice, duration};
use crate::domain::{Named, OpKind, Shape};

choice! {
    /// Who may make an account in the dashboard: `open` (anyone, the default) or `closed`
    /// (accounts only from the command line, `easel accounts create`).
    pub enum Signup ("signup") {
        Open = "open",
        Closed = "closed",
    }
}

/// Credits a new account gets unless `signup_credits` says otherwise.
pub const SIGNUP_CREDITS: i64 = 100;
/// Sign-ups per client address per hour unless `signups_per_hour` says otherwise.
pub const SIGNUPS_PER_HOUR: u32 = 5;
/// `credits_low_threshold` unless set: a tenth of what a new account starts with.
pub const CREDITS_LOW_THRESHOLD: i64 = SIGNUP_CREDITS / 10;
/// Most credits one operation may be configured to cost.
pub const COST_MAX: i64 = 1_000_000;
/// Shortest and longest `session_ttl`.
pub const SESSION_TTL_RANGE: RangeInclusive<Duration> =
    Duration::from_secs(60)..=Duration::from_secs(366 * 86_400);

/// The account settings.
#[derive(Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct Accounts {
    pub signup: Signup,
    /// Credits an account made by signing up (or by `easel accounts create` without `--admin`)
    /// starts with: [`SIGNUP_CREDITS`] unless set, or `unlimited` (`None`), which is never
    /// refused for credits. Finite by default so that open sign-up does not hand out free
    /// generation without end.
    #[serde(with = "grant")]
    pub signup_credits: Option<i64>,
    /// Sign-ups the dashboard takes from one client address in an hour; more are refused (429)
    /// and store nothing.
    pub signups_per_hour: u32,
    /// Credits each operation costs, by its name (`imagine`, `upscale-1x`, ...); operations not
    /// named keep their default (see [`default_cost`]).
    pub costs: BTreeMap<String, i64>,
    /// How long a dashboard session lasts after signing in.
    #[serde(with = "duration")]
    pub session_ttl: Duration,
    /// The balance under which an account webhook that takes `credits.low` hears of it, unless
    /// the webhook names its own.
    pub credits_low_threshold: i64,
}

impl Default for Accounts {
    fn default() -> Self {
        Accounts {
            signup: Signup::Open,
            signup_credits: Some(SIGNUP_CREDITS),
            signups_per_hour: SIGNUPS_PER_HOUR,
            costs: OpKind::ALL
                .iter()
                .map(|k| (k.as_str().to_string(), default_cost(*k)))
                .collect(),
            session_ttl: Duration::from_secs(14 * 86_400),
            credits_low_threshold: CREDITS_LOW_THRESHOLD,
        }
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

impl Accounts {
    /// What one submit of `kind` costs, in credits.
    pub fn cost(&self, kind: OpKind) -> i64 {
        self.costs
            .get(kind.as_str())
            .copied()
            .unwrap_or_else(|| default_cost(kind))
    }

    /// Whether anyone may sign up in the dashboard.
    pub fn signup_open(&self) -> bool {
        self.signup == Signup::Open
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        use anyhow::bail;
        if self
            .signup_credits
            .is_some_and(|c| !(0..=i64::MAX / 2).contains(&c))
        {
            bail!("configuration: signup_credits must not be negative");
        }
        if self.signups_per_hour == 0 {
            bail!(
                "configuration: signups_per_hour must be at least 1 (signup = \"closed\" turns \
                 sign-up off)"
            );
        }
        for (name, cost) in &self.costs {
            if name.parse::<OpKind>().is_err() {
                bail!(
                    "configuration: costs: `{name}` is not an operation; the operations are {}",
                    OpKind::listed()
                );
            }
            if !(0..=COST_MAX).contains(cost) {
                bail!("configuration: costs: {name} must be from 0 to {COST_MAX} credits");
            }
        }
        let most = crate::domain::account_webhook::THRESHOLD_MAX;
        if !(0..=most).contains(&self.credits_low_threshold) {
            bail!("configuration: credits_low_threshold must be from 0 to {most}");
        }
        if !SESSION_TTL_RANGE.contains(&self.session_ttl) {
            bail!("configuration: session_ttl must be from 1 minute to 366 days");
        }
        Ok(())
    }
}

/// `signup_credits`: a whole number of credits, or `unlimited` (`None`). A number may come as
/// text too, as an environment variable's value can.
mod grant {
    use super::*;

    pub fn serialize<S: Serializer>(credits: &Option<i64>, s: S) -> Result<S::Ok, S::Error> {
        match credits {
            Some(n) => s.serialize_i64(*n),
            None => s.serialize_str("unlimited"),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(i64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Number(n) => Ok(Some(n)),
            Raw::Text(t) if t.trim() == "unlimited" => Ok(None),
            Raw::Text(t) => t.trim().parse().map(Some).map_err(|_| {
                de::Error::custom(format!(
                    "signup_credits must be a whole number of credits or `unlimited`, not `{t}`"
                ))
            }),
        }
    }
}
