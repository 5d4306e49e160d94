//! The store's interface, in the roles that use it: the queue, the outbox, accounts, the views
//! and retention, and the wake-ups a store gives its idle workers and dispatchers.

use std::sync::Arc;

use crate::domain::moderation::TermList;
use async_trait::async_trait;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::account::{Account, ApiKeyInfo, KeyOwner, KeyRow, LedgerRow, LiveKey, NewAccount};
use super::batch::{BatchSubmitted, NewBatch};
use super::error::{Failure, StoreError, StoreResult};
use super::events::TaskEvent;
use super::events::TaskEvents;
use super::operators::Operators;
use super::outbox::{AttemptRecord, AttemptRow, DueDelivery, FailingDestination, Redelivery};
use super::queue::{AccountLoad, ClaimRules, PlanLoad, Waiting};
use super::quota::PendingLimits;
use super::targets::WebhookTargets;
use super::task::{
    ClaimedTask, DayUsage, Ending, ExpiredTask, NewTask, QueueRow, StoredProgress, Submitted, Task,
    TaskFilter, TaskPage,
};
use super::uploads::{Upload, UploadAdmitted};
use super::usage::{UsageQuery, UsageRow};

/// The queue: submit, read, claim with a lease, heartbeat, end fenced by attempt.
#[async_trait]
pub trait TaskQueue: Send + Sync {
    /// Store a new task submitted with the key hashed `key_hash`, unless that key is no longer
    /// live or the account already has as many tasks queued or running as `limits` give its
    /// plan; both are checked in the transaction that inserts. Durable when it returns
    /// `Queued`, and idle workers on every node are woken.
    async fn submit(
        &self,
        task: &NewTask,
        key_hash: &[u8; 32],
        limits: &PendingLimits,
    ) -> StoreResult<Submitted>;

    /// Store every task of `batch` for the key hashed `key_hash` in one transaction, or none:
    /// each checked as [`TaskQueue::submit`] checks one (the group's own earlier tasks count
    /// for the quota and the credits), the batch's idempotency key decided once. Durable when it
    /// returns `Queued`, and idle workers on every node are woken.
    async fn submit_batch(
        &self,
        batch: &NewBatch,
        key_hash: &[u8; 32],
        limits: &PendingLimits,
    ) -> StoreResult<BatchSubmitted>;

    /// The task `task_id` if it is the key's account's, checked in one statement with the key
    /// itself: None when the key is not live, else the key and the task if found.
    async fn task_for_key(
        &self,
        key_hash: &[u8; 32],
        task_id: &Uuid,
    ) -> StoreResult<Option<(LiveKey, Option<Task>)>>;

    /// The key's account's tasks among `ids` (in no particular order), checked in one statement
    /// with the key itself: None when the key is not live.
    async fn tasks_for_key(
        &self,
        key_hash: &[u8; 32],
        ids: &[Uuid],
    ) -> StoreResult<Option<(LiveKey, Vec<Task>)>>;

    /// One of the account's tasks, or None when it does not exist or belongs to someone else.
    async fn task_for_account(&self, account_id: &str, task_id: &Uuid)
        -> StoreResult<Option<Task>>;

    /// The tasks among `ids` (in no particular order), whatever their account: for easel's own
    /// upkeep (the sweep of images no task refers to), never for a caller.
    async fn tasks_by_id(&self, ids: &[Uuid]) -> StoreResult<Vec<Task>>;

    /// Claim the next pending task with a lease of `lease_ms`, in one statement: turbo before
    /// fast before relax, and within a mode by turn, so that accounts alternate
    /// ([`crate::store::queue`]); `rules` may ask for one mode first and pass over the tasks of
    /// accounts at their running limit.
    async fn claim_next(
        &self,
        owner: &str,
        lease_ms: i64,
        rules: &ClaimRules,
    ) -> StoreResult<Option<ClaimedTask>>;

    /// [`TaskQueue::claim_next`] with no running limit and no mode first.
    async fn claim_task(&self, owner: &str, lease_ms: i64) -> StoreResult<Option<ClaimedTask>> {
        self.claim_next(owner, lease_ms, &ClaimRules::default())
            .await
    }

