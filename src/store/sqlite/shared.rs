//! SQLite's side of the SQL written once (`store::sql`): reads on the pool of readers, writes on
//! the writer's thread in its next transaction, and what SQLite does its own way besides the queue
//! and the outbox (an upload's daily limit, the checkpointer, the prompts' index).

use rusqlite::types::Value;
use rusqlite::{params, params_from_iter, OptionalExtension};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::SqliteStore;
use crate::store::ids::TaskKey;
use crate::store::sql::{json, Arg, Durability, Reader, SqlStore, Write};
use crate::store::{upload_day, StoreResult, TaskIds, Upload, UploadAdmitted, Wakeups};

/// The task with public id `?1` (what it decrypts to, see `TaskKey`) and `?2` (the id as text,
/// for tasks stored before ids came from `seq`), if it is account `?3`'s.
const ACCOUNT_TASK: &str = "SELECT t.seq FROM tasks t
    WHERE ((t.seq = ?1 AND t.id IS NULL) OR t.id = ?2) AND t.account_id = ?3";

/// A value as rusqlite binds it, owned: it goes to the writer's thread. A list goes as JSON text,
/// for `json_each`.
fn value(arg: &Arg<'_>) -> Value {
    match *arg {
        Arg::Int(v) => Value::Integer(v),
        Arg::MaybeInt(v) => v.map_or(Value::Null, Value::Integer),
        Arg::Text(v) => Value::Text(v.to_string()),
        Arg::MaybeText(v) => v.map_or(Value::Null, |v| Value::Text(v.to_string())),
        Arg::Bytes(v) => Value::Blob(v.to_vec()),
        Arg::Bool(v) => Value::Integer(i64::from(v)),
        Arg::Ints(v) => Value::Text(json(&v)),
        Arg::Texts(v) => Value::Text(json(&v)),
    }
}

impl SqlStore for SqliteStore {
    const KIND: &'static str = "sqlite";

    fn reader(&self) -> Reader<'_> {
        Reader::Sqlite(&self.reader)
    }

    fn ids(&self) -> &TaskIds {
        &self.ids
    }

    fn wakeups(&self) -> &Wakeups {
        &self.wakeups
    }

    async fn write(
        &self,
        durability: Durability,
        statements: &[Write<'_>],
    ) -> StoreResult<Vec<u64>> {
        let statements: Vec<(&'static str, Vec<Value>)> = statements
            .iter()
            .map(|w| (w.sql.sqlite, w.args.iter().map(value).collect()))
            .collect();
        self.writer
            .call(durability, move |conn| {
                let mut changed = Vec::with_capacity(statements.len());
                for (sql, values) in &statements {
                    let n = conn
                        .prepare_cached(sql)?
                        .execute(params_from_iter(values))?;
                    changed.push(n as u64);
                }
                Ok(changed)
            })
            .await
    }

    async fn account_task(&self, account_id: &str, task_id: &Uuid) -> StoreResult<Option<i64>> {
        let TaskKey { seq, legacy } = self.ids.key(task_id);
        let args = [seq.into(), legacy.as_str().into(), account_id.into()];
        let found: Option<(i64,)> = self.reader().optional(ACCOUNT_TASK, &args).await?;
        Ok(found.map(|(seq,)| seq))
    }

    /// The day's count read and moved in the writer's transaction: two uploads of one account
    /// cannot both pass the day's limit.
    async fn admit_upload(&self, upload: &Upload, max: i64) -> StoreResult<UploadAdmitted> {
        let u = upload.clone();
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

    async fn background(&self, stop: CancellationToken) {
        tokio::join!(self.run_checkpointer(stop.clone()), self.run_indexer(stop));
    }

    async fn search_caught_up(&self) -> StoreResult<()> {
        self.index_stored_tasks().await.map(|_| ())
    }

    /// Close the readers, then the writer once it has applied what was queued.
    async fn shut_down(&self) {
        self.reader.close().await;
        self.writer.close().await;
    }
}
