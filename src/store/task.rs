//! A task as it crosses the store's interface: submitted (and what became of the submit), stored
//! and read back (one task, a page of an account's, its use by day, the queue by status), claimed
//! by a worker, and ended. With them, the rules of a task's end that must not differ between the
//! stores: the fence its final write must still hold, and the failure recorded when its workers
//! were lost too often.

use uuid::Uuid;

use crate::domain::output::OutputColumns;
use crate::domain::wire::TaskUsage;
pub use crate::domain::Outcome;
use crate::domain::{
    AspectRatio, Extras, OpKind, Operation, Output, PayloadHead, ProcessMode, Retrying, Shape,
    TaskStatus,
};

/// A task as submitted and validated. Its account is the submitting key's; its id is given
/// when it is stored.
#[derive(Clone, Debug)]
pub struct NewTask {
    pub operation: Operation,
    /// The prompt it draws from (a follow-up's own, or its parent's), empty when there is none.
    pub prompt: String,
    pub aspect_ratio: AspectRatio,
    pub process_mode: ProcessMode,
    pub priority: i64,
    pub seed: i64,
    /// The parent task, by its `seq` (see [`Task::seq`]).
    pub parent_seq: Option<i64>,
    pub webhook_url: Option<String>,
    pub webhook_secret: Option<String>,
    /// Credits the submit takes from an account that has a balance; given
    /// back if the task fails. Accounts with unlimited credits are charged nothing.
    pub cost: i64,
    /// The request's `Idempotency-Key`, when it has one: decided in the submit's transaction.
    pub idempotency: Option<Idempotency>,
    /// What the caller asked for beyond the operation.
    pub extras: Extras,
}

impl NewTask {
    pub fn task_type(&self) -> OpKind {
        self.operation.kind()
    }
}

/// A submit's idempotency key, with what identifies its request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Idempotency {
    /// The `Idempotency-Key` header's value (1..=255 printable ASCII characters).
    pub key: String,
    /// SHA-256 of the operation and the canonical JSON of the body: the same key with another
    /// fingerprint is another request.
    pub fingerprint: [u8; 32],
    /// How long the first answer is replayed, from the time the store commits it.
    pub ttl_ms: i64,
}

/// What became of a submit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Submitted {
    /// Stored durably, in the queue of the key's account, with this public id (made from `seq`,
    /// its place in the store's order, which the store's own bookkeeping wants back).
    Queued {
        account_id: String,
        task_id: Uuid,
        seq: i64,
    },
    /// Nothing stored: the account has its most tasks queued or running.
    QuotaFull,
    /// Nothing stored: the key is unknown or revoked (or its account disabled).
    KeyNotLive,
    /// Nothing stored: the account's balance is below the task's cost.
    InsufficientCredits,
    /// Nothing stored: the account's `expires_at` has passed.
    AccountExpired,
    /// Nothing stored: an unexpired first answer with this idempotency key and the same
    /// request, to be sent again as it was.
    Replayed {
        task_id: String,
        status: u16,
        body: String,
    },
    /// Nothing stored: the idempotency key's first answer was to another request.
    IdempotencyKeyReused,
    /// Nothing stored: a submit with the same account and idempotency key is being stored in
    /// the same transaction; this one may be retried.
    IdempotencyKeyInUse,
}

/// A task as stored, with the state of its webhook delivery if it has a webhook.
#[derive(Clone, Debug)]
pub struct Task {
    /// Where it is stored; what a follow-up names its parent by.
    pub seq: i64,
    /// The public id.
    pub id: String,
    pub task_type: OpKind,
    /// `None` when the stored parameters could not be read (written by a newer version).
    pub operation: Option<Operation>,
    pub parent_id: Option<String>,
    pub status: TaskStatus,
    pub percentage: i64,
    pub prompt: String,
    pub aspect_ratio: AspectRatio,
    pub process_mode: ProcessMode,
    pub seed: i64,
    pub attempts: i64,
    pub created_at: i64,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    /// What it produced, once finished.
    pub output: Option<Output>,
    pub error: Option<String>,
    pub webhook: Option<WebhookState>,
    /// When retention deleted its images (see [`Retention`](super::Retention)); None while
    /// they are kept.
    pub data_removed_at: Option<i64>,
    /// What the caller asked for beyond the operation.
    pub extras: Extras,
    /// Its stored version: every change of its stored state gives it a higher one (see
    /// `store::events`).
    pub version: i64,
    /// The latest preview of its image while it is processing (a blob key).
    pub preview_key: Option<String>,
    /// While it is processing: the backend attempt that failed last, when it waits to be tried
    /// again (its backend went down, say); None once a backend has taken it again.
    pub retrying: Option<Retrying>,
    /// Credits charged at submit; once it has ended, net of a refund.
    pub cost: i64,
    /// What it used: set when it finished or failed (tasks that ended before usage was kept
    /// have none).
    pub usage: Option<TaskUsage>,
}