    /// Move a claimed task to `processing` with the `percentage` its job has reached (kept if
    /// the row's is higher), in one write: its new version, or None when the claim is no longer
    /// ours. The worker's live progress carries that version, so that a stream which has said
    /// the processing state does not drop it as older.
    async fn mark_processing(
        &self,
        seq: i64,
        attempt: i64,
        lease_ms: i64,
        percentage: i64,
    ) -> StoreResult<Option<i64>>;

    /// Renew the lease; with `progress`, also store it, which gives the task a new version and
    /// tells its listeners (on every node). None when the claim is no longer ours, else the
    /// task's version.
    async fn heartbeat(
        &self,
        seq: i64,
        attempt: i64,
        lease_ms: i64,
        progress: Option<&StoredProgress>,
    ) -> StoreResult<Option<i64>>;

    /// The highest version given so far (see `store::events`).
    async fn latest_version(&self) -> StoreResult<i64>;

    /// How far before a `Last-Event-ID` a resumed stream reads again: versions are taken in
    /// order but may commit out of order when many writers share the store.
    fn version_overlap(&self) -> i64 {
        0
    }

    /// Tell the task's listeners on every node of progress not stored yet (its worker's live
    /// reports). Nothing is written.
    async fn publish_progress(&self, event: TaskEvent) -> StoreResult<()>;

    /// Record the final state and, in the same transaction, queue the webhook delivery (when
    /// the task has a webhook). False, and nothing written, when the claim is no longer ours.
    async fn complete_task(&self, seq: i64, attempt: i64, ending: &Ending) -> StoreResult<bool>;

    /// Cancel the task stored at `seq` unless it has ended: it becomes `canceled` (`ending`) at
    /// once, whether it is queued or a worker holds it (that worker's later writes are fenced
    /// out, and its next heartbeat tells it to stop), its credits go back and its webhook is
    /// queued, in one transaction. False, and nothing written, when it had ended already.
    async fn cancel_task(&self, seq: i64, ending: &Ending) -> StoreResult<bool>;

    /// Give a claimed task back to the queue without counting the attempt (graceful shutdown).
    async fn release_task(&self, seq: i64, attempt: i64) -> StoreResult<bool>;

    /// Tasks whose lease ran out go back to the queue, or fail once they used `max_attempts`.
    /// Returns how many were requeued and the ids of those that failed.
    async fn recover_expired(&self, max_attempts: u32) -> StoreResult<(u64, Vec<String>)>;
}

/// The webhook outbox: claim due deliveries with a lease, record attempts fenced by the attempt
/// count seen at claim, redeliver.
#[async_trait]
pub trait Outbox: Send + Sync {
    /// Claim up to `limit` due deliveries for `lease_ms`. A delivery whose dispatcher died is
    /// claimed again once its lease runs out, so nothing is lost (it may be sent twice).
    async fn claim_due_deliveries(
        &self,
        limit: i64,
        lease_ms: i64,
    ) -> StoreResult<Vec<DueDelivery>>;

    /// Record an attempt and the delivery's next state, fenced by `claim`: its attempt count and
    /// its lease. False when the delivery has moved on since (claimed again, recorded, or
    /// queued afresh by a redelivery, which leaves the attempt count as a claim found it).
    async fn record_attempt(
        &self,
        claim: &DueDelivery,
        record: &AttemptRecord,
    ) -> StoreResult<bool>;

    /// Hand back claimed deliveries that were not attempted, so that they are due again at once
    /// instead of when their lease runs out. A delivery claimed again since is left alone.
    /// Returns how many were handed back.
    async fn release_deliveries(&self, claimed: &[DueDelivery]) -> StoreResult<u64>;

    /// When the next delivery that is not in flight becomes due.
    async fn next_delivery_due(&self) -> StoreResult<Option<i64>>;

    /// Start a fresh delivery schedule for a task's result (see [`Redelivery::decide`]).
    async fn redeliver(&self, account_id: &str, task_id: &Uuid) -> StoreResult<Redelivery>;
}

