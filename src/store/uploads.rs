//! What the store keeps of a caller's upload, and how a day's upload limit is decided.

/// One upload: an image a caller sent, kept in the blob store at `key` until `expires_at`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upload {
    /// Public id (a UUID).
    pub id: String,
    pub account_id: String,
    /// The blob's key (`uploads/{account_id}/{token}.{ext}`).
    pub key: String,
    /// `image/png`, `image/jpeg`, `image/webp` or `image/gif`, from the bytes.
    pub content_type: String,
    pub byte_size: i64,
    pub width: u32,
    pub height: u32,
    /// Unix ms.
    pub created_at: i64,
    /// Unix ms; the sweep removes the upload after it.
    pub expires_at: i64,
}

/// How a new upload was answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UploadAdmitted {
    /// Recorded, and counted against the account's day.
    Stored,
    /// Recording it would take the account past its bytes for the day (`used` so far).
    OverDailyLimit { used: u64 },
}

/// The UTC day (days since the Unix epoch) of `at_ms`.
pub fn upload_day(at_ms: i64) -> i64 {
    at_ms.div_euclid(86_400_000)
}

/// Rows of an upload as both stores read them.
pub(crate) type UploadRow = (String, String, String, String, i64, i64, i64, i64, i64);

pub(crate) fn upload_of(row: UploadRow) -> Upload {
    let (id, account_id, key, content_type, byte_size, width, height, created_at, expires_at) = row;
    Upload {
        id,
        account_id,
        key,
        content_type,
        byte_size,
        width: u32::try_from(width).unwrap_or(0),
        height: u32::try_from(height).unwrap_or(0),
        created_at,
        expires_at,
    }
}

/// The columns of [`UploadRow`], in order.
pub(crate) const UPLOAD_COLUMNS: &str =
    "id, account_id, blob_key, content_type, byte_size, width, height, created_at, expires_at";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_are_utc_days() {
        assert_eq!(upload_day(0), 0);
        assert_eq!(upload_day(86_399_999), 0);
        assert_eq!(upload_day(86_400_000), 1);
        assert_eq!(upload_day(-1), -1);
    }
}
