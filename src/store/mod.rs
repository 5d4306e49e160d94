//! Durable state: accounts, API keys, tasks (the queue) and the webhook outbox, behind one
//! interface ([`Store`]) with two implementations: SQLite ([`sqlite`], the embedded default, one
//! node) and PostgreSQL ([`postgres`], shared by many nodes). [`open`] picks one by the
//! database URL's scheme.
//!
//! Whatever the database, the same rules hold: a submit checks the key and the account's quota in
//! the transaction that inserts; a claim takes a lease; every change a worker or dispatcher makes
//! after its claim is fenced (by the task's attempt number or the delivery's attempt count), so a
//! stale owner cannot overwrite newer state; a task's webhook delivery is queued in the
//! transaction that writes its final state (the outbox). The rules that can be stated without SQL
//! live in [`model`], once; the SQL lives in each implementation.

mod chunks;
mod error;
mod events;
mod idempotency;
mod ids;
mod interface;
mod model;
mod open;
pub mod postgres;
pub mod queue;
mod rows;
pub mod sqlite;
mod targets;
mod uploads;

pub(crate) use chunks::chunks;
pub use error::{Cause, Failure, StoreError, StoreResult};
pub use events::{Happened, Heard, Listener, TaskEvent, TaskEvents};
pub use idempotency::accepted_body;
pub(crate) use ids::fresh_id_key;
pub use ids::TaskIds;
pub use interface::{
    Accounts, Outbox, Retention, SharedStore, Store, TaskQueue, Uploads, Views, Wakeups,
};
pub use model::{
    now_ms, Account, ApiKeyInfo, AttemptRecord, AttemptRow, ClaimedTask, DayUsage, DueDelivery,
    Ending, ExpiredTask, FailingDestination, Idempotency, KeyOwner, KeyRow, LedgerRow, LiveKey,
    NewAccount, NewTask, Outcome, QueueRow, Redelivery, StoredProgress, Submitted, Task,
    TaskFilter, TaskPage, WebhookState, FAILING_SCAN_MAX, KEY_TOUCH_EVERY_MS, LIST_LIMIT_MAX,
};
pub(crate) use model::{usage_since, worker_lost, Fence, Quota, Refused, RUNNING};
pub use targets::{WebhookTarget, WebhookTargets};
pub use uploads::{upload_day, Upload, UploadAdmitted};
pub(crate) use uploads::{upload_of, UploadRow, UPLOAD_COLUMNS};

/// URLs in logs and errors lose their password; the rule lives with the other URL handling.
pub use crate::config::redact;
pub use open::{migrate, open};
pub use queue::{AccountLoad, ClaimRules, PlanLoad, Waiting};
