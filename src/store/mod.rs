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
//! live once beside the values they are about ([`quota`], [`task`], [`outbox`]). The SQL both
//! databases run alike is written once ([`sql`]), and so are the parts of the interface made only
//! of it; each implementation holds what its database does its own way.

mod account;
mod account_events;
mod batch;
mod chunks;
mod error;
mod events;
mod idempotency;
mod ids;
mod interface;
mod open;
mod operators;
mod outbox;
pub mod postgres;
pub mod queue;
mod quota;
mod rows;
mod sql;
pub mod sqlite;
mod targets;
mod task;
mod uploads;
pub mod usage;

pub use account::{
    Account, ApiKeyInfo, KeyOwner, KeyRow, LedgerRow, LiveKey, NewAccount, KEY_TOUCH_EVERY_MS,
};
pub use account_events::{AccountDelivery, AccountWebhooks};
pub use batch::{BatchAnswer, BatchSubmitted, NewBatch};
pub(crate) use chunks::chunks;
pub use error::{Cause, Failure, StoreError, StoreResult};
pub use events::{Happened, Heard, Listener, TaskEvent, TaskEvents};
pub use idempotency::accepted_body;
pub(crate) use ids::fresh_id_key;
pub use ids::TaskIds;
pub use interface::{
    now_ms, Accounts, KeyPosition, KeysSwept, ModerationLists, Outbox, Retention, SharedStore,
    Store, TaskQueue, Uploads, Views, Wakeups,
};
pub use operators::{AccountChange, AuditEntry, Grant, NewAudit, Operators};
pub use outbox::{
    AttemptRecord, AttemptRow, DeliveryKind, DueDelivery, FailingDestination, Redelivery,
    FAILING_SCAN_MAX,
};
pub use quota::PendingLimits;
pub(crate) use quota::{Quota, Refused};
pub use targets::{WebhookTarget, WebhookTargets};
pub(crate) use task::{usage_since, worker_lost, Fence, RUNNING};
pub use task::{
    ClaimedTask, DayUsage, Ending, ExpiredTask, Idempotency, NewTask, Outcome, QueueRow,
    StoredProgress, Submitted, Task, TaskFilter, TaskPage, Used, WebhookState, LIST_LIMIT_MAX,
};
pub use uploads::{upload_day, Upload, UploadAdmitted};
pub(crate) use uploads::{upload_of, UploadRow, UPLOAD_COLUMNS};

/// URLs in logs and errors lose their password; the rule lives with the other URL handling.
pub use crate::config::redact;
pub use open::{migrate, open};
pub use queue::{AccountLoad, ClaimRules, PlanLoad, Waiting};
