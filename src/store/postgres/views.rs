//! What the dashboard and operators read, on PostgreSQL.

use async_trait::async_trait;
use uuid::Uuid;

use super::tasks::TASK_COLUMNS;
use super::PgStore;
use crate::store::rows::{by_destination, FailedAttempt, TaskRow};
use crate::store::{
    usage_since, AccountLoad, DayUsage, FailingDestination, PlanLoad, QueueRow, StoreResult, Task,
    TaskFilter, TaskPage, Views, FAILING_SCAN_MAX, LIST_LIMIT_MAX,
};

const TASK_JOINS: &str = "FROM tasks t LEFT JOIN webhook_deliveries d ON d.task_seq = t.seq";

#[async_trait]
impl Views for PgStore {
    async fn list_tasks(
        &self,
        account_id: &str,
        filter: &TaskFilter,
        cursor: Option<&Uuid>,
        limit: u32,
    ) -> StoreResult<Option<TaskPage>> {
        let before = match cursor {
            None => i64::MAX,
            Some(id) => {
                let found: Option<i64> =
                    sqlx::query_scalar("SELECT seq FROM tasks WHERE seq = $1 AND account_id = $2")
                        .bind(self.seq_of(id))
                        .bind(account_id)
                        .fetch_optional(&self.pool)
                        .await?;
                match found {
                    Some(seq) => seq,
                    None => return Ok(None),
                }
            }
        };
        let limit = limit.clamp(1, LIST_LIMIT_MAX);
        // Keyset paging: each page is a range of `tasks_by_account` (or of the index for the
        // filter), read newest first from the cursor, whatever the depth.
        let mut sql =
            format!("SELECT {TASK_COLUMNS} {TASK_JOINS} WHERE t.account_id = $1 AND t.seq < $2");
        sql.push_str(&filter.conditions());
        sql.push_str(" ORDER BY t.seq DESC LIMIT $3");
        let rows = sqlx::query_as::<_, TaskRow>(&sql)
            .bind(account_id)
            .bind(before)
            .bind(i64::from(limit) + 1)
            .fetch_all(&self.pool)
            .await?;
        let mut tasks = rows
            .into_iter()
            .map(|r| r.into_task(&self.ids))
            .collect::<StoreResult<Vec<Task>>>()?;
        Ok(Some(TaskPage::cut(&mut tasks, limit)))
    }

    async fn account_changes(
        &self,
        account_id: &str,
        from: i64,
        limit: u32,
    ) -> StoreResult<Vec<Task>> {
        // Tasks changed since submit are found by `tasks_events`, the others by their `seq`
        // (`tasks_by_account`): a submit writes no entry of the first.
        let rows: Vec<TaskRow> = sqlx::query_as(&format!(
            "SELECT * FROM (
                 (SELECT {TASK_COLUMNS} {TASK_JOINS}
                  WHERE t.account_id = $1 AND t.event_seq >= $2
                  ORDER BY t.event_seq LIMIT $3)
                 UNION ALL
                 (SELECT {TASK_COLUMNS} {TASK_JOINS}
                  WHERE t.account_id = $1 AND t.seq >= $2 AND t.event_seq IS NULL
                  ORDER BY t.seq LIMIT $3)) changes
             ORDER BY COALESCE(event_seq, seq) LIMIT $3"
        ))
        .bind(account_id)
        .bind(from)
        .bind(i64::from(limit.clamp(1, LIST_LIMIT_MAX)))
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|row| row.into_task(&self.ids))
            .collect()
    }

    async fn task_children(&self, account_id: &str, parent_seq: i64) -> StoreResult<Vec<Task>> {
        let rows: Vec<TaskRow> = sqlx::query_as(&format!(
            "SELECT {TASK_COLUMNS} {TASK_JOINS}
             WHERE t.parent_seq = $1 AND t.account_id = $2 ORDER BY t.seq"
        ))
        .bind(parent_seq)
        .bind(account_id)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(|r| r.into_task(&self.ids)).collect()
    }

    async fn usage_by_day(
        &self,
        account_id: &str,
        days: u32,
        now: i64,
    ) -> StoreResult<Vec<DayUsage>> {
        let rows: Vec<(String, i64, i64)> = sqlx::query_as(
            "SELECT to_char(to_timestamp(created_at / 1000) AT TIME ZONE 'UTC', 'YYYY-MM-DD')
                        AS day,
                    COUNT(*),
                    COALESCE(SUM(CASE WHEN status = 'finished'
                                      THEN cardinality(image_keys) END), 0)::bigint
             FROM tasks WHERE account_id = $1 AND created_at >= $2
             GROUP BY day ORDER BY day",
        )
        .bind(account_id)
        .bind(usage_since(days, now))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(day, tasks, images)| DayUsage { day, tasks, images })
            .collect())
    }

    async fn queue_by_status_and_mode(&self) -> StoreResult<Vec<QueueRow>> {
        Ok(sqlx::query_as(
            "SELECT * FROM (
                 SELECT status, process_mode, COUNT(*) AS tasks,
                        MIN(created_at) AS oldest_created_at
                 FROM tasks WHERE status = 'pending' GROUP BY status, process_mode
                 UNION ALL
                 SELECT status, process_mode, COUNT(*), MIN(created_at)
                 FROM tasks WHERE status IN ('starting', 'processing')
                 GROUP BY status, process_mode) q
             ORDER BY status, process_mode",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    async fn busiest_accounts(&self, limit: u32) -> StoreResult<Vec<AccountLoad>> {
        // The accounts with work by their counter (every account's row is read: no index orders
        // them), their running tasks from the running tasks' partial index.
        Ok(sqlx::query_as(
            "WITH running AS (
                 SELECT account_id, COUNT(*) AS n FROM tasks
                 WHERE status IN ('starting', 'processing') GROUP BY account_id)
             SELECT a.id AS account_id, a.email, a.plan,
                    a.active_tasks - COALESCE(r.n, 0) AS queued, COALESCE(r.n, 0) AS running
             FROM accounts a LEFT JOIN running r ON r.account_id = a.id
             WHERE a.active_tasks > 0
             ORDER BY a.active_tasks DESC, a.id LIMIT $1",
        )
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?)
    }

    async fn load_by_plan(&self) -> StoreResult<Vec<PlanLoad>> {
        Ok(sqlx::query_as(
            "WITH running AS (
                 SELECT account_id, COUNT(*) AS n FROM tasks
                 WHERE status IN ('starting', 'processing') GROUP BY account_id)
             SELECT a.plan, CAST(SUM(a.active_tasks - COALESCE(r.n, 0)) AS BIGINT) AS queued,
                    CAST(SUM(COALESCE(r.n, 0)) AS BIGINT) AS running
             FROM accounts a LEFT JOIN running r ON r.account_id = a.id
             GROUP BY a.plan ORDER BY a.plan",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    async fn failing_destinations(&self, since: i64) -> StoreResult<Vec<FailingDestination>> {
        let rows: Vec<FailedAttempt> = sqlx::query_as(
            "SELECT d.url, d.id, a.attempted_at, a.status_code, a.error
             FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id
             WHERE a.id > (SELECT COALESCE(MAX(id), 0) FROM webhook_attempts) - $1
               AND a.attempted_at >= $2
               AND (a.status_code IS NULL OR a.status_code < 200 OR a.status_code > 299)
             ORDER BY a.id DESC",
        )
        .bind(FAILING_SCAN_MAX)
        .bind(since)
        .fetch_all(&self.pool)
        .await?;
        Ok(by_destination(rows))
    }
}
