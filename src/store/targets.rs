//! Where a running task's progress deliveries go (see `webhooks::progress`): read by the worker
//! only for a task whose caller asked for `progress` events, so a plain task costs no read.

use async_trait::async_trait;

use super::StoreResult;

/// A running task's webhook destination and the secrets its deliveries carry.
#[derive(Clone)]
pub struct WebhookTarget {
    pub url: String,
    /// The caller's `webhook_secret`, sent as `x-webhook-secret`.
    pub webhook_secret: Option<String>,
    /// The account's signing secret (`whsec_...`), as final deliveries are signed with.
    pub signing_secret: String,
}

impl std::fmt::Debug for WebhookTarget {
    // Never print the secrets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookTarget")
            .field("url", &crate::config::redact(&self.url))
            .field("has_webhook_secret", &self.webhook_secret.is_some())
            .finish_non_exhaustive()
    }
}

#[async_trait]
pub trait WebhookTargets: Send + Sync {
    /// The webhook target of the task stored at `seq` while it runs (`starting` or
    /// `processing`); None when it has no `webhook_url` or is not running.
    async fn webhook_target(&self, seq: i64) -> StoreResult<Option<WebhookTarget>>;
}