/// Accounts and their API keys (stored only as hashes), sign-in sessions (stored only as
/// hashes) and the counts under sign-in and sign-up limits. Emails are compared without regard to ASCII case.
#[async_trait]
pub trait Accounts: Send + Sync {
    async fn account_count(&self) -> StoreResult<i64>;
    /// Create an account; None (and nothing changed) when the email (in any case) has one
    /// already. Of nodes racing to create the same account, one gets it. A starting balance is
    /// written as one `signup` ledger row in the same transaction.
    async fn create_user(&self, new: &NewAccount) -> StoreResult<Option<Account>>;
    /// Create an account with this email and signing secret, no password, unlimited credits;
    /// None (and nothing changed) when the email has one already.
    async fn create_account(
        &self,
        email: &str,
        signing_secret: &str,
    ) -> StoreResult<Option<Account>> {
        self.create_user(&NewAccount {
            email: email.to_string(),
            password_hash: None,
            signing_secret: signing_secret.to_string(),
            admin: false,
            credits: None,
        })
        .await
    }
    /// The account with this email, created (with the given signing secret) if it does not exist.
    async fn ensure_account(&self, email: &str, signing_secret: &str) -> StoreResult<Account> {
        if let Some(created) = self.create_account(email, signing_secret).await? {
            return Ok(created);
        }
        self.account_by_email(email).await?.ok_or_else(|| {
            StoreError::Other(Arc::new(Failure(format!("account {email} vanished"))))
        })
    }
    /// The oldest account, if any.
    async fn first_account(&self) -> StoreResult<Option<Account>>;
    /// The account with this email, in any case.
    async fn account_by_email(&self, email: &str) -> StoreResult<Option<Account>>;
    async fn account_by_id(&self, account_id: &str) -> StoreResult<Option<Account>>;
    /// The account with this email and its password hash (None when it has no password), for
    /// signing in. Disabled accounts are returned too: the caller refuses them after checking
    /// the password, so that a wrong password reveals nothing.
    async fn account_for_sign_in(
        &self,
        email: &str,
    ) -> StoreResult<Option<(Account, Option<String>)>>;
    /// Every account, oldest first (operators).
    async fn list_accounts(&self) -> StoreResult<Vec<Account>>;
    /// Replace the password hash, and sign the account out everywhere (its sessions are
    /// deleted in the same transaction). False when there is no such account.
    async fn set_password(&self, account_id: &str, password_hash: &str) -> StoreResult<bool>;
    async fn set_admin(&self, account_id: &str, admin: bool) -> StoreResult<bool>;
    /// Disable (or enable again) an account. Disabling deletes its sessions in the same
    /// transaction; its keys are refused from the next request on, on every node.
    async fn set_disabled(&self, account_id: &str, disabled: bool) -> StoreResult<bool>;
    /// Set the balance (None: unlimited). Going to or staying at a balance writes one `admin`
    /// ledger row of the difference between the ledger's sum and the new balance, so the
    /// ledger still sums to the balance. False when there is no such account.
    async fn set_credits(&self, account_id: &str, credits: Option<i64>) -> StoreResult<bool>;
    /// The account's latest ledger rows, newest first.
    async fn credit_ledger(&self, account_id: &str, limit: i64) -> StoreResult<Vec<LedgerRow>>;
    async fn set_signing_secret(&self, account_id: &str, secret: &str) -> StoreResult<()>;

    /// Store a new key's hash. Returns the key's id.
    async fn insert_api_key(
        &self,
        account_id: &str,
        name: &str,
        prefix: &str,
        key_hash: &[u8],
    ) -> StoreResult<String>;
    /// Store a key's hash unless a key has it already (then nothing changes).
    async fn ensure_api_key(
        &self,
        account_id: &str,
        name: &str,
        prefix: &str,
        key_hash: &[u8],
    ) -> StoreResult<()>;
    /// The owner of a live (not revoked) key with this hash, whose account is not disabled.
    async fn key_owner(&self, key_hash: &[u8]) -> StoreResult<Option<KeyOwner>>;
    async fn touch_api_key(&self, key_id: &str, at: i64) -> StoreResult<()>;
    /// Every key of every account (`easel keys list`).
    async fn list_api_keys(&self) -> StoreResult<Vec<ApiKeyInfo>>;
    /// The account's keys, revoked ones included, newest first.
    async fn account_keys(&self, account_id: &str) -> StoreResult<Vec<KeyRow>>;
    /// Revoke a key by id: refused from the next request on, on every node (keys are checked
    /// against the store on every request, never cached). Returns whether a live key was revoked.
    async fn revoke_api_key(&self, id: &str) -> StoreResult<bool>;
    /// Revoke one of the account's keys; false when it is not the account's or not live.
    async fn revoke_account_key(&self, account_id: &str, key_id: &str) -> StoreResult<bool>;

