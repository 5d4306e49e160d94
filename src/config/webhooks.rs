//! Webhook deliveries: how long one attempt may take, when the retries come, how many are in
//! flight, and the development switches of the destination policy.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::values::{duration, duration_list};

/// The `webhook_*` settings; the fields drop the prefix (`webhook_timeout` is `timeout`).
#[derive(Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct Webhooks {
    /// The whole-exchange timeout of one webhook attempt.
    #[serde(rename = "webhook_timeout", with = "duration")]
    pub timeout: Duration,
    /// Delays of the retries, each counted from the failure of the initial attempt.
    #[serde(rename = "webhook_retry_schedule", with = "duration_list")]
    pub retry_schedule: Vec<Duration>,
    /// Allow `http://` webhook URLs (development and tests only).
    #[serde(rename = "webhook_allow_http")]
    pub allow_http: bool,
    /// Allow webhook destinations on private, loopback and other non-public addresses
    /// (development and tests only).
    #[serde(rename = "webhook_allow_private")]
    pub allow_private: bool,
    /// Most webhook deliveries in flight at once.
    #[serde(rename = "webhook_concurrency")]
    pub concurrency: usize,
    /// The whole-exchange timeout of one progress delivery (its only attempt).
    #[serde(rename = "webhook_progress_timeout", with = "duration")]
    pub progress_timeout: Duration,
    /// Most progress deliveries in flight at once on this node; a progress state that finds
    /// them all busy is dropped (a later one may go).
    #[serde(rename = "webhook_progress_concurrency")]
    pub progress_concurrency: usize,
}

impl Default for Webhooks {
    fn default() -> Self {
        Webhooks {
            timeout: Duration::from_secs(10),
            retry_schedule: vec![
                Duration::from_secs(10),
                Duration::from_secs(30),
                Duration::from_secs(90),
            ],
            allow_http: false,
            allow_private: false,
            concurrency: 64,
            progress_timeout: Duration::from_secs(3),
            progress_concurrency: 32,
        }
    }
}

impl Webhooks {
    pub fn validate(&self) -> anyhow::Result<()> {
        use anyhow::bail;
        if self.timeout.is_zero() {
            bail!("configuration: webhook_timeout must be non-zero");
        }
        if self.concurrency == 0 {
            bail!("configuration: webhook_concurrency must be at least 1");
        }
        if self.progress_timeout.is_zero() {
            bail!("configuration: webhook_progress_timeout must be non-zero");
        }
        if self.progress_concurrency == 0 {
            bail!("configuration: webhook_progress_concurrency must be at least 1");
        }
        if self.retry_schedule.windows(2).any(|w| w[0] > w[1]) {
            bail!("configuration: webhook_retry_schedule must not decrease");
        }
        Ok(())
    }
}
