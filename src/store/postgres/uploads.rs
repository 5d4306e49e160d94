//! Uploads on PostgreSQL: the day's count moved and checked in one statement (the row's lock
//! orders concurrent uploads of one account, on every node), and the upload inserted in the
//! same transaction.

use async_trait::async_trait;

use super::PgStore;
use crate::store::{
    upload_day, upload_of, StoreResult, Upload, UploadAdmitted, UploadRow, Uploads, UPLOAD_COLUMNS,
};

#[async_trait]
impl Uploads for PgStore {
    async fn insert_upload(
        &self,
        upload: &Upload,
        max_bytes_per_day: u64,
    ) -> StoreResult<UploadAdmitted> {
        let max = i64::try_from(max_bytes_per_day).unwrap_or(i64::MAX);
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

    async fn upload_by_key(&self, key: &str) -> StoreResult<Option<Upload>> {
        let row: Option<UploadRow> = sqlx::query_as(&format!(
            "SELECT {UPLOAD_COLUMNS} FROM uploads WHERE blob_key = $1"
        ))
        .bind(key)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(upload_of))
    }

    async fn expired_uploads(&self, now: i64, limit: u32) -> StoreResult<Vec<Upload>> {
        let rows: Vec<UploadRow> = sqlx::query_as(&format!(
            "SELECT {UPLOAD_COLUMNS} FROM uploads WHERE expires_at <= $1
             ORDER BY expires_at, id LIMIT $2"
        ))
        .bind(now)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(upload_of).collect())
    }

    async fn delete_uploads(&self, ids: &[String], day: i64) -> StoreResult<u64> {
        let deleted = sqlx::query("DELETE FROM uploads WHERE id = ANY($1)")
            .bind(ids)
            .execute(&self.pool)
            .await?;
        sqlx::query("DELETE FROM upload_days WHERE day < $1")
            .bind(day)
            .execute(&self.pool)
            .await?;
        Ok(deleted.rows_affected())
    }
}
