//! What the dashboard and operators read ([`Views`]), once for both stores: nothing here writes.

use async_trait::async_trait;
use uuid::Uuid;

use super::search::{filtered, search_rows, MODEL};
use super::{sql, Sql, SqlStore};
use crate::store::rows::TASK_JOINS;
use crate::store::rows::{by_destination, into_tasks, FailedAttempt, TASK_COLUMNS};
use crate::store::usage::{UsageQuery, UsageRow};
use crate::store::{
    usage_since, AccountLoad, AttemptRow, ClaimRules, DayUsage, FailingDestination, PlanLoad,
    QueueRow, StoreResult, Task, TaskFilter, TaskPage, Views, Waiting, FAILING_SCAN_MAX,
    LIST_LIMIT_MAX,
};

/// Keyset paging: each page is a range of `tasks_by_account` (or of the index for the filter,
/// whose conditions go between these two), read newest first from the cursor, whatever the
/// depth.
const PAGE: Sql = sql!(
    "SELECT ",
    TASK_COLUMNS,
    " FROM tasks t",
    TASK_JOINS,
    " WHERE t.account_id = $1 AND t.seq < $2"
);
const PAGE_ORDER: Sql = sql!(" ORDER BY t.seq DESC LIMIT $3");

/// A listing's model filter, its value bound after the page's three.
const BY_MODEL: Sql = sql!(" AND ", MODEL, " = $4");

/// Tasks changed since submit are found by `tasks_events`, the others by their `seq`
/// (`tasks_by_account`): a submit writes no entry of the first.
const CHANGES: Sql = sql!(
    "SELECT * FROM (
         SELECT * FROM (SELECT ",
    TASK_COLUMNS,
    " FROM tasks t",
    TASK_JOINS,
    " WHERE t.account_id = $1 AND t.event_seq >= $2
                        ORDER BY t.event_seq LIMIT $3) changed
         UNION ALL
         SELECT * FROM (SELECT ",
    TASK_COLUMNS,
    " FROM tasks t",
    TASK_JOINS,
    " WHERE t.account_id = $1 AND t.seq >= $2 AND t.event_seq IS NULL
                        ORDER BY t.seq LIMIT $3) unchanged) changes
     ORDER BY COALESCE(event_seq, seq) LIMIT $3"
);

const CHILDREN: Sql = sql!(
    "SELECT ",
    TASK_COLUMNS,
    " FROM tasks t",
    TASK_JOINS,
    " WHERE t.parent_seq = $1 AND t.account_id = $2 ORDER BY t.seq"
);

/// A task's UTC day, `YYYY-MM-DD`.
const DAY: Sql = Sql::each(
    "strftime('%Y-%m-%d', created_at / 1000, 'unixepoch')",
    "to_char(to_timestamp(created_at / 1000) AT TIME ZONE 'UTC', 'YYYY-MM-DD')",
);
/// How many images a task's keys name: SQLite keeps them as JSON text, PostgreSQL as an array.
const IMAGES: Sql = Sql::each("json_array_length(image_keys)", "cardinality(image_keys)");
const USAGE: Sql = sql!(
    "SELECT ",
    DAY,
    " AS day, COUNT(*),
         CAST(COALESCE(SUM(CASE WHEN status = 'finished' THEN ",
    IMAGES,
    " END), 0) AS BIGINT)
     FROM tasks WHERE account_id = $1 AND created_at >= $2
     GROUP BY day ORDER BY day"
);

/// Two halves, so that each reads only its partial index's rows (queued, running).
const QUEUE: Sql = sql!(
    "SELECT * FROM (
         SELECT status, process_mode, COUNT(*) AS tasks, MIN(created_at) AS oldest_created_at
         FROM tasks WHERE status = 'pending' GROUP BY status, process_mode
         UNION ALL
         SELECT status, process_mode, COUNT(*), MIN(created_at)
         FROM tasks WHERE status IN ('starting', 'processing')
         GROUP BY status, process_mode) q
     ORDER BY status, process_mode"
);

/// The accounts with work by their counter (every account's row is read: no index orders
/// them), their running tasks from the running tasks' partial index.
const BUSIEST: Sql = sql!(
    "WITH running AS (
         SELECT account_id, COUNT(*) AS n FROM tasks
         WHERE status IN ('starting', 'processing') GROUP BY account_id)
     SELECT a.id AS account_id, a.email, a.plan,
            a.active_tasks - COALESCE(r.n, 0) AS queued, COALESCE(r.n, 0) AS running
     FROM accounts a LEFT JOIN running r ON r.account_id = a.id
     WHERE a.active_tasks > 0
     ORDER BY a.active_tasks DESC, a.id LIMIT $1"
);

const BY_PLAN: Sql = sql!(
    "WITH running AS (
         SELECT account_id, COUNT(*) AS n FROM tasks
         WHERE status IN ('starting', 'processing') GROUP BY account_id)
     SELECT a.plan, CAST(SUM(a.active_tasks - COALESCE(r.n, 0)) AS BIGINT) AS queued,
            CAST(SUM(COALESCE(r.n, 0)) AS BIGINT) AS running
     FROM accounts a LEFT JOIN running r ON r.account_id = a.id
     GROUP BY a.plan ORDER BY a.plan"
);

