//! PostgreSQL's side of the SQL written once (`store::sql`): reads and writes on the pool, and
//! what PostgreSQL does its own way besides the queue and the outbox (an upload's daily limit
//! under a row lock, the listener for other nodes' wake-ups).

use sqlx::{PgExecutor, Postgres};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::PgStore;
use crate::store::sql::{arguments, Durability, Reader, SqlStore, Write};
use crate::store::{upload_day, StoreResult, TaskIds, Upload, UploadAdmitted, Wakeups};

/// Run one statement on `on`; how many rows it changed.
async fn execute<'e>(write: &Write<'_>, on: impl PgExecutor<'e>) -> StoreResult<u64> {
    let args = arguments::<Postgres>(write.args)?;
    let done = sqlx::query_with(write.sql.postgres, args)
        .execute(on)
        .await?;
    Ok(done.rows_affected())
}

impl SqlStore for PgStore {
    const KIND: &'static str = "postgres";

    fn reader(&self) -> Reader<'_> {
        Reader::Postgres(&self.pool)
    }

    fn ids(&self) -> &TaskIds {
        &self.ids
    }

    fn wakeups(&self) -> &Wakeups {
        &self.wakeups
    }

    /// Every commit is durable. A single statement commits on its own, with no `BEGIN`.
    async fn write(&self, _: Durability, statements: &[Write<'_>]) -> StoreResult<Vec<u64>> {
        if let [one] = statements {
            return Ok(vec![execute(one, &self.pool).await?]);
        }
        let mut tx = self.pool.begin().await?;
        let mut changed = Vec::with_capacity(statements.len());
        for write in statements {
            changed.push(execute(write, &mut *tx).await?);
        }
        tx.commit().await?;
        Ok(changed)
    }

    /// A public id leads to its `seq` alone: no task here is older than ids made from `seq`.
    async fn account_task(&self, account_id: &str, task_id: &Uuid) -> StoreResult<Option<i64>> {
        let found: Option<(i64,)> = self
            .reader()
            .optional(
                "SELECT seq FROM tasks WHERE seq = $1 AND account_id = $2",
                &[self.seq_of(task_id).into(), account_id.into()],
            )
            .await?;
        Ok(found.map(|(seq,)| seq))
    }

    /// The day's count moved and checked in one statement, whose row lock orders concurrent
    /// uploads of one account on every node, and the upload inserted in the same transaction.
    async fn admit_upload(&self, upload: &Upload, max: i64) -> StoreResult<UploadAdmitted> {
        let day = upload_day(upload.created_at);
        let mut tx = self.pool.begin().await?;
        // A new day's row is made (0 bytes) so that the update below always finds one to lock.
        sqlx::query(
            "INSERT INTO upload_days (account_id, day, bytes) VALUES ($1, $2, 0)
             ON CONFLICT (account_id, day) DO NOTHING",
        )
        .bind(&upload.account_id)
        .bind(day)
        .execute(&mut *tx)
        .await?;
        let moved: Option<i64> = sqlx::query_scalar(
            "UPDATE upload_days SET bytes = bytes + $3
             WHERE account_id = $1 AND day = $2 AND bytes + $3 <= $4
             RETURNING bytes",
        )
        .bind(&upload.account_id)
        .bind(day)
        .bind(upload.byte_size)
        .bind(max)
        .fetch_optional(&mut *tx)
        .await?;
        if moved.is_none() {
            let used: i64 = sqlx::query_scalar(
                "SELECT bytes FROM upload_days WHERE account_id = $1 AND day = $2",
            )
            .bind(&upload.account_id)
            .bind(day)
            .fetch_one(&mut *tx)
            .await?;
            tx.rollback().await?;
            return Ok(UploadAdmitted::OverDailyLimit {
                used: used.max(0) as u64,
            });
        }
        sqlx::query(
            "INSERT INTO uploads (id, account_id, blob_key, content_type, byte_size, width,
                 height, created_at, expires_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(&upload.id)
        .bind(&upload.account_id)
        .bind(&upload.key)
        .bind(&upload.content_type)
        .bind(upload.byte_size)
        .bind(i64::from(upload.width))
        .bind(i64::from(upload.height))
        .bind(upload.created_at)
        .bind(upload.expires_at)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(UploadAdmitted::Stored)
    }

    async fn background(&self, stop: CancellationToken) {
        self.listen(stop).await
    }

    async fn shut_down(&self) {
        self.submits.close().await;
        self.pool.close().await;
    }
}
