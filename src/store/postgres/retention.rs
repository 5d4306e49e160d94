//! Retention on PostgreSQL: the expired tasks, read from the `tasks_expiring` index, and their
//! removal recorded in one statement.

use async_trait::async_trait;

use super::PgStore;
use crate::store::{ExpiredTask, Retention, StoreResult};

#[async_trait]
impl Retention for PgStore {
    async fn expired_tasks(
        &self,
        finished_before: i64,
        limit: u32,
    ) -> StoreResult<Vec<ExpiredTask>> {
        let rows: Vec<(i64, i64, Option<String>, Option<String>)> = sqlx::query_as(
            "SELECT seq, finished_at, grid_key, array_to_json(image_keys)::text FROM tasks
             WHERE finished_at IS NOT NULL AND finished_at <= $1 AND data_removed_at IS NULL
             ORDER BY finished_at, seq LIMIT $2",
        )
        .bind(finished_before)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
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
        // The mask is the caller's image; an empty one keeps the parameters readable.
        let marked = sqlx::query(
            "UPDATE tasks SET data_removed_at = $2,
                 params = CASE WHEN task_type = 'inpaint' AND params IS NOT NULL
                               THEN jsonb_set(params::jsonb, '{mask}', '\"\"')::text
                               ELSE params END
             WHERE seq = ANY($1) AND data_removed_at IS NULL",
        )
        .bind(seqs)
        .bind(at)
        .execute(&self.pool)
        .await?;
        Ok(marked.rows_affected())
    }
}
