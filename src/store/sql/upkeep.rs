//! Retention ([`Retention`]), callers' uploads ([`Uploads`]) and running tasks' webhook
//! targets ([`WebhookTargets`]), once for both stores.

use async_trait::async_trait;

use super::{sql, Durability, Sql, SqlStore, Write};
use crate::store::rows::IMAGE_KEYS;
use crate::store::{
    upload_of, ExpiredTask, KeyPosition, KeysSwept, Retention, StoreResult, Upload, UploadAdmitted,
    UploadRow, Uploads, WebhookTarget, WebhookTargets, UPLOAD_COLUMNS,
};

/// Read from the `tasks_expiring` index.
const EXPIRED: Sql = sql!(
    "SELECT t.seq, t.finished_at, t.grid_key, ",
    IMAGE_KEYS,
    " FROM tasks t
     WHERE t.finished_at IS NOT NULL AND t.finished_at <= $1 AND t.data_removed_at IS NULL
     ORDER BY t.finished_at, t.seq LIMIT $2"
);
/// The mask of an inpaint is the caller's image; an empty one keeps the parameters readable.
/// The tasks come as a list (JSON text on SQLite, an array on PostgreSQL).
const MARK_REMOVED: Sql = sql!(
    sqlite: "UPDATE tasks SET data_removed_at = $1,
                 params = CASE WHEN task_type = 'inpaint' AND params IS NOT NULL
                               THEN json_set(params, '$.mask', '') ELSE params END
             WHERE seq IN (SELECT value FROM json_each($2)) AND data_removed_at IS NULL",
    postgres: "UPDATE tasks SET data_removed_at = $1,
                   params = CASE WHEN task_type = 'inpaint' AND params IS NOT NULL
                                 THEN jsonb_set(params::jsonb, '{mask}', '\"\"')::text
                                 ELSE params END
               WHERE seq = ANY($2) AND data_removed_at IS NULL",
);

/// A window of the idempotency keys in key order, after (`$1`, `$2`), at most `$3`: read along
/// the primary key, the table's only index (an index by expiry cost every keyed submit a second
/// index write).
const KEYS_AFTER: Sql = sql!(
    "SELECT account_id, idempotency_key, expires_at FROM idempotency_keys
     WHERE (account_id, idempotency_key) > ($1, $2)
     ORDER BY account_id, idempotency_key LIMIT $3"
);
/// The keys of a window, after (`$1`, `$2`) up to (`$3`, `$4`), that have expired at `$5`: still
/// expired when deleted, since a submit may have stored a new answer over one meanwhile.
const FORGET_KEYS: Sql = sql!(
    "DELETE FROM idempotency_keys
     WHERE (account_id, idempotency_key) > ($1, $2)
       AND (account_id, idempotency_key) <= ($3, $4) AND expires_at <= $5"
);

const UPLOAD: Sql = Sql::both(UPLOAD_COLUMNS);
const UPLOAD_BY_KEY: Sql = sql!("SELECT ", UPLOAD, " FROM uploads WHERE blob_key = $1");
const EXPIRED_UPLOADS: Sql = sql!(
    "SELECT ",
    UPLOAD,
    " FROM uploads WHERE expires_at <= $1 ORDER BY expires_at, id LIMIT $2"
);
const DELETE_UPLOADS: Sql = sql!(
    sqlite: "DELETE FROM uploads WHERE id IN (SELECT value FROM json_each($1))",
    postgres: "DELETE FROM uploads WHERE id = ANY($1)",
);
const UPLOADED: Sql =
    sql!("SELECT COALESCE((SELECT bytes FROM upload_days WHERE account_id = $1 AND day = $2), 0)");
/// The daily counts no limit reads any more.
const FORGET_DAYS: Sql = sql!("DELETE FROM upload_days WHERE day < $1");

const RUNNING: Sql = Sql::both(crate::store::RUNNING);
const TARGET: Sql = sql!(
    "SELECT t.webhook_url, t.webhook_secret, a.signing_secret
     FROM tasks t JOIN accounts a ON a.id = t.account_id
     WHERE t.seq = $1 AND t.webhook_url IS NOT NULL AND t.status IN ",
    RUNNING
);

