//! A running task's webhook target, for its progress deliveries.

use async_trait::async_trait;

use super::SqliteStore;
use crate::store::{StoreResult, WebhookTarget, WebhookTargets, RUNNING};

#[async_trait]
impl WebhookTargets for SqliteStore {
    async fn webhook_target(&self, seq: i64) -> StoreResult<Option<WebhookTarget>> {
        let row: Option<(String, Option<String>, String)> = sqlx::query_as(&format!(
            "SELECT t.webhook_url, t.webhook_secret, a.signing_secret
             FROM tasks t JOIN accounts a ON a.id = t.account_id
             WHERE t.seq = ? AND t.webhook_url IS NOT NULL AND t.status IN {RUNNING}"
        ))
        .bind(seq)
        .fetch_optional(&self.reader)
        .await?;
        Ok(
            row.map(|(url, webhook_secret, signing_secret)| WebhookTarget {
                url,
                webhook_secret,
                signing_secret,
            }),
        )
    }
}
