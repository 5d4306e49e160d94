//! Rows as both databases' reads select them, decoded the same way: the columns are named and
//! typed alike in both schemas (times and counts `BIGINT`/`INTEGER`, image keys as JSON text).

use std::str::FromStr;
use std::sync::Arc;

use sqlx::{ColumnIndex, Database, Decode, FromRow, Row, Type};

use super::sql::{sql, Sql};
use super::{
    Account, ClaimedTask, FailingDestination, Failure, KeyOwner, LiveKey, StoreError, StoreResult,
    Task, TaskIds, WebhookState,
};
use crate::domain::output::OutputColumns;
use crate::domain::wire::TaskUsage;
use crate::domain::{
    Extras, OpKind, Operation, Output, Retrying, TaskStatus, WebhookEvent, WebhookEvents,
};

/// A task's id from before ids were made from `seq`: SQLite keeps those of the tasks stored
/// before its migration 0004; PostgreSQL has none.
const LEGACY_ID: Sql = Sql::each("t.id", "NULL::text");
const PARENT_LEGACY_ID: Sql = Sql::each("p.id", "NULL::text");
/// The parent task, for its legacy id (SQLite only).
const PARENT: Sql = Sql::each(" LEFT JOIN tasks p ON p.seq = t.parent_seq", "");
/// A task's extras: SQLite keeps them in a table of their own (its migration 0026), out of the
/// row that every update of the task rewrites; PostgreSQL in the row, where TOAST keeps a large
/// value out of line and an update carries it over unchanged.
const EXTRAS: Sql = Sql::each("x.extras", "t.extras");
const EXTRAS_JOIN: Sql = Sql::each(" LEFT JOIN task_extras x ON x.seq = t.seq", "");
/// A task's image keys as JSON text: SQLite keeps them so, PostgreSQL as an array.
pub(crate) const IMAGE_KEYS: Sql = Sql::each("t.image_keys", "array_to_json(t.image_keys)::text");

/// The columns of a task (`t`) and its delivery (`d`), named and typed as [`TaskRow`] decodes
/// them.
pub(crate) const TASK_COLUMNS: Sql = sql!(
    "t.seq, ",
    LEGACY_ID,
    " AS legacy_id, t.task_type, t.params, t.parent_seq, ",
    PARENT_LEGACY_ID,
    " AS parent_legacy_id, t.status, t.percentage, t.prompt, t.aspect_ratio, t.process_mode,
     t.seed, t.attempts, t.created_at, t.started_at, t.finished_at, t.grid_key, ",
    IMAGE_KEYS,
    " AS image_keys, t.result, t.error, t.webhook_url, ",
    EXTRAS,
    " AS extras, d.status AS wh_status,
     d.attempts AS wh_attempts, d.last_status_code AS wh_last_status_code,
     d.last_error AS wh_last_error, d.next_attempt_at AS wh_next_attempt_at, t.data_removed_at,
     t.event_seq, t.preview_key, t.retry_attempt, t.retry_error, t.cost, t.usage_backend,
     t.usage_model, t.backend_ms, t.usage_images, t.usage_pixels"
);
/// What [`TASK_COLUMNS`] reads beside `tasks t`: its delivery, and on SQLite its parent and its
/// extras.
pub(crate) const TASK_JOINS: Sql = sql!(
    " LEFT JOIN webhook_deliveries d ON d.task_seq = t.seq",
    PARENT,
    EXTRAS_JOIN
);

/// A task's row, with its delivery's, as the reads select it.
#[derive(FromRow)]
pub(crate) struct TaskRow {
    seq: i64,
    legacy_id: Option<String>,
    task_type: String,
    params: Option<String>,
    parent_seq: Option<i64>,
    parent_legacy_id: Option<String>,
    status: String,
    percentage: i64,
    prompt: String,
    aspect_ratio: String,
    process_mode: String,
    seed: i64,
    attempts: i64,
    created_at: i64,
    started_at: Option<i64>,
    finished_at: Option<i64>,
    grid_key: Option<String>,
    image_keys: Option<String>,
    result: Option<String>,
    error: Option<String>,
    webhook_url: Option<String>,
    extras: Option<String>,
    wh_status: Option<String>,
    wh_attempts: Option<i64>,
    wh_last_status_code: Option<i64>,
    wh_last_error: Option<String>,
    wh_next_attempt_at: Option<i64>,
    data_removed_at: Option<i64>,
    event_seq: Option<i64>,
    preview_key: Option<String>,
    retry_attempt: Option<i64>,
    retry_error: Option<String>,
    cost: i64,
    usage_backend: Option<String>,
    usage_model: Option<String>,
    backend_ms: Option<i64>,
    usage_images: Option<i64>,
    usage_pixels: Option<i64>,
}

