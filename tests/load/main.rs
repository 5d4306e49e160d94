//! The tests that put whole processes under load, as a test binary apart from `tests/it`: easel
//! SIGKILLed while thousands of tasks go in (`crash`), three nodes on one PostgreSQL and bucket
//! losing one of them (`multinode`), and a private PostgreSQL cluster stopped under load
//! (`pg_restart`). Beside the main suite their load would crowd the timing bounds there (the
//! retry schedule of `reliability`, leases, progress pacing); cargo runs test binaries one after
//! another, so a binary of their own keeps them apart, as one kept `crash` apart before.
//!
//! The heaviest of them take turns ([`one_at_a_time`]): each starts several easel processes
//! (or a PostgreSQL cluster) and thousands of tasks, and on a small machine two at once would
//! time each other out. The lighter multinode tests run beside them, as they ran beside the
//! three-node test before.

#[path = "../common/mod.rs"]
mod common;

mod crash;
mod multinode;
mod pg_restart;

/// Held for the whole of a test that must not run beside another heavy one.
pub async fn one_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    HEAVY.lock().await
}
