//! Group commit for submits. Concurrent `insert_task` calls queue here and are written in one
//! transaction, so one commit (one fsync with `sqlite_synchronous = full`) makes a whole batch
//! durable. Each caller still returns only after the transaction holding its task has committed.
//! Batches form by themselves: while one commits, the next requests queue up; nothing waits on a
//! timer.

use sqlx::sqlite::{SqliteConnection, SqlitePool};
use tokio::sync::{mpsc, oneshot};

use super::tasks::NewTask;
use super::{now_ms, StoreError, StoreResult};

/// Most tasks written in one transaction.
const MAX_BATCH: usize = 256;
/// Submits waiting for a batch; more wait for room (backpressure on the API).
const QUEUE: usize = 4096;

pub(super) struct SubmitJob {
    pub task: NewTask,
    pub max_active: u32,
    pub reply: oneshot::Sender<StoreResult<bool>>,
}

/// Start the batcher on `writer`; it stops when every sender is gone.
pub(super) fn spawn(writer: SqlitePool) -> mpsc::Sender<SubmitJob> {
    let (tx, rx) = mpsc::channel(QUEUE);
    tokio::spawn(run(writer, rx));
    tx
}

async fn run(writer: SqlitePool, mut rx: mpsc::Receiver<SubmitJob>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
        match insert_all(&writer, &batch).await {
            Ok(stored) => {
                for (job, stored) in batch.drain(..).zip(stored) {
                    let _ = job.reply.send(Ok(stored));
                }
            }
            Err(e) if batch.len() == 1 => {
                let job = batch.pop().expect("one job");
                let _ = job.reply.send(Err(e));
            }
            Err(_) => {
                // One bad row must not fail the rest: write each in its own transaction.
                for job in batch.drain(..) {
                    let result = insert_all(&writer, std::slice::from_ref(&job))
                        .await
                        .map(|stored| stored[0]);
                    let _ = job.reply.send(result);
                }
            }
        }
    }
}

async fn insert_all(writer: &SqlitePool, jobs: &[SubmitJob]) -> StoreResult<Vec<bool>> {
    let mut tx = writer.begin().await?;
    let mut stored = Vec::with_capacity(jobs.len());
    for job in jobs {
        stored.push(insert_one(&mut tx, &job.task, job.max_active).await?);
    }
    tx.commit().await?;
    Ok(stored)
}

/// Insert unless the account already has `max_active` tasks queued or running.
async fn insert_one(
    conn: &mut SqliteConnection,
    task: &NewTask,
    max_active: u32,
) -> StoreResult<bool> {
    let done = sqlx::query(
        "INSERT INTO tasks (id, account_id, task_type, status, priority, prompt, aspect_ratio,
             process_mode, seed, created_at, webhook_url, webhook_secret)
         SELECT ?, ?, ?, 'pending', ?, ?, ?, ?, ?, ?, ?, ?
         WHERE (SELECT active_tasks FROM accounts WHERE id = ?) < ?",
    )
    .bind(task.id.to_string())
    .bind(&task.account_id)
    .bind(task.task_type)
    .bind(task.priority)
    .bind(&task.prompt)
    .bind(&task.aspect_ratio)
    .bind(task.process_mode)
    .bind(task.seed)
    .bind(now_ms())
    .bind(&task.webhook_url)
    .bind(&task.webhook_secret)
    .bind(&task.account_id)
    .bind(i64::from(max_active))
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// The error a submit gets when the batcher has stopped (the store is closing).
pub(super) fn closed() -> StoreError {
    StoreError::Unavailable(sqlx::Error::PoolClosed)
}
