//! What one request, one account and one input image may ask of a node: body sizes, input image
//! limits and the memory their decoding may take, `Prefer: wait` and idempotency. What differs
//! by plan (pending and running tasks, request rates) is in [`super::plans`].

use std::ops::RangeInclusive;
use std::time::Duration;

use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

use super::values::{bytes_or_text, duration};

/// The longest `Prefer: wait` any node serves, in seconds; `max_wait` may only lower it.
pub const WAIT_MAX_SECS: u64 = 60;
/// The longest `openai_wait`: past it a client's own timeout (the `openai` SDKs': 10 minutes)
/// has long given up.
pub const OPENAI_WAIT_MAX: Duration = Duration::from_secs(3600);
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
    /// Most bytes of decoded input images this node holds at once, over all its tasks.
    pub decode_memory_budget: DecodeMemoryBudget,
    /// Most bytes one account may upload per UTC day (`POST /api/v1/upload` and `data:` URLs
    /// together); past it uploads are refused with 429 until the next day.
    #[serde(deserialize_with = "upload_bytes")]
    pub max_upload_bytes_per_day: u64,
    /// Most uploads (and submits with `data:` URLs) of one account being checked at once on
    /// this node; more are refused with 429 before anything is decoded.
    pub max_uploads_in_progress_per_account: u32,
    /// Most event streams (`GET /api/v1/events`, `/api/v1/tasks/{id}/events`) one account may
    /// hold open on this node; more are refused with 429.
    pub max_streams_per_account: u32,
    /// Most event streams open on this node, all accounts together; more are refused with 503.
    pub max_streams: u32,
    /// How long a submit's first answer is replayed to requests with the same `Idempotency-Key`
    /// (1 minute to 30 days).
    #[serde(with = "duration")]
    pub idempotency_ttl: Duration,
    /// The longest a request with `Prefer: wait` is held (1 to 60 s, whole seconds): a longer
    /// wait asked for is served this long, and `Preference-Applied` says so.
    #[serde(with = "duration")]
    pub max_wait: Duration,
    /// The longest a call of the OpenAI Images API (`/v1/images/...`) waits for its tasks
    /// (1 s to 1 hour, whole seconds); then it answers 504 and the tasks go on.
    #[serde(with = "duration")]
    pub openai_wait: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            body_limit: 64 * 1024,
            mask_body_limit: 8 * 1024 * 1024,
            input_timeout: Duration::from_secs(30),
            input_max_bytes: 20 * 1024 * 1024,
            input_max_pixels: 25_000_000,
            decode_memory_budget: DecodeMemoryBudget::Auto,
            max_upload_bytes_per_day: 1 << 30,
            max_uploads_in_progress_per_account: 4,
            max_streams_per_account: 100,
            max_streams: 10_000,
            idempotency_ttl: Duration::from_secs(86_400),
            max_wait: Duration::from_secs(WAIT_MAX_SECS),
            openai_wait: Duration::from_secs(300),
        }
    }
}

/// One plan's request rate limits (`rate` of `[plans.NAME]`): per API key, a sustained `rate` (requests per second, may be
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
        if self.max_streams_per_account == 0 || self.max_streams == 0 {
            bail!("configuration: max_streams_per_account and max_streams must be at least 1");
        }
        if self.body_limit < 1024 {
            bail!("configuration: body_limit must be at least 1024 bytes");
        }
        if self.input_timeout.is_zero() || self.input_max_bytes == 0 || self.input_max_pixels == 0 {
            bail!("configuration: input_timeout, input_max_bytes and input_max_pixels must be > 0");
        }
        if let DecodeMemoryBudget::Bytes(bytes) = self.decode_memory_budget {
            if !DECODE_MEMORY_BUDGET_RANGE.contains(&bytes) {
                bail!("configuration: decode_memory_budget must be from 1 MiB to 4 TiB");
            }
        }
        if self.max_upload_bytes_per_day == 0 || self.max_uploads_in_progress_per_account == 0 {
            bail!(
                "configuration: max_upload_bytes_per_day and max_uploads_in_progress_per_account \
                 must be > 0"
            );
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
        if !(Duration::from_secs(1)..=OPENAI_WAIT_MAX).contains(&self.openai_wait)
            || self.openai_wait.subsec_nanos() != 0
        {
            bail!("configuration: openai_wait must be whole seconds from 1 s to 1 hour");
        }
        Ok(())
    }
}

/// `max_upload_bytes_per_day`: plain digits (bytes) or a size as text (`512MiB`).
fn upload_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    match bytes_or_text(d)? {
        Ok(bytes) => Ok(bytes),
        Err(text) => super::values::parse_size(&text)
            .map_err(|e| de::Error::custom(format!("max_upload_bytes_per_day: {e}"))),
    }
}

/// The smallest and largest `decode_memory_budget` that may be set (the budget counts in KiB, and
/// a count of KiB must fit in 32 bits).
pub const DECODE_MEMORY_BUDGET_RANGE: RangeInclusive<u64> = (1 << 20)..=(4 << 40);