impl Task {
    pub fn is_finished(&self) -> bool {
        self.status == TaskStatus::Finished
    }

    /// Whether it has ended: finished, failed or canceled.
    pub fn has_ended(&self) -> bool {
        self.status.is_final()
    }
}

// Retention: when a task's data expires, and what the sweep reads and writes.
impl Task {
    /// When the task's data expires under `retention` (None: kept forever): `retention` after
    /// it became final. None while it is not final, whatever the retention.
    pub fn expires_at(&self, retention: Option<std::time::Duration>) -> Option<i64> {
        let retention = i64::try_from(retention?.as_millis()).unwrap_or(i64::MAX);
        Some(self.finished_at?.saturating_add(retention))
    }

    /// Whether retention has deleted its images.
    pub fn data_removed(&self) -> bool {
        self.data_removed_at.is_some()
    }
}

/// A final task whose data has expired and is not removed yet, as the retention sweep reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpiredTask {
    pub seq: i64,
    pub finished_at: i64,
    /// The blob keys its output names (its grid and images); empty for a task without images.
    pub keys: Vec<String>,
}

impl ExpiredTask {
    /// The task's keys from its stored columns: the grid's key and the images' keys (JSON text).
    pub(crate) fn new(
        seq: i64,
        finished_at: i64,
        grid_key: Option<String>,
        image_keys: Option<&str>,
    ) -> ExpiredTask {
        let images: Vec<String> = image_keys
            .and_then(|keys| serde_json::from_str(keys).ok())
            .unwrap_or_default();
        ExpiredTask {
            seq,
            finished_at,
            keys: grid_key.into_iter().chain(images).collect(),
        }
    }
}

/// Where a task's webhook delivery stands.
#[derive(Clone, Debug)]
pub struct WebhookState {
    pub url: String,
    /// `pending` (also before the task ends), `delivered` or `undeliverable`.
    pub status: String,
    pub attempts: i64,
    pub last_status_code: Option<i64>,
    pub last_error: Option<String>,
    pub next_attempt_at: Option<i64>,
}

/// Which of an account's tasks a listing shows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskFilter {
    pub status: Option<TaskStatus>,
    pub task_type: Option<OpKind>,
    /// Only the tasks on this model (their settings' `model`).
    pub model: Option<String>,
    /// Only the tasks whose prompt holds every one of these words, each made of letters and
    /// digits alone ([`TaskFilter::words_of`]); none: no search.
    pub words: Vec<String>,
    /// Only the operations that make images (the gallery leaves out describe, shorten, seed).
    pub images_only: bool,
}

impl TaskFilter {
    /// Most characters of a search (`q`): room for any sentence a person searches by, and a
    /// bound on the words one query makes either store intersect. No word a search holds is
    /// longer, so the index leaves longer words of a prompt out.
    pub const SEARCH_MAX_CHARS: usize = 200;

    /// The words of a search query: its runs of letters and digits, each once, in order. Every
    /// other character separates words (as both stores' tokenizers treat it), so a word never
    /// holds a character either store's query syntax reads.
    pub fn words_of(query: &str) -> Vec<String> {
        // A prompt indexed this way holds up to 2,000 words: each found once in a set, not by
        // a walk over those kept.
        let mut seen = std::collections::HashSet::new();
        let mut words: Vec<String> = Vec::new();
        for word in query.split(|c: char| !c.is_alphanumeric()) {
            let word = word.to_lowercase();
            if !word.is_empty() && seen.insert(word.clone()) {
                words.push(word);
            }
        }
        words
    }