/// A stored name decoded into its domain type: a value that is not one of them (a damaged row, or
/// one a newer version wrote) is an error that names the task, the column and the value.
pub(crate) fn decode<T>(seq: i64, column: &str, value: &str) -> StoreResult<T>
where
    T: FromStr,
    T::Err: std::fmt::Display,
{
    value.parse().map_err(|e| {
        StoreError::Other(Arc::new(Failure(format!(
            "task {seq}: stored {column} `{value}` cannot be read: {e}"
        ))))
    })
}

impl TaskRow {
    pub(crate) fn into_task(self, ids: &TaskIds) -> StoreResult<Task> {
        let status: TaskStatus = decode(self.seq, "status", &self.status)?;
        let task_type: OpKind = decode(self.seq, "task_type", &self.task_type)?;
        let aspect_ratio = decode(self.seq, "aspect_ratio", &self.aspect_ratio)?;
        let process_mode = decode(self.seq, "process_mode", &self.process_mode)?;
        let extras = Extras::from_column(self.extras.as_deref());
        // A final task without a delivery row was left out by its `webhook_events`.
        let skipped = self.wh_status.is_none()
            && status.is_final()
            && final_event(status).is_some_and(|e| !WebhookEvents::wants(extras.webhook_events, e));
        let webhook = self.webhook_url.map(|url| WebhookState {
            url,
            status: self
                .wh_status
                .unwrap_or_else(|| if skipped { "skipped" } else { "pending" }.into()),
            attempts: self.wh_attempts.unwrap_or(0),
            last_status_code: self.wh_last_status_code,
            last_error: self.wh_last_error,
            next_attempt_at: self.wh_next_attempt_at,
        });
        let operation = Operation::from_params(&self.task_type, self.params.as_deref())
            .inspect_err(|e| tracing::warn!(seq = self.seq, error = %e, "unreadable task"))
            .ok();
        let output = (status == TaskStatus::Finished)
            .then(|| {
                let shape = task_type.shape();
                let image_keys = self
                    .image_keys
                    .as_deref()
                    .and_then(|keys| serde_json::from_str(keys).ok());
                let columns = OutputColumns {
                    grid_key: self.grid_key,
                    image_keys,
                    result: self.result,
                };
                Output::from_columns(shape, columns)
            })
            .flatten();
        Ok(Task {
            seq: self.seq,
            id: ids.of_row(self.seq, self.legacy_id.as_deref()),
            task_type,
            operation,
            parent_id: self
                .parent_seq
                .map(|seq| ids.of_row(seq, self.parent_legacy_id.as_deref())),
            status,
            percentage: self.percentage,
            prompt: self.prompt,
            aspect_ratio,
            process_mode,
            seed: self.seed,
            attempts: self.attempts,
            created_at: self.created_at,
            started_at: self.started_at,
            finished_at: self.finished_at,
            output,
            error: self.error,
            webhook,
            data_removed_at: self.data_removed_at,
            extras,
            version: self.event_seq.unwrap_or(self.seq),
            preview_key: self
                .preview_key
                .filter(|_| status == TaskStatus::Processing),
            retrying: match (self.retry_attempt, self.retry_error) {
                (Some(attempt), Some(error)) if status == TaskStatus::Processing => {
                    Some(Retrying {
                        attempt: u32::try_from(attempt).unwrap_or(u32::MAX),
                        error,
                    })
                }
                _ => None,
            },
            cost: self.cost,
            // Written with the end of a finished or failed task, all together.
            usage: self.backend_ms.map(|ms| {
                TaskUsage::new(
                    self.usage_backend,
                    self.usage_model,
                    ms,
                    self.usage_images.unwrap_or(0),
                    self.usage_pixels.unwrap_or(0),
                )
            }),
        })
    }
}

/// A claimed task as both stores read it back, before its parameters are parsed.
pub(crate) struct ClaimedRow {
    pub seq: i64,
    pub id: String,
    pub account_id: String,
    pub task_type: String,
    pub params: Option<String>,
    pub parent_id: Option<String>,
    pub prompt: String,
    pub aspect_ratio: String,
    pub seed: i64,
    pub attempts: i64,
    pub extras: Option<String>,
}

impl ClaimedRow {
    /// The claimed task, with its stored names decoded (an error names a value it cannot read).
    pub(crate) fn into_claimed(self) -> StoreResult<ClaimedTask> {
        Ok(ClaimedTask {
            operation: Operation::from_params(&self.task_type, self.params.as_deref()),
            task_type: decode(self.seq, "task_type", &self.task_type)?,
            aspect_ratio: decode(self.seq, "aspect_ratio", &self.aspect_ratio)?,
            seq: self.seq,
            id: self.id,
            account_id: self.account_id,
            parent_id: self.parent_id,
            prompt: self.prompt,
            seed: self.seed,
            attempts: self.attempts,
            extras: Extras::from_column(self.extras.as_deref()),
        })
    }
}

/// Decode the rows of a query for tasks; an error names a value it cannot read.
pub(crate) fn into_tasks(rows: Vec<TaskRow>, ids: &TaskIds) -> StoreResult<Vec<Task>> {
    rows.into_iter().map(|row| row.into_task(ids)).collect()
}

