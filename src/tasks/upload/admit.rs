//! What an image from a caller must pass before any of it is decoded: a place among the
//! account's uploads in progress on this node, and room in the account's bytes for the day.
//! A flood of uploads, or an account past its day, then costs a counter and one indexed read,
//! not a decode each.

use super::super::in_progress::{InProgress, Turn};
use super::super::Tasks;
use crate::refusal::ApiError;
use crate::store::{now_ms, upload_day};

/// Admit `bytes` of images from the account, given as `field`, to be checked: 429
/// `quota_exceeded` when the account has its most uploads in progress here, or when they would
/// take it past its bytes for the day (`insert_upload` decides again when it keeps them, for
/// uploads that raced). Hold the turn until the images are kept or refused.
pub async fn admit(
    tasks: &Tasks,
    account_id: &str,
    field: &str,
    bytes: u64,
) -> Result<Turn, ApiError> {
    let most = tasks.config.limits.max_uploads_in_progress_per_account;
    let Some(turn) = InProgress::take(&tasks.uploads_in_progress, account_id, most) else {
        crate::metrics::image_check("busy");
        return Err(ApiError::QuotaExceeded {
            msg: format!(
                "{field}: the account has {most} uploads being checked on this node; send the \
                 next when one is answered"
            ),
            retry_after_secs: 1,
        });
    };
    let now = now_ms();
    let used = tasks
        .store
        .uploaded_bytes(account_id, upload_day(now))
        .await?;
    let used = u64::try_from(used).unwrap_or(0);
    let limit = tasks.config.limits.max_upload_bytes_per_day;
    if used.saturating_add(bytes) > limit {
        crate::metrics::image_check("over_quota");
        return Err(over_day(field, limit, used, bytes, now));
    }
    Ok(turn)
}

/// 429 for `bytes` more that would take the account past `limit` with `used` already today;
/// `Retry-After` is the next UTC day.
pub fn over_day(field: &str, limit: u64, used: u64, bytes: u64, now: i64) -> ApiError {
    let next_day = (upload_day(now) + 1) * 86_400_000;
    ApiError::QuotaExceeded {
        msg: format!(
            "{field}: the account may upload {limit} bytes per day (UTC); {used} are used and \
             this upload is {bytes} bytes"
        ),
        retry_after_secs: ((next_day - now) / 1000).max(1) as u64,
    }
}