const FAILING: Sql = sql!(
    "SELECT d.url, d.id, a.attempted_at, a.status_code, a.error
     FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id
     WHERE a.id > (SELECT COALESCE(MAX(id), 0) FROM webhook_attempts) - $1
       AND a.attempted_at >= $2
       AND (a.status_code IS NULL OR a.status_code < 200 OR a.status_code > 299)
     ORDER BY a.id DESC"
);

/// The tasks claimed and waiting for a backend (`starting`), then the queue in claim order, each
/// with whether its account is at its running limit (`$2`, the plans' limits as a JSON object;
/// `$3`, every other plan's); at most `$1`. On SQLite from partial indexes only: `tasks_leases`
/// (running tasks: the `IN` lets the planner use it), read once for the accounts' running counts
/// and once for those waiting for a backend, and `tasks_queue`, read in order; each queued
/// task's account by its key. The databases read the limits' JSON each their own way.
const WAITING: Sql = sql!(
    sqlite: "WITH running AS (
                 SELECT account_id, COUNT(*) AS n FROM tasks
                 WHERE status IN ('starting', 'processing') GROUP BY account_id)
             SELECT seq, 1, 0 FROM (SELECT seq FROM tasks
                                   WHERE status IN ('starting', 'processing')
                                     AND status = 'starting'
                                   ORDER BY priority, turn, seq)
             UNION ALL
             SELECT seq, 0, held FROM (
                 SELECT t.seq,
                        COALESCE((SELECT n FROM running WHERE running.account_id = t.account_id),
                                 0)
                        >= COALESCE((SELECT value FROM json_each($2)
                                     WHERE key = (SELECT a.plan FROM accounts a
                                                  WHERE a.id = t.account_id)), $3) AS held
                 FROM tasks t WHERE t.status = 'pending'
                 ORDER BY t.priority, t.turn, t.seq LIMIT $1)
             LIMIT $1",
    postgres: "WITH running AS (
                   SELECT account_id, COUNT(*) AS n FROM tasks
                   WHERE status IN ('starting', 'processing') GROUP BY account_id)
               (SELECT seq, true, false FROM tasks
                WHERE status IN ('starting', 'processing') AND status = 'starting'
                ORDER BY priority, turn, seq)
               UNION ALL
               (SELECT t.seq, false,
                       COALESCE((SELECT n FROM running WHERE running.account_id = t.account_id), 0)
                       >= COALESCE(($2::jsonb ->> a.plan)::bigint, $3)
                FROM tasks t JOIN accounts a ON a.id = t.account_id
                WHERE t.status = 'pending' ORDER BY t.priority, t.turn, t.seq LIMIT $1)
               LIMIT $1",
);
const COUNTS: Sql = sql!("SELECT status, COUNT(*) FROM tasks GROUP BY status ORDER BY status");
const ATTEMPTS: Sql = sql!(
    "SELECT a.attempted_at, a.duration_ms, a.status_code, a.error, a.next_attempt_at
     FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id
     WHERE d.task_seq = $1 ORDER BY a.id"
);

