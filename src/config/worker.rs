//! How a node's workers take and run tasks: how many at once, the image size, leases and
//! heartbeats, retries, the generation budget and the content policy.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::values::{duration, string_list};

/// The worker settings.
#[derive(Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct Worker {
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
    /// How long one task may keep trying its generation over the backends (transient failures
    /// are tried again with backoff, on the same backend or another) before it fails.
    #[serde(with = "duration")]
    pub generation_budget: Duration,
    /// Least time one procedural generation takes; use it to model a real image model's latency
    /// in demos and load tests. Zero by default.
    #[serde(with = "duration")]
    pub procedural_min_duration: Duration,
    /// Words and phrases that make a prompt fail with `content policy violation`. Matched as whole
    /// words, case-insensitively. In the environment: a comma-separated list.
    #[serde(deserialize_with = "string_list::deserialize")]
    pub blocked_terms: Vec<String>,
    /// The long side of a running task's preview image, in pixels; 0 stores no previews.
    pub preview_max_px: u32,
    /// One claim in this many, on each node, takes the oldest turn of relax first when relax
    /// has work, so that relax is served under a steady stream of turbo and fast; 0: relax
    /// only when nothing else waits.
    pub relax_every: u32,
}

impl Default for Worker {
    fn default() -> Self {
        Worker {
            workers: 2,
            image_size: 1024,
            lease: Duration::from_secs(60),
            heartbeat: Duration::from_secs(5),
            max_attempts: 3,
            poll_interval: Duration::from_secs(1),
            generation_budget: Duration::from_secs(900),
            procedural_min_duration: Duration::ZERO,
            blocked_terms: ["nsfw", "nude", "naked", "porn", "gore"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            preview_max_px: 256,
            relax_every: 10,
        }
    }
}

impl Worker {
    pub fn validate(&self) -> anyhow::Result<()> {
        use anyhow::bail;
        if self.workers > 256 {
            bail!("configuration: workers must be at most 256");
        }
        if !(64..=4096).contains(&self.image_size) {
            bail!("configuration: image_size must be between 64 and 4096");
        }
        if self.heartbeat.is_zero() || self.heartbeat * 2 > self.lease {
            bail!("configuration: heartbeat must be non-zero and at most half of lease");
        }
        if self.preview_max_px > 1024 {
            bail!("configuration: preview_max_px must be at most 1024 (0 stores no previews)");
        }
        if self.max_attempts == 0 {
            bail!("configuration: max_attempts must be at least 1");
        }
        if self.poll_interval.is_zero() {
            bail!("configuration: poll_interval must be non-zero");
        }
        Ok(())
    }
}