    /// Store a session whose token hashes (SHA-256) to `token_hash`.
    async fn create_session(
        &self,
        account_id: &str,
        token_hash: &[u8; 32],
        expires_at: i64,
    ) -> StoreResult<()>;
    /// The account of a session that has not expired by `now`, unless the account is disabled.
    async fn session_account(
        &self,
        token_hash: &[u8; 32],
        now: i64,
    ) -> StoreResult<Option<Account>>;
    /// Sign out: forget the session. Whether there was one.
    async fn delete_session(&self, token_hash: &[u8; 32]) -> StoreResult<bool>;
    /// Forget every session of the account; how many there were.
    async fn delete_account_sessions(&self, account_id: &str) -> StoreResult<u64>;
    /// Forget the sessions that expired before `now`; how many there were.
    async fn delete_expired_sessions(&self, now: i64) -> StoreResult<u64>;

    /// Events recorded for `scope` at or after `since`: failed sign-ins (scopes such as
    /// `addr 192.0.2.1` or `email a@example.com`) and sign-ups (`signup 192.0.2.1`); the
    /// policy and the scopes are `accounts::throttle`'s. They live in the `sign_in_failures`
    /// table, named for what it held first.
    async fn throttle_events(&self, scope: &str, since: i64) -> StoreResult<i64>;
    /// Record one event for each scope at `at`, and forget those of any scope older than
    /// `forget_before` (the table stays as small as the longest window).
    async fn record_throttle_events(
        &self,
        scopes: &[String],
        at: i64,
        forget_before: i64,
    ) -> StoreResult<()>;
    /// Forget the events of `scope` and of every scope under it: those that start with `scope`
    /// and a space (`email a@x.com` takes `email a@x.com addr 192.0.2.1` with it, not
    /// `email a@x.com.au`).
    async fn clear_throttle_events(&self, scope: &str) -> StoreResult<()>;
}

/// What the dashboard and operators read: an account's tasks and their delivery attempts, usage,
/// and the state of the service (the queue among it). Nothing here changes state.
#[async_trait]
pub trait Views: Send + Sync {
    /// One page of the account's tasks, newest first, that pass `filter`: those older than the
    /// task `cursor` (a public id from an earlier page's `next_cursor`), at most `limit`
    /// (1..=[`LIST_LIMIT_MAX`](super::LIST_LIMIT_MAX)). None when the cursor is not one of the
    /// account's tasks.
    async fn list_tasks(
        &self,
        account_id: &str,
        filter: &TaskFilter,
        cursor: Option<&Uuid>,
        limit: u32,
    ) -> StoreResult<Option<TaskPage>>;
    /// The account's tasks at version `from` or later, lowest version first, at most `limit`
    /// (1..=[`LIST_LIMIT_MAX`](super::LIST_LIMIT_MAX)): what changed since a stream's
    /// `Last-Event-ID`.
    async fn account_changes(
        &self,
        account_id: &str,
        from: i64,
        limit: u32,
    ) -> StoreResult<Vec<Task>>;
    /// The account's tasks made from the task stored at `parent_seq`, oldest first.
    async fn task_children(&self, account_id: &str, parent_seq: i64) -> StoreResult<Vec<Task>>;
    /// Tasks submitted and images they made, per UTC day, over the `days` days up to `now`
    /// (days without tasks are left out), oldest first.
    async fn usage_by_day(
        &self,
        account_id: &str,
        days: u32,
        now: i64,
    ) -> StoreResult<Vec<DayUsage>>;
    /// Ended tasks' usage over a range of days, grouped (see `store::usage`): read from the
    /// rollup, a few rows per day, never from the tasks.
    async fn usage(&self, query: &UsageQuery) -> StoreResult<Vec<UsageRow>>;
    /// Tasks queued or running, by status and mode, with the oldest's submit time.
    async fn queue_by_status_and_mode(&self) -> StoreResult<Vec<QueueRow>>;