    /// The filter's status and type as conditions on `t`, to follow a `WHERE`. Its values are written in rather
    /// than bound: the indexes that serve a status or a type are partial (a submit writes no
    /// entry in them), and a plan may use a partial index only when the query's own text implies
    /// its condition. SQLite's planner proves that only from the condition's very words, so a
    /// type other than `imagine` repeats `tasks_by_account_type`'s. The values are a fixed set
    /// of plain words (a unit test holds every one to that).
    pub fn conditions(&self) -> String {
        let mut sql = String::new();
        if let Some(status) = self.status {
            sql.push_str(&format!(" AND t.status = '{}'", status.as_str()));
        }
        if let Some(kind) = self.task_type {
            sql.push_str(&format!(" AND t.task_type = '{}'", kind.as_str()));
            if kind != OpKind::Imagine {
                sql.push_str(" AND t.task_type <> 'imagine'");
            }
        }
        if self.images_only {
            let text: Vec<String> = OpKind::ALL
                .iter()
                .filter(|k| !matches!(k.shape(), Shape::Grid | Shape::Single))
                .map(|k| format!("'{}'", k.as_str()))
                .collect();
            sql.push_str(&format!(" AND t.task_type NOT IN ({})", text.join(", ")));
        }
        sql
    }
}

/// Progress a worker stores with its heartbeat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredProgress {
    pub percentage: i64,
    /// The latest preview's blob key, if there is one.
    pub preview_key: Option<String>,
    /// The failed backend attempt the task waits to retry, if it does.
    pub retrying: Option<Retrying>,
}

/// One page of an account's tasks, newest first.
#[derive(Clone, Debug)]
pub struct TaskPage {
    pub tasks: Vec<Task>,
    /// The cursor of the next (older) page: the last task's public id; None on the last page.
    pub next_cursor: Option<String>,
}

impl TaskPage {
    /// A page of at most `limit` of `tasks`, which were read with one more than `limit` to learn
    /// whether an older page follows.
    pub(crate) fn cut(tasks: &mut Vec<Task>, limit: u32) -> TaskPage {
        let more = tasks.len() > limit as usize;
        tasks.truncate(limit as usize);
        TaskPage {
            next_cursor: if more {
                tasks.last().map(|t| t.id.clone())
            } else {
                None
            },
            tasks: std::mem::take(tasks),
        }
    }
}

/// Most tasks one page of a listing holds.
pub const LIST_LIMIT_MAX: u32 = 100;

/// The first millisecond of the `days`-day window (UTC days) that ends with `now`'s day.
pub(crate) fn usage_since(days: u32, now: i64) -> i64 {
    const DAY: i64 = 86_400_000;
    let today = now.div_euclid(DAY) * DAY;
    today - (i64::from(days.max(1)) - 1) * DAY
}

/// An account's use on one day (UTC).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DayUsage {
    /// `YYYY-MM-DD`.
    pub day: String,
    /// Tasks submitted that day.
    pub tasks: i64,
    /// Images made by the tasks submitted that day.
    pub images: i64,
}

/// Tasks waiting or running, by status and mode.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct QueueRow {
    pub status: String,
    pub process_mode: String,
    pub tasks: i64,
    /// When the oldest of them was submitted.
    pub oldest_created_at: i64,
}

/// What a worker gets when it claims a task.
#[derive(Clone, Debug)]
pub struct ClaimedTask {
    /// Where the task is stored: what every fenced change names.
    pub seq: i64,
    /// The public id.
    pub id: String,
    pub account_id: String,
    pub task_type: OpKind,
    /// An `Err` when the stored parameters cannot be read (written by a newer version).
    pub operation: Result<Operation, String>,
    pub parent_id: Option<String>,
    pub prompt: String,
    pub aspect_ratio: AspectRatio,
    pub seed: i64,
    /// The attempt number this claim holds; every later change is fenced by it.
    pub attempts: i64,
    /// What the caller asked for beyond the operation.
    pub extras: Extras,
}

