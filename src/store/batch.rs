//! Group commit. Writes that many callers make at once (submits, webhook attempt records) queue
//! here and are applied in one transaction, so one commit (one fsync with
//! `sqlite_synchronous = full`) makes a whole batch durable. Each caller still gets its answer
//! only after the transaction holding its write has committed. Batches form by themselves: while
//! one commits, the next writes queue up; nothing waits on a timer.

use futures::future::BoxFuture;
use sqlx::sqlite::{SqliteConnection, SqlitePool};
use tokio::sync::{mpsc, oneshot};

use super::{StoreError, StoreResult};

/// Most writes applied in one transaction.
const MAX_BATCH: usize = 256;
/// Writes waiting for a batch; more wait for room (backpressure on the callers).
const QUEUE: usize = 4096;

/// One write that can share a transaction with others of its kind.
pub(super) trait Write: Send + Sync + 'static {
    type Output: Send + 'static;
    fn apply<'c>(
        &'c self,
        conn: &'c mut SqliteConnection,
    ) -> BoxFuture<'c, StoreResult<Self::Output>>;
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
    pub(super) fn spawn(writer: SqlitePool) -> Self {
        let (queue, jobs) = mpsc::channel(QUEUE);
        tokio::spawn(run(writer, jobs));
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

async fn run<W: Write>(writer: SqlitePool, mut jobs: mpsc::Receiver<Job<W>>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while jobs.recv_many(&mut batch, MAX_BATCH).await > 0 {
        match apply_all(&writer, &batch).await {
            Ok(outputs) => {
                for (job, output) in batch.drain(..).zip(outputs) {
                    let _ = job.reply.send(Ok(output));
                }
            }
            Err(e) if batch.len() == 1 => {
                let job = batch.pop().expect("one job");
                let _ = job.reply.send(Err(e));
            }
            Err(_) => {
                // One bad write must not fail the rest: apply each in its own transaction.
                for job in batch.drain(..) {
                    let result = apply_all(&writer, std::slice::from_ref(&job))
                        .await
                        .map(|mut outputs| outputs.pop().expect("one output"));
                    let _ = job.reply.send(result);
                }
            }
        }
    }
}

async fn apply_all<W: Write>(writer: &SqlitePool, jobs: &[Job<W>]) -> StoreResult<Vec<W::Output>> {
    let mut tx = writer.begin().await?;
    let mut outputs = Vec::with_capacity(jobs.len());
    for job in jobs {
        outputs.push(job.write.apply(&mut tx).await?);
    }
    tx.commit().await?;
    Ok(outputs)
}

/// The error a write gets when the batching task has stopped (the store is closing).
fn closed() -> StoreError {
    StoreError::Unavailable(sqlx::Error::PoolClosed)
}