    /// The accounts with the most tasks queued or running (at most `limit`), most first.
    async fn busiest_accounts(&self, limit: u32) -> StoreResult<Vec<AccountLoad>>;

    /// The tasks queued and running, by the accounts' plan.
    async fn load_by_plan(&self) -> StoreResult<Vec<PlanLoad>>;
    /// Webhook destinations (by host) whose attempts at or after `since` failed, most failures
    /// first; only the latest [`FAILING_SCAN_MAX`](super::FAILING_SCAN_MAX) attempts are looked
    /// at.
    async fn failing_destinations(&self, since: i64) -> StoreResult<Vec<FailingDestination>>;

    /// The tasks waiting to run, in the order they will run: those claimed by a worker and
    /// waiting for a backend (`starting`), then the queue in claim order, each marked when its
    /// account is at its running limit under `rules`; at most `limit`.
    async fn queue_order(&self, limit: u32, rules: &ClaimRules) -> StoreResult<Vec<Waiting>>;

    /// Counts of tasks by status.
    async fn task_counts(&self) -> StoreResult<Vec<(String, i64)>>;

    /// Every recorded attempt to deliver the task's result, oldest first; None when the task is
    /// not the account's.
    async fn delivery_attempts(
        &self,
        account_id: &str,
        task_id: &Uuid,
    ) -> StoreResult<Option<Vec<AttemptRow>>>;
}

/// Retention: the final tasks whose data has expired, and marking their data removed once the
/// blob store has deleted their files (see `worker::retention`); idempotency keys whose answers
/// expired.
#[async_trait]
pub trait Retention: Send + Sync {
    /// Up to `limit` final tasks that finished at or before `finished_before` and whose data is
    /// not marked removed, oldest first (by when they finished).
    async fn expired_tasks(
        &self,
        finished_before: i64,
        limit: u32,
    ) -> StoreResult<Vec<ExpiredTask>>;

    /// Mark the data of the tasks stored at `seqs` removed at `at`, in one durable write, and
    /// strip what the task's parameters held of the caller's images (an inpaint's mask), keeping
    /// them readable. Tasks already marked are left as they are. Returns how many were marked.
    async fn mark_data_removed(&self, seqs: &[i64], at: i64) -> StoreResult<u64>;

    /// Read the next `window` idempotency keys in key order after `after` (`("", "")` before
    /// the first) and forget those whose answers expired at or before `now`. A sweep walks the
    /// whole table a window at a time; lookups ignore expired keys anyway, so this only keeps the
    /// table as small as the keys' time to live.
    async fn forget_expired_idempotency_keys(
        &self,
        after: &KeyPosition,
        now: i64,
        window: i64,
    ) -> StoreResult<KeysSwept>;
}

/// Where a sweep of idempotency keys stands: the (account id, idempotency key) last read.
pub type KeyPosition = (String, String);

/// One window of a sweep of idempotency keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeysSwept {
    /// How many expired keys the window held, now forgotten.
    pub forgotten: u64,
    /// Where the next window starts; None once the window reached the end of the table.
    pub next: Option<KeyPosition>,
}

/// Callers' uploads: recorded under the account's daily byte limit, found by blob key, removed
/// once expired (see `worker::retention`).
#[async_trait]
pub trait Uploads: Send + Sync {
    /// Record `upload` unless the account's bytes for the upload's UTC day would pass
    /// `max_bytes_per_day`; decided in the transaction that inserts, so that concurrent uploads
    /// cannot both pass. Durable when it returns.
    async fn insert_upload(
        &self,
        upload: &Upload,
        max_bytes_per_day: u64,
    ) -> StoreResult<UploadAdmitted>;

