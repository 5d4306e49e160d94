//! For the tests of the reads shared by event streams (`event_memo`, `queue_position`).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// Begin a read through `first` (its read waits on the gate given), leave it unpolled as a
/// stream whose connection is writing to a client that reads nothing is, open the gate,
/// and give what `next` (another caller of the same read) got within 5 s, with `first`.
pub async fn left_unpolled_then_next<T, A, B>(
    first: impl FnOnce(tokio::sync::oneshot::Receiver<()>) -> A,
    next: impl FnOnce() -> B,
) -> (Option<T>, Pin<Box<A>>)
where
    A: Future<Output = T>,
    B: Future<Output = T>,
{
    let (open, gate) = tokio::sync::oneshot::channel();
    let mut first = Box::pin(first(gate));
    assert!(
        futures::poll!(first.as_mut()).is_pending(),
        "the read began"
    );
    open.send(()).unwrap();
    let next = tokio::time::timeout(Duration::from_secs(5), next())
        .await
        .ok();
    (next, first)
}
