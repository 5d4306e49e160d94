//! What a place that keeps bytes needs to offer (`BlobStore`, with a file system and S3 behind
//! it) and how its failures are sorted.

use async_trait::async_trait;
use bytes::Bytes;

/// The media type a file is served with, from its key's extension: a task's images are PNG,
/// an upload keeps the format its bytes were checked to be.
pub fn content_type_of(key: &str) -> &'static str {
    match key.rsplit_once('.').map(|(_, ext)| ext) {
        Some("png") => "image/png",
        Some("jpg") => "image/jpeg",
        Some("webp") => "image/webp",
        Some("gif") => "image/gif",
        _ => "application/octet-stream",
    }
}

/// A blob operation that failed, sorted by what the caller should do about it.
#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    /// Worth trying again later: no space, an I/O error, a timeout, a refused connection,
    /// throttling, a server error.
    #[error("blob store unavailable: {0}")]
    Transient(#[source] BoxError),
    /// Trying again will not help: a bad key, a missing bucket, refused credentials.
    #[error("blob store refused the operation: {0}")]
    Permanent(#[source] BoxError),
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl BlobError {
    pub fn is_transient(&self) -> bool {
        matches!(self, BlobError::Transient(_))
    }

    pub(super) fn invalid_key(key: &str) -> BlobError {
        BlobError::Permanent(format!("invalid blob key {key:?}").into())
    }
}

/// What easel needs from a place that keeps bytes under keys. Keys given to it are valid
/// ([`is_valid_key`]); folders are keys without a trailing slash.
#[async_trait]
pub(super) trait BlobStore: Send + Sync + std::fmt::Debug {
    /// Store `bytes` at `key` atomically: a reader never sees part of it.
    async fn put(&self, key: &str, bytes: Bytes) -> Result<(), BlobError>;
    /// The bytes at `key`, `None` when there are none.
    async fn get(&self, key: &str) -> Result<Option<Bytes>, BlobError>;
    /// Remove `key`; a missing key is not an error.
    async fn delete(&self, key: &str) -> Result<(), BlobError>;
    /// Every key below the folder `prefix`, in no particular order.
    async fn list(&self, prefix: &str) -> Result<Vec<String>, BlobError>;
    /// Keys last written before `before`, from the first `limit` keys of the whole store (in
    /// no particular order): the candidates of the sweep.
    async fn list_old(
        &self,
        before: std::time::SystemTime,
        limit: usize,
    ) -> Result<Vec<String>, BlobError>;
    /// Store `files` in `folder`, a folder no reader can know of yet (a task attempt's, before
    /// its keys are recorded), durably, each file whole by the time this returns. A failure may
    /// leave some of them behind: the caller removes the folder. Here: each put side by side.
    async fn put_new_folder(
        &self,
        _folder: &str,
        files: Vec<(String, Bytes)>,
    ) -> Result<(), BlobError> {
        let puts = files
            .into_iter()
            .map(|(key, bytes)| async move { self.put(&key, bytes).await });
        worst(futures::future::join_all(puts).await)
    }
    /// Remove `folder` and the folders above it that are left empty, where folders exist
    /// apart from keys (a write that failed can leave one).
    async fn prune(&self, _folder: &str) {}
}

/// The error to report of several writes' results: a transient one before a permanent one (the
/// task may still succeed later); `Ok` when none failed.
pub(super) fn worst(
    results: impl IntoIterator<Item = Result<(), BlobError>>,
) -> Result<(), BlobError> {
    let failed = results.into_iter().filter_map(Result::err);
    match failed.reduce(|a, b| if a.is_transient() { a } else { b }) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// How an I/O error should be treated: transient when the disk, the network or the system
/// may recover (full, over quota, failing, busy, timed out), permanent otherwise.
pub(super) fn io_error(e: std::io::Error) -> BlobError {
    use std::io::ErrorKind as K;
    let transient = matches!(
        e.kind(),
        K::StorageFull
            | K::QuotaExceeded
            | K::ResourceBusy
            | K::TimedOut
            | K::Interrupted
            | K::WouldBlock
            | K::OutOfMemory
            | K::ReadOnlyFilesystem
            | K::StaleNetworkFileHandle
            | K::ConnectionRefused
            | K::ConnectionReset
            | K::ConnectionAborted
            | K::NotConnected
            | K::BrokenPipe
            | K::UnexpectedEof
    ) || matches!(
        e.raw_os_error(),
        Some(libc::EIO | libc::ENOSPC | libc::EDQUOT | libc::EMFILE | libc::ENFILE | libc::EAGAIN)
    );
    if transient {
        BlobError::Transient(e.into())
    } else {
        BlobError::Permanent(e.into())
    }
}