impl ClaimedTask {
    /// What its finished webhook says besides the result.
    pub fn payload_head(&self) -> PayloadHead<'_> {
        PayloadHead {
            task_id: &self.id,
            task_type: self.task_type.as_str(),
            parent_task_id: self.parent_id.as_deref(),
            fields: self
                .operation
                .as_ref()
                .map(Operation::public_fields)
                .unwrap_or_default(),
            metadata: self.extras.metadata.as_ref(),
            actions: Vec::new(),
            webhook_events: self.extras.webhook_events,
            cost: None,
            usage: None,
        }
    }
}

/// How a claimed task ends: its outcome, and the exact body of its webhook, made above the store
/// (image URLs come from the blob store) so that both stores queue the same bytes.
#[derive(Clone, Debug)]
pub struct Ending {
    pub outcome: Outcome,
    pub payload: String,
    /// Whether its webhook is sent; decided once, here, for the worker, cancel and the reaper.
    pub delivers: bool,
    /// What the task used of the backends (none for a cancel or the reaper's failure).
    pub used: Used,
}

/// What a task used of the backends, as its worker measured it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Used {
    /// The backend that took it last.
    pub backend: Option<String>,
    /// The model it ran on.
    pub model: Option<String>,
    /// How long it held backend slots, in milliseconds.
    pub backend_ms: i64,
}

impl Used {
    /// The usage of a task that ended with `outcome` after using this: None for a cancel.
    pub fn usage(&self, outcome: &Outcome) -> Option<TaskUsage> {
        let (images, pixels) = match outcome {
            Outcome::Finished(output) => (output.images(), output.pixels()),
            Outcome::Failed { .. } => (0, 0),
            Outcome::Canceled => return None,
        };
        Some(TaskUsage::new(
            self.backend.clone(),
            self.model.clone(),
            self.backend_ms,
            images,
            pixels,
        ))
    }
}

/// A finished or failed task's usage columns, as both stores write them at its end: backend,
/// model, backend milliseconds, images, pixels.
type UsageColumns<'a> = (Option<&'a str>, Option<&'a str>, i64, i64, i64);

impl Ending {
    pub fn new(outcome: Outcome, head: &PayloadHead<'_>, url: &dyn Fn(&str) -> String) -> Ending {
        let payload = outcome.webhook_payload(head, url);
        let delivers = head.sends(&outcome);
        Ending {
            outcome,
            payload,
            delivers,
            used: Used::default(),
        }
    }

    /// The same ending, with what the task used.
    pub fn using(self, used: Used) -> Ending {
        Ending { used, ..self }
    }

    /// The usage columns written at its end: None for a cancel (canceled tasks have no usage).
    pub(crate) fn usage_columns(&self) -> Option<UsageColumns<'_>> {
        let pixels = match &self.outcome {
            Outcome::Finished(output) => output.pixels(),
            Outcome::Failed { .. } => 0,
            Outcome::Canceled => return None,
        };
        Some((
            self.used.backend.as_deref(),
            self.used.model.as_deref(),
            self.used.backend_ms,
            self.images(),
            pixels,
        ))
    }

    /// Its usage as the record and the payload show it (None for a cancel).
    pub fn usage(&self) -> Option<TaskUsage> {
        self.used.usage(&self.outcome)
    }

    /// How many images the task made (counted into the account's total).
    pub fn images(&self) -> i64 {
        match &self.outcome {
            Outcome::Finished(output) => output.images(),
            Outcome::Failed { .. } | Outcome::Canceled => 0,
        }
    }

    /// The task's percentage once ended: 100 finished, 0 failed, and a canceled task keeps how
    /// far it got (None: unchanged).
    pub fn percentage(&self) -> Option<i64> {
        match self.outcome {
            Outcome::Finished(_) => Some(100),
            Outcome::Failed { .. } => Some(0),
            Outcome::Canceled => None,
        }
    }

    /// Whether the task's credits go back: it made nothing (failed or canceled).
    pub fn refunds(&self) -> bool {
        !matches!(self.outcome, Outcome::Finished(_))
    }

    /// The columns of the task's final state: status, output and error.
    pub fn columns(&self) -> (TaskStatus, OutputColumns, Option<&str>) {
        match &self.outcome {
            Outcome::Finished(output) => (TaskStatus::Finished, output.to_columns(), None),
            Outcome::Failed { error } => (
                TaskStatus::Failed,
                OutputColumns::default(),
                Some(error.as_str()),
            ),
            Outcome::Canceled => (TaskStatus::Canceled, OutputColumns::default(), None),
        }
    }
}

