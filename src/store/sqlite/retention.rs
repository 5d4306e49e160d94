//! Retention on SQLite: the expired tasks, read from the `tasks_expiring` index, and their
//! removal recorded through the writer.

use async_trait::async_trait;
use rusqlite::params;

use super::writer::Durability;
use super::{to_json, SqliteStore};
use crate::store::{ExpiredTask, Retention, StoreResult};

#[async_trait]
impl Retention for SqliteStore {
    async fn expired_tasks(
        &self,
        finished_before: i64,
        limit: u32,
    ) -> StoreResult<Vec<ExpiredTask>> {
        let rows: Vec<(i64, i64, Option<String>, Option<String>)> = sqlx::query_as(
            "SELECT seq, finished_at, grid_key, image_keys FROM tasks
             WHERE finished_at IS NOT NULL AND finished_at <= ?1 AND data_removed_at IS NULL
             ORDER BY finished_at, seq LIMIT ?2",
        )
        .bind(finished_before)
        .bind(i64::from(limit))
        .fetch_all(&self.reader)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(seq, at, grid, images)| ExpiredTask::new(seq, at, grid, images.as_deref()))
            .collect())
    }

    async fn mark_data_removed(&self, seqs: &[i64], at: i64) -> StoreResult<u64> {
        if seqs.is_empty() {
            return Ok(0);
        }
        let seqs = to_json(&seqs);
        self.writer
            .call(Durability::Synced, move |conn| {
                // The mask is the caller's image; an empty one keeps the parameters readable.
                let marked = conn
                    .prepare_cached(
                        "UPDATE tasks SET data_removed_at = ?1,
                             params = CASE WHEN task_type = 'inpaint' AND params IS NOT NULL
                                           THEN json_set(params, '$.mask', '') ELSE params END
                         WHERE seq IN (SELECT value FROM json_each(?2))
                           AND data_removed_at IS NULL",
                    )?
                    .execute(params![at, seqs])?;
                Ok(marked as u64)
            })
            .await
    }
}
