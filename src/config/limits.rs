//! What one request, one account and one input image may ask of a node: body sizes, input image
//! limits, pending tasks, `Prefer: wait`, idempotency and request rates.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::values::duration;

/// The longest `Prefer: wait` any node serves, in seconds; `max_wait` may only lower it.
pub const WAIT_MAX_SECS: u64 = 60;
/// Shortest and longest `idempotency_ttl`.
pub const IDEMPOTENCY_TTL_RANGE: RangeInclusive<Duration> =
    Duration::from_secs(60)..=Duration::from_secs(30 * 86_400);

/// The limit settings.
#[derive(Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct Limits {
    /// Largest accepted request body, in bytes.
    pub body_limit: usize,
    /// Largest request body of an operation that carries a mask (`inpaint`), in bytes.
    pub mask_body_limit: usize,
    /// Longest time fetching one input image may take (`image_url`, `image_urls`).
    #[serde(with = "duration")]
    pub input_timeout: Duration,
    /// Largest input image file, in bytes.
    pub input_max_bytes: u64,
    /// Most pixels of a decoded input image.
    pub input_max_pixels: u64,
    /// Most tasks one account may have queued or running at once; more is refused with 429.
    pub max_pending_per_account: u32,
    /// How long a submit's first answer is replayed to requests with the same `Idempotency-Key`
    /// (1 minute to 30 days).
    #[serde(with = "duration")]
    pub idempotency_ttl: Duration,
    /// The longest a request with `Prefer: wait` is held (1 to 60 s, whole seconds): a longer
    /// wait asked for is served this long, and `Preference-Applied` says so.
    #[serde(with = "duration")]
    pub max_wait: Duration,
    /// Request rate limits by account plan (`[rate_limits.<plan>]` tables), applied per API key
    /// and per account, on each node separately. A plan not listed is not limited; empty by
    /// default.
    pub rate_limits: BTreeMap<String, PlanRate>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            body_limit: 64 * 1024,
            mask_body_limit: 8 * 1024 * 1024,
            input_timeout: Duration::from_secs(30),
            input_max_bytes: 20 * 1024 * 1024,
            input_max_pixels: 25_000_000,
            max_pending_per_account: 1000,
            idempotency_ttl: Duration::from_secs(86_400),
            max_wait: Duration::from_secs(WAIT_MAX_SECS),
            rate_limits: BTreeMap::new(),
        }
    }
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

impl Limits {
    pub fn validate(&self) -> anyhow::Result<()> {
        use anyhow::bail;
        if self.body_limit < 1024 {
            bail!("configuration: body_limit must be at least 1024 bytes");
        }
        if self.input_timeout.is_zero() || self.input_max_bytes == 0 || self.input_max_pixels == 0 {
            bail!("configuration: input_timeout, input_max_bytes and input_max_pixels must be > 0");
        }
        if self.mask_body_limit < self.body_limit {
            bail!("configuration: mask_body_limit must be at least body_limit");
        }
        if !IDEMPOTENCY_TTL_RANGE.contains(&self.idempotency_ttl) {
            bail!("configuration: idempotency_ttl must be from 1 minute to 30 days");
        }
        let wait_max = Duration::from_secs(WAIT_MAX_SECS);
        if !(Duration::from_secs(1)..=wait_max).contains(&self.max_wait)
            || self.max_wait.subsec_nanos() != 0
        {
            bail!("configuration: max_wait must be whole seconds from 1 s to 60 s");
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
        Ok(())
    }
}
