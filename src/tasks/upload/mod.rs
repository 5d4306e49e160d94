//! Images from the caller: `POST /api/v1/upload`, and `data:` URLs in image fields, both checked
//! by their content and kept as uploads (a file in the blob store under a key that names the
//! account, and a row) for `upload_retention`, counted against the account's bytes for the day.
//! The dashboard's playground uploads through the same code.

mod admit;
mod check;
pub mod inline;

use bytes::Bytes;
use rand::RngCore;
use serde::Serialize;
use utoipa::ToSchema;
use uuid::Uuid;

use super::Tasks;
use crate::domain::rfc3339;
use crate::refusal::ApiError;
use crate::store::{now_ms, Upload, UploadAdmitted};

pub use admit::admit;
pub use check::{check_image, Checked};

use crate::blobs::UPLOAD_FOLDER;

/// Check `bytes` (what the caller gave as `field`) and keep them as one of the account's uploads.
/// Nothing is stored when the image is refused or the account's day is spent.
pub async fn store_upload(
    tasks: &Tasks,
    account_id: &str,
    field: &str,
    bytes: Bytes,
) -> Result<Upload, ApiError> {
    let _turn = admit(tasks, account_id, field, bytes.len() as u64).await?;
    let checked = check_image(tasks, field, bytes.clone()).await?;
    keep_upload(tasks, account_id, field, bytes, checked).await
}

/// Keep `bytes`, checked to be `checked`, as one of the account's uploads: the row (counted
/// against the day's limit), then the file.
pub async fn keep_upload(
    tasks: &Tasks,
    account_id: &str,
    field: &str,
    bytes: Bytes,
    checked: Checked,
) -> Result<Upload, ApiError> {
    let mut token = [0u8; 16];
    rand::rngs::OsRng.fill_bytes(&mut token);
    let now = now_ms();
    let keep =
        i64::try_from(tasks.config.retention.upload_retention.as_millis()).unwrap_or(i64::MAX);
    let upload = Upload {
        id: Uuid::new_v4().to_string(),
        account_id: account_id.to_string(),
        key: format!(
            "{UPLOAD_FOLDER}/{account_id}/{}.{}",
            hex::encode(token),
            checked.extension
        ),
        content_type: checked.content_type.to_string(),
        byte_size: bytes.len() as i64,
        width: checked.width,
        height: checked.height,
        created_at: now,
        expires_at: now.saturating_add(keep),
    };
    let limit = tasks.config.limits.max_upload_bytes_per_day;
    // The row first: the day's limit is decided before any storage is spent, and a row whose
    // file is missing (a crash between the two) only fails the tasks that name it, until the
    // sweep removes it.
    match tasks.store.insert_upload(&upload, limit).await? {
        UploadAdmitted::Stored => {}
        UploadAdmitted::OverDailyLimit { used } => {
            let bytes = upload.byte_size as u64;
            return Err(admit::over_day(field, limit, used, bytes, now));
        }
    }
    if let Err(e) = tasks.blobs.put(&upload.key, bytes.to_vec()).await {
        if let Err(undo) = tasks
            .store
            .delete_uploads(std::slice::from_ref(&upload.id), i64::MIN)
            .await
        {
            tracing::warn!(error = %undo, "could not forget an upload whose file was not stored");
        }
        return Err(if e.is_transient() {
            ApiError::Unavailable {
                msg: "the image store is unavailable; try again shortly".into(),
                retry_after_secs: 5,
            }
        } else {
            ApiError::Internal(e.into())
        });
    }
    tracing::debug!(bytes = upload.byte_size, "upload stored");
    Ok(upload)
}

/// Remove uploads that were kept for a request that then failed (a data: URL of a submit that
/// was refused): their files, then their rows. Best effort: what remains expires.
pub async fn discard(tasks: &Tasks, uploads: &[Upload]) {
    if uploads.is_empty() {
        return;
    }
    let keys = uploads.iter().map(|u| u.key.clone()).collect();
    if let Err(e) = tasks.blobs.delete_keys(keys).await {
        tracing::warn!(error = %e, "could not remove the files of unused uploads; they expire");
        return;
    }
    let ids: Vec<String> = uploads.iter().map(|u| u.id.clone()).collect();
    if let Err(e) = tasks.store.delete_uploads(&ids, i64::MIN).await {
        tracing::warn!(error = %e, "could not forget unused uploads; they expire");
    }
}

/// The answer to an upload (201): its id, its URL under both names clients read, what it is.
#[derive(Serialize, ToSchema)]
#[schema(as = Upload)]
pub struct Answer {
    #[schema(value_type = uuid::Uuid)]
    id: String,
    /// An easel image URL that every image field accepts (blend, describe, upscale-highres,
    /// faceswap, image prompts); it needs no key to fetch.
    url: String,
    /// The same as `url`, under the name Apiframe's v1 SDK reads.
    #[serde(rename = "imageURL")]
    image_url: String,
    /// From the bytes, not the name or the declared type.
    #[schema(value_type = ImageType)]
    content_type: String,
    #[schema(minimum = 1)]
    byte_size: i64,
    #[schema(minimum = 1)]
    width: u32,
    #[schema(minimum = 1)]
    height: u32,
    /// When the upload is removed (upload_retention after it arrived).
    #[schema(format = DateTime)]
    expires_at: String,
}

/// The image types an upload may be (`check`), as the answer's `content_type` names them.
#[derive(ToSchema)]
pub enum ImageType {
    #[schema(rename = "image/png")]
    Png,
    #[schema(rename = "image/jpeg")]
    Jpeg,
    #[schema(rename = "image/webp")]
    Webp,
    #[schema(rename = "image/gif")]
    Gif,
}

/// The answer to `upload`.
pub fn answer(tasks: &Tasks, upload: &Upload) -> Answer {
    let url = tasks.blobs.url(&upload.key);
    Answer {
        id: upload.id.clone(),
        url: url.clone(),
        image_url: url,
        content_type: upload.content_type.clone(),
        byte_size: upload.byte_size,
        width: upload.width,
        height: upload.height,
        expires_at: rfc3339(upload.expires_at),
    }
}

/// The account named by an upload's blob key, when `key` is one.
pub fn upload_account(key: &str) -> Option<&str> {
    let rest = key.strip_prefix(UPLOAD_FOLDER)?.strip_prefix('/')?;
    rest.split_once('/').map(|(account, _)| account)
}

/// For an image field naming an easel URL at `key`: an upload must be the account's own and
/// still kept; 404 otherwise, never revealing whose it is. Other keys pass.
pub async fn check_owned(
    tasks: &Tasks,
    account_id: &str,
    field: &str,
    key: &str,
) -> Result<(), ApiError> {
    let Some(owner) = upload_account(key) else {
        return Ok(());
    };
    let found = if owner == account_id {
        tasks.store.upload_by_key(key).await?
    } else {
        None
    };
    match found {
        Some(upload) if upload.expires_at > now_ms() => Ok(()),
        _ => Err(ApiError::UploadNotFound {
            msg: format!("{field}: upload not found"),
        }),
    }
}
