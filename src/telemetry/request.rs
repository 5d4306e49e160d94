//! What a request being served has learned about itself (its id, the account it acts for, the
//! task it is about), for its access line and for any line logged while it runs.
//!
//! Kept in a task-local slot rather than recorded into a `tracing` span: a span per request
//! formats its fields when made and again when each is recorded, and its line repeats them
//! (docs/benchmarks.md has the instruction counts). The HTTP layer opens the slot
//! ([`scope`]); the layers below only note into it, so they need know nothing of HTTP.

use std::cell::RefCell;
use std::future::Future;

use uuid::Uuid;

tokio::task_local! {
    static NOTED: RefCell<Noted>;
}

/// What a request learned about itself.
#[derive(Default)]
pub struct Noted {
    pub request_id: Option<String>,
    pub account: Option<String>,
    pub task_id: Option<Uuid>,
}

/// Run `fut` as the request `request_id`, with an empty slot for what it learns.
pub fn scope<F: Future>(request_id: Option<String>, fut: F) -> impl Future<Output = F::Output> {
    NOTED.scope(
        RefCell::new(Noted {
            request_id,
            ..Noted::default()
        }),
        fut,
    )
}

/// What the request running on this task has noted; `f` is not called outside a request.
pub fn with_noted<R>(f: impl FnOnce(&Noted) -> R) -> Option<R> {
    NOTED.try_with(|n| f(&n.borrow())).ok()
}

/// Note the account the request acts for (once its key was found live).
pub fn note_account(account: &str) {
    let _ = NOTED.try_with(|n| n.borrow_mut().account = Some(account.to_owned()));
}

/// Note the task the request is about.
pub fn note_task(task_id: Uuid) {
    let _ = NOTED.try_with(|n| n.borrow_mut().task_id = Some(task_id));
}

/// The request id, account and task noted so far, for a line logged inside the request; empty
/// strings outside one.
pub fn context() -> (String, String, String) {
    with_noted(|n| {
        (
            n.request_id.clone().unwrap_or_default(),
            n.account.clone().unwrap_or_default(),
            n.task_id.map(|id| id.to_string()).unwrap_or_default(),
        )
    })
    .unwrap_or_default()
}