/// `decode_memory_budget`: `auto`, or a size (`2GiB`, or plain digits for bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeMemoryBudget {
    /// A quarter of the memory this process may use (the machine's, or its cgroup's limit when
    /// that is lower), kept from 1 GiB to 8 GiB: at least what one blend of five images at the
    /// default pixel limit needs, and no more than a node can put to use.
    Auto,
    Bytes(u64),
}

impl DecodeMemoryBudget {
    /// `auto`'s share of the memory, and its floor and ceiling.
    const AUTO_SHARE: u64 = 4;
    const AUTO_FLOOR: u64 = 1 << 30;
    const AUTO_CEILING: u64 = 8 << 30;

    /// The budget in bytes; `auto` reads the memory there is.
    pub fn bytes(self) -> u64 {
        match self {
            DecodeMemoryBudget::Bytes(bytes) => bytes,
            DecodeMemoryBudget::Auto => Self::auto_of(memory_available()),
        }
    }

    /// `auto` on a machine (or in a cgroup) of `memory` bytes; the floor when it is unknown.
    fn auto_of(memory: Option<u64>) -> u64 {
        memory.map_or(Self::AUTO_FLOOR, |m| {
            (m / Self::AUTO_SHARE).clamp(Self::AUTO_FLOOR, Self::AUTO_CEILING)
        })
    }
}

/// The memory this process may use: the machine's (`MemTotal`), or its cgroup's limit when that
/// is lower. `None` where neither can be read (not Linux).
fn memory_available() -> Option<u64> {
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|info| {
            let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib * 1024)
        });
    // cgroup v2, then v1. v2's "max" (no limit) does not parse; v1 writes no limit as a huge
    // number, which the machine's figure then undercuts.
    let cgroup = [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .iter()
    .find_map(|path| {
        std::fs::read_to_string(path)
            .ok()?
            .trim()
            .parse::<u64>()
            .ok()
    });
    match (total, cgroup) {
        (Some(t), Some(c)) => Some(t.min(c)),
        (t, c) => t.or(c),
    }
}

impl std::str::FromStr for DecodeMemoryBudget {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        if text.trim().eq_ignore_ascii_case("auto") {
            return Ok(DecodeMemoryBudget::Auto);
        }
        super::values::parse_size(text)
            .map(DecodeMemoryBudget::Bytes)
            .map_err(|e| format!("decode_memory_budget: {e}, nor `auto`"))
    }
}

/// Written back as it is read: `auto`, or bytes as plain digits.
impl std::fmt::Display for DecodeMemoryBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeMemoryBudget::Auto => f.write_str("auto"),
            DecodeMemoryBudget::Bytes(bytes) => write!(f, "{bytes}"),
        }
    }
}

impl Serialize for DecodeMemoryBudget {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

/// `auto` or a size as text, or plain digits (bytes) as a number.
impl<'de> Deserialize<'de> for DecodeMemoryBudget {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match bytes_or_text(d)? {
            Ok(bytes) => Ok(DecodeMemoryBudget::Bytes(bytes)),
            Err(text) => text.parse().map_err(de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_memory_budget_takes_auto_and_sizes() {
        let parse = |t: &str| t.parse::<DecodeMemoryBudget>();
        assert_eq!(parse("auto"), Ok(DecodeMemoryBudget::Auto));
        assert_eq!(parse(" AUTO "), Ok(DecodeMemoryBudget::Auto));
        assert_eq!(parse("2GiB"), Ok(DecodeMemoryBudget::Bytes(2 << 30)));
        assert_eq!(parse("512 MiB"), Ok(DecodeMemoryBudget::Bytes(512 << 20)));
        assert_eq!(parse("1048576"), Ok(DecodeMemoryBudget::Bytes(1 << 20)));
        let err = parse("lots").unwrap_err();
        assert!(
            err.starts_with("decode_memory_budget: `lots` is not a size"),
            "{err}"
        );
        for shown in [DecodeMemoryBudget::Auto, DecodeMemoryBudget::Bytes(3 << 29)] {
            assert_eq!(parse(&shown.to_string()), Ok(shown));
        }
    }

    #[test]
    fn auto_is_a_quarter_of_memory_within_its_floor_and_ceiling() {
        let gib = 1u64 << 30;
        assert_eq!(DecodeMemoryBudget::auto_of(Some(16 * gib)), 4 * gib);
        assert_eq!(DecodeMemoryBudget::auto_of(Some(2 * gib)), gib);
        assert_eq!(DecodeMemoryBudget::auto_of(Some(256 * gib)), 8 * gib);
        assert_eq!(DecodeMemoryBudget::auto_of(None), gib);
        let here = DecodeMemoryBudget::Auto.bytes();
        assert!((gib..=8 * gib).contains(&here), "{here}");
    }

    #[test]
    fn a_budget_outside_its_range_is_refused() {
        let mut limits = Limits::default();
        for (bytes, ok) in [(1 << 20, true), ((1 << 20) - 1, false), (5 << 40, false)] {
            limits.decode_memory_budget = DecodeMemoryBudget::Bytes(bytes);
            assert_eq!(limits.validate().is_ok(), ok, "{bytes}");
        }
    }
}
