//! The channels of PostgreSQL's LISTEN/NOTIFY that wake other nodes: the commits that notify
//! and the listener share these names.

/// The channel a commit that queues a task notifies.
pub(super) const QUEUE_CHANNEL: &str = "easel_queue";
/// The channel a commit that queues or re-arms a webhook delivery notifies.
pub(super) const OUTBOX_CHANNEL: &str = "easel_outbox";
/// A task reached a final state; the payload is its `seq`.
pub(super) const TASK_END_CHANNEL: &str = "easel_task_end";
