//! The webhook outbox on SQLite ([`Outbox`]): claims take due deliveries by rowid in one
//! statement on the writer's thread, and attempt records go to the writer in groups.

use std::collections::HashMap;

use async_trait::async_trait;
use rusqlite::{params, OptionalExtension};
use uuid::Uuid;

use super::records::RecordAttempt;
use super::task_queue::by_id;
use super::SqliteStore;
use crate::store::ids::TaskKey;
use crate::store::rows::decode;
use crate::store::sql::{queue_outbox, Durability};
use crate::store::{
    now_ms, AttemptRecord, DeliveryKind, DueDelivery, Outbox, Redelivery, StoreResult,
};

#[async_trait]
impl Outbox for SqliteStore {
    async fn claim_due_deliveries(
        &self,
        limit: i64,
        lease_ms: i64,
    ) -> StoreResult<Vec<DueDelivery>> {
        self.writer
            .call(Durability::Committed, move |conn| {
                let now = now_ms();
                // One statement, however many rows it takes. Rows are picked and updated by
                // rowid: by `id` each would cost a search of the key's index first.
                let mut claimed: Vec<(DueDelivery, String, i64)> = conn
                    .prepare_cached(
                        "UPDATE webhook_deliveries SET lease_until = ?2
                         WHERE rowid IN (SELECT rowid FROM webhook_deliveries
                                         WHERE status = 'pending' AND next_attempt_at <= ?1
                                           AND (lease_until IS NULL OR lease_until <= ?1)
                                         ORDER BY next_attempt_at LIMIT ?3)
                         RETURNING id, task_id, url, attempts, first_failed_at,
                             webhook_secret, lease_until, account_id, task_seq",
                    )?
                    .query_map(params![now, now + lease_ms, limit], |r| {
                        let delivery = DueDelivery {
                            id: r.get(0)?,
                            task_id: r.get(1)?,
                            url: r.get(2)?,
                            attempts: r.get(3)?,
                            first_failed_at: r.get(4)?,
                            webhook_secret: r.get(5)?,
                            lease_until: r.get(6)?,
                            payload: String::new(),
                            signing_secret: String::new(),
                            kind: DeliveryKind::Task,
                        };
                        Ok((delivery, r.get(7)?, r.get(8)?))
                    })?
                    .collect::<Result<_, _>>()?;
                // The payloads, which live apart from the rows that every attempt rewrites
                // (migration 0006), by their task's `seq`; and the accounts' signing secrets,
                // once per account rather than once per row.
                let mut payload =
                    conn.prepare_cached("SELECT payload FROM webhook_payloads WHERE task_seq = ?")?;
                let mut secret =
                    conn.prepare_cached("SELECT signing_secret FROM accounts WHERE id = ?")?;
                let mut secrets: HashMap<String, String> = HashMap::new();
                for (delivery, account, task_seq) in &mut claimed {
                    delivery.payload = payload.query_row([*task_seq], |r| r.get(0))?;
                    if !secrets.contains_key(account.as_str()) {
                        let found: String = secret.query_row([account.as_str()], |r| r.get(0))?;
                        secrets.insert(account.clone(), found);
                    }
                    delivery.signing_secret = secrets[account.as_str()].clone();
                }
                Ok(claimed.into_iter().map(|(delivery, ..)| delivery).collect())
            })
            .await
    }

    async fn record_attempt(
        &self,
        claim: &DueDelivery,
        record: &AttemptRecord,
    ) -> StoreResult<bool> {
        self.writer
            .record(RecordAttempt {
                delivery_id: claim.id.clone(),
                claimed_attempts: claim.attempts,
                claimed_lease: claim.lease_until,
                record: record.clone(),
            })
            .await
    }

    async fn release_deliveries(&self, claimed: &[DueDelivery]) -> StoreResult<u64> {
        let leases: Vec<(String, i64)> = claimed
            .iter()
            .map(|d| (d.id.clone(), d.lease_until))
            .collect();
        self.writer
            .call(Durability::Committed, move |conn| {
                let mut release = conn.prepare_cached(
                    "UPDATE webhook_deliveries SET lease_until = NULL
                     WHERE id = ? AND lease_until = ? AND status = 'pending'",
                )?;
                let mut released = 0;
                for (id, lease_until) in &leases {
                    released += release.execute(params![id, lease_until])? as u64;
                }
                Ok(released)
            })
            .await
    }

    async fn next_delivery_due(&self) -> StoreResult<Option<i64>> {
        queue_outbox::next_delivery_due(self).await
    }

    async fn redeliver(&self, account_id: &str, task_id: &Uuid) -> StoreResult<Redelivery> {
        let TaskKey { seq, legacy } = self.ids.key(task_id);
        let account_id = account_id.to_string();
        let decided = self
            .writer
            .call(Durability::Synced, move |conn| {
                let task: Option<(i64, String, Option<String>)> = conn
                    .prepare_cached(&format!(
                        "SELECT t.seq, t.status, t.webhook_url FROM tasks t
                         WHERE {} AND t.account_id = ?3",
                        by_id(1, 2)
                    ))?
                    .query_row(params![seq, legacy, account_id], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                    })
                    .optional()?;
                let Some((seq, status, webhook_url)) = task else {
                    return Ok(Redelivery::TaskNotFound);
                };
                let status: String = status;
                let decided =
                    Redelivery::decide(decode(seq, "status", &status)?, webhook_url.is_some());
                if decided == Redelivery::Queued {
                    let now = now_ms();
                    let queued = conn
                        .prepare_cached(queue_outbox::REDELIVER.sqlite)?
                        .execute(params![now, seq])?;
                    if queued == 0 {
                        return Ok(Redelivery::NotRequested);
                    }
                }
                Ok(decided)
            })
            .await?;
        if decided == Redelivery::Queued {
            self.wakeups.outbox.notify_one();
        }
        Ok(decided)
    }
}