#[async_trait]
impl<S: SqlStore> Views for S {
    async fn list_tasks(
        &self,
        account_id: &str,
        filter: &TaskFilter,
        cursor: Option<&Uuid>,
        limit: u32,
    ) -> StoreResult<Option<TaskPage>> {
        let before = match cursor {
            None => i64::MAX,
            Some(id) => match self.account_task(account_id, id).await? {
                Some(seq) => seq,
                None => return Ok(None),
            },
        };
        let limit = limit.clamp(1, LIST_LIMIT_MAX);
        let db = self.reader();
        let sqlite = db.is_sqlite();
        let mut args = vec![
            account_id.into(),
            before.into(),
            (i64::from(limit) + 1).into(),
        ];
        let rows = if filter.words.is_empty() {
            let (head, tail) = (PAGE.on(sqlite), PAGE_ORDER.on(sqlite));
            let sql = filtered(head, filter, BY_MODEL.on(sqlite), tail, &mut args);
            db.all(sql.as_str(), &args).await?
        } else {
            search_rows(self, account_id, filter, before, i64::from(limit) + 1).await?
        };
        let mut tasks = into_tasks(rows, self.ids())?;
        Ok(Some(TaskPage::cut(&mut tasks, limit)))
    }

    async fn account_changes(
        &self,
        account_id: &str,
        from: i64,
        limit: u32,
    ) -> StoreResult<Vec<Task>> {
        let limit = i64::from(limit.clamp(1, LIST_LIMIT_MAX));
        let args = [account_id.into(), from.into(), limit.into()];
        into_tasks(self.reader().all(&CHANGES, &args).await?, self.ids())
    }

    async fn task_children(&self, account_id: &str, parent_seq: i64) -> StoreResult<Vec<Task>> {
        let args = [parent_seq.into(), account_id.into()];
        into_tasks(self.reader().all(&CHILDREN, &args).await?, self.ids())
    }

    async fn usage_by_day(
        &self,
        account_id: &str,
        days: u32,
        now: i64,
    ) -> StoreResult<Vec<DayUsage>> {
        let args = [account_id.into(), usage_since(days, now).into()];
        let rows: Vec<(String, i64, i64)> = self.reader().all(&USAGE, &args).await?;
        Ok(rows
            .into_iter()
            .map(|(day, tasks, images)| DayUsage { day, tasks, images })
            .collect())
    }

    async fn usage(&self, query: &UsageQuery) -> StoreResult<Vec<UsageRow>> {
        super::usage::usage(self, query).await
    }

    async fn queue_by_status_and_mode(&self) -> StoreResult<Vec<QueueRow>> {
        self.reader().all(&QUEUE, &[]).await
    }

    async fn busiest_accounts(&self, limit: u32) -> StoreResult<Vec<AccountLoad>> {
        self.reader()
            .all(&BUSIEST, &[i64::from(limit).into()])
            .await
    }

    async fn load_by_plan(&self) -> StoreResult<Vec<PlanLoad>> {
        self.reader().all(&BY_PLAN, &[]).await
    }

    async fn failing_destinations(&self, since: i64) -> StoreResult<Vec<FailingDestination>> {
        let args = [FAILING_SCAN_MAX.into(), since.into()];
        let rows: Vec<FailedAttempt> = self.reader().all(&FAILING, &args).await?;
        Ok(by_destination(rows))
    }

    async fn queue_order(&self, limit: u32, rules: &ClaimRules) -> StoreResult<Vec<Waiting>> {
        let args = [
            i64::from(limit).into(),
            (&**rules.plan_limits_json()).into(),
            rules.default_limit().into(),
        ];
        let rows: Vec<(i64, bool, bool)> = self.reader().all(&WAITING, &args).await?;
        Ok(rows
            .into_iter()
            .map(|(seq, claimed, held)| Waiting { seq, claimed, held })
            .collect())
    }

    async fn task_counts(&self) -> StoreResult<Vec<(String, i64)>> {
        self.reader().all(&COUNTS, &[]).await
    }

    async fn delivery_attempts(
        &self,
        account_id: &str,
        task_id: &Uuid,
    ) -> StoreResult<Option<Vec<AttemptRow>>> {
        let Some(seq) = self.account_task(account_id, task_id).await? else {
            return Ok(None);
        };
        Ok(Some(self.reader().all(&ATTEMPTS, &[seq.into()]).await?))
    }
}
