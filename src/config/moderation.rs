//! The operator's own moderation services (`[moderation]`): a prompt checker that speaks
//! OpenAI's `/v1/moderations`, asked at submit, and an image checker, asked with each result
//! image before its task finishes. Both optional; both reached under the webhooks' destination
//! policy.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::values::{check_http_url, choice, duration};

choice! {
    /// What a submit or a task does when a checker cannot be asked (down, slow, an answer that
    /// is not one): `closed` refuses (503 at submit; the task fails and is refunded), `open`
    /// lets it through and counts it.
    pub enum OnError ("moderation.on_error") {
        Closed = "closed",
        Open = "open",
    }
}

/// Shortest and longest time one check may take.
pub const CHECK_TIMEOUT_RANGE: (Duration, Duration) =
    (Duration::from_millis(100), Duration::from_secs(60));

/// The `[moderation]` table.
#[derive(Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Checkers {
    /// An OpenAI-compatible moderations endpoint (`https://.../v1/moderations`) asked with
    /// each submitted prompt; unset: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_url: Option<String>,
    /// An endpoint that takes each result image (POST, its bytes) and answers `{"flagged":
    /// bool}`; unset: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_url: Option<String>,
    /// Sent as `Authorization: Bearer` to both; never logged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    /// The model named in each prompt check (OpenAI's `model` field); unset: the service's own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Whole time of one check.
    #[serde(with = "duration")]
    pub timeout: Duration,
    pub on_error: OnError,
}

impl Default for Checkers {
    fn default() -> Self {
        Checkers {
            prompt_url: None,
            image_url: None,
            api_key: None,
            model: None,
            timeout: Duration::from_secs(5),
            on_error: OnError::Closed,
        }
    }
}

impl Checkers {
    pub fn validate(&self) -> anyhow::Result<()> {
        use anyhow::bail;
        let (least, most) = CHECK_TIMEOUT_RANGE;
        if self.timeout < least || self.timeout > most {
            bail!(
                "configuration: moderation.timeout must be from {} to {}",
                humantime::format_duration(least),
                humantime::format_duration(most)
            );
        }
        check_http_url("moderation.prompt_url", self.prompt_url.as_deref())?;
        check_http_url("moderation.image_url", self.image_url.as_deref())?;
        if self.api_key.as_ref().is_some_and(|k| k.trim().is_empty()) {
            bail!("configuration: moderation.api_key must not be empty when set");
        }
        Ok(())
    }
}