#[async_trait]
impl<S: SqlStore> Retention for S {
    async fn expired_tasks(
        &self,
        finished_before: i64,
        limit: u32,
    ) -> StoreResult<Vec<ExpiredTask>> {
        let args = [finished_before.into(), i64::from(limit).into()];
        let rows: Vec<(i64, i64, Option<String>, Option<String>)> =
            self.reader().all(&EXPIRED, &args).await?;
        Ok(rows
            .into_iter()
            .map(|(seq, at, grid, images)| ExpiredTask::new(seq, at, grid, images.as_deref()))
            .collect())
    }

    async fn mark_data_removed(&self, seqs: &[i64], at: i64) -> StoreResult<u64> {
        if seqs.is_empty() {
            return Ok(0);
        }
        let args = [at.into(), seqs.into()];
        self.execute(Durability::Synced, &MARK_REMOVED, &args).await
    }

    async fn forget_expired_idempotency_keys(
        &self,
        after: &KeyPosition,
        now: i64,
        window: i64,
    ) -> StoreResult<KeysSwept> {
        let (account, key) = after;
        let args = [account.as_str().into(), key.as_str().into(), window.into()];
        let read: Vec<(String, String, i64)> = self.reader().all(&KEYS_AFTER, &args).await?;
        let Some((last_account, last_key, _)) = read.last() else {
            return Ok(KeysSwept {
                forgotten: 0,
                next: None,
            });
        };
        let mut forgotten = 0;
        if read.iter().any(|(_, _, expires)| *expires <= now) {
            let args = [
                account.as_str().into(),
                key.as_str().into(),
                last_account.as_str().into(),
                last_key.as_str().into(),
                now.into(),
            ];
            forgotten = self
                .execute(Durability::Committed, &FORGET_KEYS, &args)
                .await?;
        }
        // A window shorter than asked reached the table's end.
        let next = (read.len() as i64 >= window).then(|| (last_account.clone(), last_key.clone()));
        Ok(KeysSwept { forgotten, next })
    }
}

#[async_trait]
impl<S: SqlStore> Uploads for S {
    async fn insert_upload(
        &self,
        upload: &Upload,
        max_bytes_per_day: u64,
    ) -> StoreResult<UploadAdmitted> {
        let max = i64::try_from(max_bytes_per_day).unwrap_or(i64::MAX);
        self.admit_upload(upload, max).await
    }

    async fn uploaded_bytes(&self, account_id: &str, day: i64) -> StoreResult<i64> {
        let args = [account_id.into(), day.into()];
        let (bytes,): (i64,) = self.reader().one(&UPLOADED, &args).await?;
        Ok(bytes)
    }

    async fn upload_by_key(&self, key: &str) -> StoreResult<Option<Upload>> {
        let row: Option<UploadRow> = self
            .reader()
            .optional(&UPLOAD_BY_KEY, &[key.into()])
            .await?;
        Ok(row.map(upload_of))
    }

    async fn expired_uploads(&self, now: i64, limit: u32) -> StoreResult<Vec<Upload>> {
        let args = [now.into(), i64::from(limit).into()];
        let rows: Vec<UploadRow> = self.reader().all(&EXPIRED_UPLOADS, &args).await?;
        Ok(rows.into_iter().map(upload_of).collect())
    }

    async fn delete_uploads(&self, ids: &[String], day: i64) -> StoreResult<u64> {
        let (uploads, days) = ([ids.into()], [day.into()]);
        let writes = [
            Write::new(&DELETE_UPLOADS, &uploads),
            Write::new(&FORGET_DAYS, &days),
        ];
        Ok(self.write(Durability::Synced, &writes).await?[0])
    }
}

#[async_trait]
impl<S: SqlStore> WebhookTargets for S {
    async fn webhook_target(&self, seq: i64) -> StoreResult<Option<WebhookTarget>> {
        let row: Option<(String, Option<String>, String)> =
            self.reader().optional(&TARGET, &[seq.into()]).await?;
        Ok(
            row.map(|(url, webhook_secret, signing_secret)| WebhookTarget {
                url,
                webhook_secret,
                signing_secret,
            }),
        )
    }
}