/// The statuses of a task that a worker holds.
pub(crate) const RUNNING: &str = "('starting', 'processing')";
/// The statuses of a task that has not ended: what a cancel may end.
pub(crate) const NOT_ENDED: &str = "('pending', 'starting', 'processing')";

/// Which claim a write of a task's final state must still hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fence {
    /// The worker's claim with this attempt number (the task is `starting` or `processing`).
    Attempt(i64),
    /// None: the caller cancels, whoever holds the task and whether or not it was claimed.
    Cancel,
}

impl Fence {
    /// The SQL condition, after `WHERE seq = ... AND`, with `attempts` compared to `param`.
    pub(crate) fn condition(self, attempts: &str, status: &str, param: &str) -> String {
        match self {
            Fence::Attempt(_) => format!("{attempts} = {param} AND {status} IN {RUNNING}"),
            Fence::Cancel => format!("{param} IS NULL AND {status} IN {NOT_ENDED}"),
        }
    }

    /// The attempt number bound to the condition's parameter.
    pub(crate) fn attempt(self) -> Option<i64> {
        match self {
            Fence::Attempt(attempt) => Some(attempt),
            Fence::Cancel => None,
        }
    }
}

/// The failure recorded for a task whose workers were lost `attempts` times.
pub(crate) fn worker_lost(
    task_id: &str,
    task_type: &str,
    attempts: i64,
    extras: Option<&str>,
) -> Ending {
    let outcome = Outcome::Failed {
        error: format!(
            "worker lost: the task was interrupted {attempts} times and will not be retried"
        ),
    };
    let extras = Extras::from_column(extras);
    let head = PayloadHead {
        task_id,
        task_type,
        metadata: extras.metadata.as_ref(),
        webhook_events: extras.webhook_events,
        ..Default::default()
    };
    // A failure names no image, so no URL is ever made.
    Ending::new(outcome, &head, &|key| key.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listings_filter_is_written_in_plain_words_and_repeats_the_type_indexs_condition() {
        // Written into the query's text, so every value must be a word that needs no quoting.
        let plain = |w: &str| {
            w.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        };
        for status in TaskStatus::ALL {
            assert!(plain(status.as_str()), "{status:?}");
        }
        for kind in OpKind::ALL {
            assert!(plain(kind.as_str()), "{kind:?}");
        }
        let filter = |status, task_type| {
            TaskFilter {
                status,
                task_type,
                ..TaskFilter::default()
            }
            .conditions()
        };
        assert_eq!(filter(None, None), "");
        assert_eq!(
            filter(Some(TaskStatus::Failed), Some(OpKind::Imagine)),
            " AND t.status = 'failed' AND t.task_type = 'imagine'"
        );
        assert_eq!(
            filter(None, Some(OpKind::Upscale1x)),
            " AND t.task_type = 'upscale-1x' AND t.task_type <> 'imagine'"
        );
        let images = TaskFilter {
            images_only: true,
            ..TaskFilter::default()
        };
        assert_eq!(
            images.conditions(),
            " AND t.task_type NOT IN ('describe', 'shorten', 'seed')"
        );
    }

    #[test]
    fn a_search_is_its_runs_of_letters_and_digits_lowercased_each_once() {
        assert_eq!(
            TaskFilter::words_of("  Red sea, red SKY -- \"x\" OR* v2 Ünïcode"),
            ["red", "sea", "sky", "x", "or", "v2", "ünïcode"]
        );
        assert!(TaskFilter::words_of(" --:: \"* ").is_empty());
    }

    #[test]
    fn the_reaper_sends_a_lost_task_s_failure_only_when_its_events_name_it() {
        assert!(worker_lost("t", "imagine", 3, None).delivers);
        let failed = r#"{"webhook_events":["progress","failed"]}"#;
        assert!(worker_lost("t", "imagine", 3, Some(failed)).delivers);
        let completed = r#"{"webhook_events":["completed"]}"#;
        assert!(!worker_lost("t", "imagine", 3, Some(completed)).delivers);
    }
}
