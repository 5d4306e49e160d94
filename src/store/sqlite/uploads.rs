//! Uploads on SQLite: the daily count and the row written through the writer, in its
//! transaction, so that two uploads of one account cannot both pass the day's limit.

use async_trait::async_trait;
use rusqlite::{params, OptionalExtension};

use super::writer::Durability;
use super::{to_json, SqliteStore};
use crate::store::{
    upload_day, upload_of, StoreResult, Upload, UploadAdmitted, UploadRow, Uploads, UPLOAD_COLUMNS,
};

#[async_trait]
impl Uploads for SqliteStore {
    async fn insert_upload(
        &self,
        upload: &Upload,
        max_bytes_per_day: u64,
    ) -> StoreResult<UploadAdmitted> {
        let u = upload.clone();
        let max = i64::try_from(max_bytes_per_day).unwrap_or(i64::MAX);
        self.writer
            .call(Durability::Synced, move |conn| {
                let day = upload_day(u.created_at);
                let used: i64 = conn
                    .prepare_cached(
                        "SELECT bytes FROM upload_days WHERE account_id = ?1 AND day = ?2",
                    )?
                    .query_row(params![u.account_id, day], |r| r.get(0))
                    .optional()?
                    .unwrap_or(0);
                if used.saturating_add(u.byte_size) > max {
                    return Ok(UploadAdmitted::OverDailyLimit {
                        used: used.max(0) as u64,
                    });
                }
                conn.prepare_cached(
                    "INSERT INTO upload_days (account_id, day, bytes) VALUES (?1, ?2, ?3)
                     ON CONFLICT (account_id, day) DO UPDATE SET bytes = bytes + excluded.bytes",
                )?
                .execute(params![u.account_id, day, u.byte_size])?;
                conn.prepare_cached(
                    "INSERT INTO uploads (id, account_id, blob_key, content_type, byte_size,
                         width, height, created_at, expires_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                )?
                .execute(params![
                    u.id,
                    u.account_id,
                    u.key,
                    u.content_type,
                    u.byte_size,
                    u.width,
                    u.height,
                    u.created_at,
                    u.expires_at
                ])?;
                Ok(UploadAdmitted::Stored)
            })
            .await
    }

    async fn upload_by_key(&self, key: &str) -> StoreResult<Option<Upload>> {
        let row: Option<UploadRow> = sqlx::query_as(&format!(
            "SELECT {UPLOAD_COLUMNS} FROM uploads WHERE blob_key = ?1"
        ))
        .bind(key)
        .fetch_optional(&self.reader)
        .await?;
        Ok(row.map(upload_of))
    }

    async fn expired_uploads(&self, now: i64, limit: u32) -> StoreResult<Vec<Upload>> {
        let rows: Vec<UploadRow> = sqlx::query_as(&format!(
            "SELECT {UPLOAD_COLUMNS} FROM uploads WHERE expires_at <= ?1
             ORDER BY expires_at, id LIMIT ?2"
        ))
        .bind(now)
        .bind(i64::from(limit))
        .fetch_all(&self.reader)
        .await?;
        Ok(rows.into_iter().map(upload_of).collect())
    }

    async fn delete_uploads(&self, ids: &[String], day: i64) -> StoreResult<u64> {
        let ids = to_json(&ids);
        self.writer
            .call(Durability::Synced, move |conn| {
                let deleted = conn
                    .prepare_cached(
                        "DELETE FROM uploads WHERE id IN (SELECT value FROM json_each(?1))",
                    )?
                    .execute(params![ids])?;
                conn.prepare_cached("DELETE FROM upload_days WHERE day < ?1")?
                    .execute(params![day])?;
                Ok(deleted as u64)
            })
            .await
    }
}