/// What a query read by [`key_and_tasks`] selects first: the presented key's columns.
pub(crate) const KEY_THEN_TASKS: &str = "SELECT k.id AS key_id, k.account_id AS key_account_id,
        k.last_used_at AS key_last_used_at,";

/// Split the rows of a query that selects the presented key (`key_id`, `key_account_id`,
/// `key_last_used_at`) left-joined to the tasks asked for: no row means the key is not live; a row
/// without a task (`seq` null) is the key alone.
pub(crate) fn key_and_tasks<'r, R>(
    rows: &'r [R],
    ids: &TaskIds,
) -> StoreResult<Option<(LiveKey, Vec<Task>)>>
where
    R: Row,
    TaskRow: FromRow<'r, R>,
    &'static str: ColumnIndex<R>,
    String: Decode<'r, R::Database> + Type<R::Database>,
    i64: Decode<'r, R::Database> + Type<R::Database>,
    Option<i64>: Decode<'r, R::Database> + Type<R::Database>,
    R::Database: Database,
{
    let Some(first) = rows.first() else {
        return Ok(None);
    };
    let key = LiveKey {
        key_id: first.try_get("key_id")?,
        account_id: first.try_get("key_account_id")?,
        last_used_at: first.try_get("key_last_used_at")?,
    };
    let mut tasks = Vec::with_capacity(rows.len());
    for row in rows {
        if row.try_get::<Option<i64>, _>("seq")?.is_some() {
            tasks.push(TaskRow::from_row(row)?.into_task(ids)?);
        }
    }
    Ok(Some((key, tasks)))
}

/// A live key with its account, as authentication selects it.
#[derive(FromRow)]
pub(crate) struct KeyOwnerRow {
    key_id: String,
    last_used_at: Option<i64>,
    id: String,
    email: String,
    plan: String,
    credits: Option<i64>,
    total_images: i64,
    signing_secret: String,
    admin: bool,
    disabled: bool,
    created_at: i64,
    has_password: bool,
    expires_at: Option<i64>,
}

impl KeyOwnerRow {
    pub(crate) fn into_owner(self) -> KeyOwner {
        KeyOwner {
            key_id: self.key_id,
            last_used_at: self.last_used_at,
            account: Account {
                id: self.id,
                email: self.email,
                plan: self.plan,
                credits: self.credits,
                total_images: self.total_images,
                signing_secret: self.signing_secret,
                admin: self.admin,
                disabled: self.disabled,
                created_at: self.created_at,
                has_password: self.has_password,
                expires_at: self.expires_at,
            },
        }
    }
}

/// The columns of an account as [`Account`] decodes them, in both databases (`a` is the
/// accounts table).
pub(crate) const ACCOUNT_COLUMNS: &str = "a.id, a.email, a.plan, a.credits, a.total_images,
    a.signing_secret, a.admin, a.disabled, a.created_at, a.password_hash IS NOT NULL AS has_password,
    a.expires_at";

/// The delivery event of a final status.
fn final_event(status: TaskStatus) -> Option<WebhookEvent> {
    match status {
        TaskStatus::Finished => Some(WebhookEvent::Completed),
        TaskStatus::Failed => Some(WebhookEvent::Failed),
        TaskStatus::Canceled => Some(WebhookEvent::Canceled),
        _ => None,
    }
}

/// One failed webhook attempt, as `failing_destinations` reads them: the delivery's URL and id,
/// when, and what came back.
pub(crate) type FailedAttempt = (String, String, i64, Option<i64>, Option<String>);

/// Group failed attempts (newest first) by their destination's host, most failures first.
pub(crate) fn by_destination(rows: Vec<FailedAttempt>) -> Vec<FailingDestination> {
    let mut hosts: std::collections::HashMap<
        String,
        (FailingDestination, std::collections::HashSet<String>),
    > = std::collections::HashMap::new();
    for (url, delivery, at, code, error) in rows {
        let host = url::Url::parse(&url)
            .ok()
            .and_then(|u| {
                u.host_str().map(|h| match u.port() {
                    Some(port) => format!("{h}:{port}"),
                    None => h.to_string(),
                })
            })
            .unwrap_or(url);
        let (entry, deliveries) = hosts.entry(host.clone()).or_insert_with(|| {
            (
                FailingDestination {
                    host,
                    failures: 0,
                    deliveries: 0,
                    last_failed_at: at,
                    last_status_code: code,
                    last_error: error.clone(),
                },
                Default::default(),
            )
        });
        entry.failures += 1;
        if at > entry.last_failed_at {
            entry.last_failed_at = at;
            entry.last_status_code = code;
            entry.last_error = error;
        }
        deliveries.insert(delivery);
    }
    let mut out: Vec<FailingDestination> = hosts
        .into_values()
        .map(|(mut d, deliveries)| {
            d.deliveries = deliveries.len() as i64;
            d
        })
        .collect();
    out.sort_by(|a, b| b.failures.cmp(&a.failures).then(a.host.cmp(&b.host)));
    out
}
