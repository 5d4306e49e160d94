//! Group commit. Writes that many callers make at once (submits, webhook attempt records) queue
//! here and are applied in one transaction, so one commit (one fsync with
//! `sqlite_synchronous = full`) makes a whole batch durable. Each caller still gets its answer
//! only after the transaction holding its write has committed. Batches form by themselves: while
//! one commits, the next writes queue up; nothing waits on a timer.
//!
//! A batch is applied in a few statements however many writes it holds (many rows per
//! statement, see `tasks.rs` and `deliveries.rs`): every statement is a round trip to the
//! connection's thread, and with one per write those round trips, not SQLite, were what limited
//! the batch rate. Each kind of write makes its batch atomic itself, in one transaction.

use futures::future::BoxFuture;
use sqlx::sqlite::{SqliteConnection, SqlitePool};
use tokio::sync::{mpsc, oneshot};

use super::{StoreError, StoreResult};

/// Most writes applied in one transaction.
const MAX_BATCH: usize = 256;
/// Writes waiting for a batch; more wait for room (backpressure on the callers).
const QUEUE: usize = 4096;

/// A kind of write that can share a transaction with others of its kind.
pub(super) trait Write: Sized + Send + Sync + 'static {
    type Output: Send + 'static;
    /// What the batching task keeps from one batch to the next, given when it starts.
    type State: Send + 'static;
    /// Apply every write in `batch` atomically (all or none) on `conn`; one output per write,
    /// in the same order.
    fn apply_all<'c>(
        batch: &'c [Self],
        conn: &'c mut SqliteConnection,
        state: &'c mut Self::State,
    ) -> BoxFuture<'c, StoreResult<Vec<Self::Output>>>;
}

struct Job<W: Write> {
    write: W,
    reply: oneshot::Sender<StoreResult<W::Output>>,
}

/// The queue in front of one batching task. Cheap to clone.
pub(super) struct Batcher<W: Write> {
    queue: mpsc::Sender<Job<W>>,
}

impl<W: Write> Clone for Batcher<W> {
    fn clone(&self) -> Self {
        Batcher {
            queue: self.queue.clone(),
        }
    }
}

impl<W: Write> Batcher<W> {
    /// Start the batching task on `writer`; it stops when every `Batcher` clone is gone.
    pub(super) fn spawn(writer: SqlitePool, state: W::State) -> Self {
        let (queue, jobs) = mpsc::channel(QUEUE);
        tokio::spawn(run(writer, jobs, state));
        Batcher { queue }
    }

    /// Apply `write` in the next batch; returns once that batch has committed.
    pub(super) async fn write(&self, write: W) -> StoreResult<W::Output> {
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Job { write, reply })
            .await
            .map_err(|_| closed())?;
        answer.await.map_err(|_| closed())?
    }
}

async fn run<W: Write>(writer: SqlitePool, mut jobs: mpsc::Receiver<Job<W>>, mut state: W::State) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while jobs.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let (writes, replies): (Vec<W>, Vec<_>) =
            batch.drain(..).map(|job| (job.write, job.reply)).unzip();
        match apply(&writer, &writes, &mut state).await {
            Ok(outputs) => {
                for (reply, output) in replies.into_iter().zip(outputs) {
                    let _ = reply.send(Ok(output));
                }
            }
            Err(e) if writes.len() == 1 => {
                let _ = replies.into_iter().next().expect("one reply").send(Err(e));
            }
            Err(_) => {
                // One bad write must not fail the rest: apply each in its own transaction.
                for (write, reply) in writes.iter().zip(replies) {
                    let result = apply(&writer, std::slice::from_ref(write), &mut state)
                        .await
                        .map(|mut outputs| outputs.pop().expect("one output"));
                    let _ = reply.send(result);
                }
            }
        }
    }
}

async fn apply<W: Write>(
    writer: &SqlitePool,
    writes: &[W],
    state: &mut W::State,
) -> StoreResult<Vec<W::Output>> {
    let mut conn = writer.acquire().await?;
    let outputs = W::apply_all(writes, &mut conn, state).await?;
    debug_assert_eq!(outputs.len(), writes.len());
    Ok(outputs)
}

/// The error a write gets when the batching task has stopped (the store is closing).
fn closed() -> StoreError {
    StoreError::Unavailable(sqlx::Error::PoolClosed)
}

/// One statement per chunk size a batch is cut into (1, 2, 4, ... `MAX_BATCH` rows; index k
/// holds the one for 2^k rows), made by `make` from the number of rows. Prepared once each,
/// they serve batches of any size, and the writer's statement cache holds nine of them.
pub(super) fn statements_per_chunk(make: impl Fn(usize) -> String) -> Vec<String> {
    (0..=MAX_BATCH.ilog2()).map(|k| make(1 << k)).collect()
}

/// `rows` cut into chunks of 2^k rows, largest first (34 rows are 32 + 2), each with its k: the
/// index of its statement in `statements_per_chunk`.
pub(super) fn chunks<T>(rows: &[T]) -> impl Iterator<Item = (usize, &[T])> {
    let mut rest = rows;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let k = rest.len().ilog2() as usize;
        let (chunk, tail) = rest.split_at(1 << k);
        rest = tail;
        Some((k, chunk))
    })
}

/// Rows as one JSON text, for `json_each`: how a list reaches SQLite as one bound value.
pub(super) fn to_json(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).expect("batch rows serialize")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_are_cut_into_power_of_two_chunks_largest_first() {
        let sizes = |n: usize| -> Vec<(usize, usize)> {
            let rows: Vec<usize> = (0..n).collect();
            let cut: Vec<(usize, usize)> = chunks(&rows).map(|(k, c)| (k, c.len())).collect();
            // Every row once, in order.
            let again: Vec<usize> = chunks(&rows).flat_map(|(_, c)| c.to_vec()).collect();
            assert_eq!(again, rows);
            cut
        };
        assert_eq!(sizes(0), []);
        assert_eq!(sizes(1), [(0, 1)]);
        assert_eq!(sizes(7), [(2, 4), (1, 2), (0, 1)]);
        assert_eq!(sizes(34), [(5, 32), (1, 2)]);
        assert_eq!(sizes(MAX_BATCH), [(8, 256)]);
        let statements = statements_per_chunk(|n| n.to_string());
        assert_eq!(statements.len(), 9);
        assert_eq!(statements[5], "32");
    }
}
