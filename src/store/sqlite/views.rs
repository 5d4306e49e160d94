//! What the dashboard and operators read, on SQLite: the reader pool only.

use async_trait::async_trait;
use uuid::Uuid;

use super::super::ids::TaskKey;
use super::tasks::{by_id, TASK_COLUMNS};
use super::SqliteStore;
use crate::store::rows::{by_destination, FailedAttempt, TaskRow};
use crate::store::{
    usage_since, AccountLoad, DayUsage, FailingDestination, PlanLoad, QueueRow, StoreResult, Task,
    TaskFilter, TaskPage, Views, FAILING_SCAN_MAX, LIST_LIMIT_MAX,
};

const TASK_JOINS: &str = "FROM tasks t LEFT JOIN webhook_deliveries d ON d.task_seq = t.seq
     LEFT JOIN tasks p ON p.seq = t.parent_seq";

#[async_trait]
impl Views for SqliteStore {
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
                let TaskKey { seq, legacy } = self.ids.key(id);
                let found: Option<i64> = sqlx::query_scalar(&format!(
                    "SELECT t.seq FROM tasks t WHERE {} AND t.account_id = ?3",
                    by_id(1, 2)
                ))
                .bind(seq)
                .bind(legacy)
                .bind(account_id)
                .fetch_optional(&self.reader)
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
            format!("SELECT {TASK_COLUMNS} {TASK_JOINS} WHERE t.account_id = ? AND t.seq < ?");
        sql.push_str(&filter.conditions());
        sql.push_str(" ORDER BY t.seq DESC LIMIT ?");
        let rows = sqlx::query_as::<_, TaskRow>(&sql)
            .bind(account_id)
            .bind(before)
            .bind(i64::from(limit) + 1)
            .fetch_all(&self.reader)
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
                 SELECT * FROM (SELECT {TASK_COLUMNS} {TASK_JOINS}
                                WHERE t.account_id = ?1 AND t.event_seq >= ?2
                                ORDER BY t.event_seq LIMIT ?3)
                 UNION ALL
                 SELECT * FROM (SELECT {TASK_COLUMNS} {TASK_JOINS}
                                WHERE t.account_id = ?1 AND t.seq >= ?2 AND t.event_seq IS NULL
                                ORDER BY t.seq LIMIT ?3))
             ORDER BY COALESCE(event_seq, seq) LIMIT ?3"
        ))
        .bind(account_id)
        .bind(from)
        .bind(i64::from(limit.clamp(1, LIST_LIMIT_MAX)))
        .fetch_all(&self.reader)
        .await?;
        rows.into_iter()
            .map(|row| row.into_task(&self.ids))
            .collect()
    }

    async fn task_children(&self, account_id: &str, parent_seq: i64) -> StoreResult<Vec<Task>> {
        let rows: Vec<TaskRow> = sqlx::query_as(&format!(
            "SELECT {TASK_COLUMNS} {TASK_JOINS}
             WHERE t.parent_seq = ? AND t.account_id = ? ORDER BY t.seq"
        ))
        .bind(parent_seq)
        .bind(account_id)
        .fetch_all(&self.reader)
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
            "SELECT strftime('%Y-%m-%d', created_at / 1000, 'unixepoch') AS day, COUNT(*),
                    COALESCE(SUM(CASE WHEN status = 'finished'
                                      THEN json_array_length(image_keys) END), 0)
             FROM tasks WHERE account_id = ? AND created_at >= ?
             GROUP BY day ORDER BY day",
        )
        .bind(account_id)
        .bind(usage_since(days, now))
        .fetch_all(&self.reader)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(day, tasks, images)| DayUsage { day, tasks, images })
            .collect())
    }

    async fn queue_by_status_and_mode(&self) -> StoreResult<Vec<QueueRow>> {
        // Two halves, so that each reads only its partial index's rows (queued, running).
        Ok(sqlx::query_as(
            "SELECT * FROM (
                 SELECT status, process_mode, COUNT(*) AS tasks,
                        MIN(created_at) AS oldest_created_at
                 FROM tasks WHERE status = 'pending' GROUP BY status, process_mode
                 UNION ALL
                 SELECT status, process_mode, COUNT(*), MIN(created_at)
                 FROM tasks WHERE status IN ('starting', 'processing')
                 GROUP BY status, process_mode)
             ORDER BY status, process_mode",
        )
        .fetch_all(&self.reader)
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
             ORDER BY a.active_tasks DESC, a.id LIMIT ?",
        )
        .bind(i64::from(limit))
        .fetch_all(&self.reader)
        .await?)
    }

    async fn load_by_plan(&self) -> StoreResult<Vec<PlanLoad>> {
        Ok(sqlx::query_as(
            "WITH running AS (
                 SELECT account_id, COUNT(*) AS n FROM tasks
                 WHERE status IN ('starting', 'processing') GROUP BY account_id)
             SELECT a.plan, SUM(a.active_tasks - COALESCE(r.n, 0)) AS queued,
                    SUM(COALESCE(r.n, 0)) AS running
             FROM accounts a LEFT JOIN running r ON r.account_id = a.id
             GROUP BY a.plan ORDER BY a.plan",
        )
        .fetch_all(&self.reader)
        .await?)
    }

    async fn failing_destinations(&self, since: i64) -> StoreResult<Vec<FailingDestination>> {
        let rows: Vec<FailedAttempt> = sqlx::query_as(
            "SELECT d.url, d.id, a.attempted_at, a.status_code, a.error
             FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id
             WHERE a.id > (SELECT COALESCE(MAX(id), 0) FROM webhook_attempts) - ?
               AND a.attempted_at >= ?
               AND (a.status_code IS NULL OR a.status_code < 200 OR a.status_code > 299)
             ORDER BY a.id DESC",
        )
        .bind(FAILING_SCAN_MAX)
        .bind(since)
        .fetch_all(&self.reader)
        .await?;
        Ok(by_destination(rows))
    }
}