    /// The bytes the account has uploaded on UTC day `day` (see [`upload_day`]): read before an
    /// upload is decoded, so that an account past its day is refused without one;
    /// `insert_upload` decides.
    ///
    /// [`upload_day`]: crate::store::upload_day
    async fn uploaded_bytes(&self, account_id: &str, day: i64) -> StoreResult<i64>;

    /// The upload stored at blob key `key`, whoever's it is.
    async fn upload_by_key(&self, key: &str) -> StoreResult<Option<Upload>>;

    /// Up to `limit` uploads that expired at or before `now`, oldest first.
    async fn expired_uploads(&self, now: i64, limit: u32) -> StoreResult<Vec<Upload>>;

    /// Forget the uploads `ids` (their files deleted already), and the daily counts of days
    /// before `day`, which no limit reads any more. How many uploads were forgotten.
    async fn delete_uploads(&self, ids: &[String], day: i64) -> StoreResult<u64>;
}

/// The moderation term lists (see `tasks::moderation`), read by every node and written by the
/// operator's commands.
#[async_trait]
pub trait ModerationLists: Send + Sync {
    /// Every list, by name, with when it was last written (ms).
    async fn moderation_lists(&self) -> StoreResult<Vec<(TermList, i64)>>;

    /// The terms of the list `name`, if there is one.
    async fn moderation_list(&self, name: &str) -> StoreResult<Option<Vec<String>>>;

    /// Write `list` whole, replacing a list of its name.
    async fn put_moderation_list(&self, list: &TermList, at: i64) -> StoreResult<()>;

    /// Remove the list `name`; whether there was one.
    async fn delete_moderation_list(&self, name: &str) -> StoreResult<bool>;

    /// A value that changes whenever a list is written or removed, cheap to read: nodes poll it.
    async fn moderation_version(&self) -> StoreResult<(i64, i64)>;
}

/// Everything easel needs from its store. The API, the workers and the dispatcher hold an
/// `Arc<dyn Store>` and never learn which database is behind it.
#[async_trait]
pub trait Store:
    TaskQueue
    + Outbox
    + Accounts
    + Views
    + Retention
    + Uploads
    + WebhookTargets
    + Operators
    + ModerationLists
    + super::AccountWebhooks
{
    /// `sqlite` or `postgres`, for logs.
    fn kind(&self) -> &'static str;

    /// The public id of the task stored at `seq`.
    fn task_id(&self, seq: i64) -> Uuid;

    /// Woken when work may be waiting: a task queued or requeued, a delivery queued or due
    /// again, on this node or (PostgreSQL) on any node; and the watchers of a task when it ends.
    fn wakeups(&self) -> &Wakeups;

    /// Whether the database answers a trivial query.
    async fn ping(&self) -> StoreResult<()>;

    /// The store's own background work until `stop`: SQLite's checkpoints, PostgreSQL's
    /// listener for other nodes' wake-ups.
    async fn run_background(&self, stop: CancellationToken);

    /// Finish what is queued and close the connections.
    async fn close(&self);
}

/// The wake-ups of idle workers and dispatchers. Polling stays the fallback: a wake-up that is
/// lost (a listener reconnecting) only delays work until the next poll.
#[derive(Default)]
pub struct Wakeups {
    /// A task was queued or requeued.
    pub queue: Notify,
    /// A webhook delivery was queued or made due again. Shared with SQLite's writer, whose
    /// submits queue account events.
    pub outbox: Arc<Notify>,
    /// What happens to tasks (on any node, with PostgreSQL), for whoever listens.
    pub events: Arc<TaskEvents>,
}

impl Wakeups {
    /// After a sweep of expired leases: every idle worker for the tasks requeued (they may be
    /// many), the dispatcher when a task that failed for good queued its webhook.
    pub(crate) fn after_recovery(&self, requeued: u64, delivery_queued: bool) {
        if requeued > 0 {
            self.queue.notify_waiters();
        }
        if delivery_queued {
            self.outbox.notify_one();
        }
    }
}

/// The handle every role shares.
pub type SharedStore = Arc<dyn Store>;

/// Current time as Unix milliseconds, the unit of every stored time.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}
