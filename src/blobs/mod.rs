//! Where generated images are kept and how they are addressed. Two stores sit behind one
//! [`BlobStore`] trait: a local directory (`{data_dir}/files`, the default) and S3-compatible
//! object storage. What must not differ between them lives here, above the trait: the key layout
//! (`{task_id}/{random token}/{name}.png`, unguessable), which keys are valid, how an earlier
//! attempt's folders are removed, and how a key becomes a URL.
//!
//! Keys, not URLs, are what callers keep: [`Blobs::url`] builds the address from the settings in
//! force, so `public_url` or `blobs_public_url` can change, and any node serves any task's images
//! (through `/files/{key}` and [`Blobs::get`]).

mod health;
mod local;
mod s3;
mod store;

pub use health::StorageHealth;
use store::BlobStore;
pub use store::{content_type_of, BlobError};

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use rand::RngCore;

use crate::config::{self, BlobStoreKind, SqliteSynchronous};

/// How long a finished task's clean-up of its other folders is tried again while the store is
/// unreachable, and the longest wait between tries.
const CLEANUP_RETRY_FOR: Duration = Duration::from_secs(600);
const CLEANUP_RETRY_EVERY_MAX: Duration = Duration::from_secs(5);

/// The configured blob store and the base its URLs are built on. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Blobs {
    store: Arc<dyn BlobStore>,
    /// `blobs_public_url`, or `{public_url}/files`; without a trailing slash.
    base_url: Arc<str>,
    /// Whether image URLs are easel's own (`/files`, no `blobs_public_url`), so that a request
    /// for a key not yet written reaches easel.
    own_urls: bool,
    /// Whether images can be written now (see [`StorageHealth`]).
    health: StorageHealth,
    /// The key this process's storage probes write (outside the image layout).
    probe_key: Arc<str>,
}

impl Blobs {
    /// The store named by `blob_store`. Nothing is contacted yet, so a store that is briefly
    /// down does not stop easel from starting; settings that cannot work do. A local store keeps
    /// its files under `data_dir`, synced as the database's commits are.
    pub async fn open(
        config: &config::Blobs,
        data_dir: &Path,
        synchronous: SqliteSynchronous,
        public_url: &str,
    ) -> anyhow::Result<Blobs> {
        let mut floor = None;
        let store: Arc<dyn BlobStore> = match config.store {
            BlobStoreKind::Local => {
                let root = data_dir.join("files");
                tokio::fs::create_dir_all(&root).await.map_err(|e| {
                    anyhow::anyhow!("cannot create the image folder {}: {e}", root.display())
                })?;
                floor = Some((root.clone(), config.min_free_space));
                // Image files are as durable as the database's commits that point at them.
                Arc::new(local::Local::new(root, synchronous.is_full()))
            }
            BlobStoreKind::S3 => Arc::new(s3::S3::new(config)?),
        };
        let base_url = match &config.public_url {
            Some(url) => url.trim_end_matches('/').to_string(),
            None => format!("{}/files", public_url.trim_end_matches('/')),
        };
        let mut token = [0u8; 8];
        rand::rngs::OsRng.fill_bytes(&mut token);
        Ok(Blobs {
            store,
            base_url: base_url.into(),
            own_urls: config.public_url.is_none(),
            health: StorageHealth::new(floor),
            probe_key: format!("{PROBE_FOLDER}/{}.bin", hex::encode(token)).into(),
        })
    }

    /// Whether images can be written now; shared by every clone.
    pub fn health(&self) -> &StorageHealth {
        &self.health
    }

    /// Write `bytes` bytes to a key outside the image layout and remove them: whether the store
    /// takes a task's images again.
    async fn probe(&self, bytes: usize) -> Result<(), BlobError> {
        self.store
            .put(&self.probe_key, Bytes::from(vec![0u8; bytes]))
            .await?;
        self.store.delete(&self.probe_key).await
    }

    /// A fresh, unguessable folder key for one task attempt's images.
    pub fn new_folder(task_id: &str) -> String {
        let mut token = [0u8; 16];
        rand::rngs::OsRng.fill_bytes(&mut token);
        format!("{task_id}/{}", hex::encode(token))
    }

    /// The address clients fetch `key` from.
    pub fn url(&self, key: &str) -> String {
        format!("{}/{key}", self.base_url)
    }

    /// Whether image URLs are answered by easel (`{public_url}/files/...`) rather than by
    /// `blobs_public_url`'s server: then a grid may follow its task (`worker::grids`).
    pub fn urls_are_easels(&self) -> bool {
        self.own_urls
    }

    /// The key of one of easel's own image URLs (as [`Blobs::url`] makes them), so that it is
    /// read from storage rather than over HTTP; `None` for any other URL.
    pub fn key_of_url(&self, url: &str) -> Option<String> {
        let key = url.strip_prefix(&*self.base_url)?.strip_prefix('/')?;
        is_valid_key(key).then(|| key.to_string())
    }

    /// Store `bytes` at `key`, atomically.
    pub async fn put(&self, key: &str, bytes: impl Into<Bytes>) -> Result<(), BlobError> {
        check_key(key)?;
        self.store.put(key, bytes.into()).await
    }

    /// The bytes at `key`; `None` when there are none.
    pub async fn get(&self, key: &str) -> Result<Option<Bytes>, BlobError> {
        check_key(key)?;
        self.store.get(key).await
    }

    /// Every key under the folder `folder`, sorted.
    pub async fn list(&self, folder: &str) -> Result<Vec<String>, BlobError> {
        check_key(folder)?;
        let mut keys = self.store.list(folder).await?;
        keys.sort();
        Ok(keys)
    }

    /// Store `files` (each a key directly in `folder`, and its bytes) in `folder`, a fresh one
    /// from [`Blobs::new_folder`] whose keys no reader knows yet, durably: on local files with
    /// `sqlite_synchronous = full` each file and the folders that name them are fsynced, all at
    /// once. A failure may leave part of it behind: remove the folder then.
    pub async fn put_new_folder(
        &self,
        folder: &str,
        files: Vec<(String, Bytes)>,
    ) -> Result<(), BlobError> {
        check_key(folder)?;
        for (key, _) in &files {
            check_key(key)?;
            let name = key.strip_prefix(folder).and_then(|k| k.strip_prefix('/'));
            if name.is_none_or(|name| name.contains('/')) {
                return Err(BlobError::invalid_key(key));
            }
        }
        self.store.put_new_folder(folder, files).await
    }

    /// Keys in easel's layout (a task's image, or a storage probe) last written before
    /// `before`, from the first `limit` keys of the store.
    pub async fn old_keys(
        &self,
        before: std::time::SystemTime,
        limit: usize,
    ) -> Result<Vec<String>, BlobError> {
        let mut keys = self.store.list_old(before, limit).await?;
        keys.retain(|key| Layout::of(key).is_some());
        Ok(keys)
    }

    /// Delete `keys` (each must be valid); the first error. Empty folders left behind go too.
    pub async fn delete_keys(&self, keys: Vec<String>) -> Result<(), BlobError> {
        for key in &keys {
            check_key(key)?;
        }
        let folders: std::collections::BTreeSet<String> = keys
            .iter()
            .filter_map(|k| k.rsplit_once('/').map(|(folder, _)| folder.to_string()))
            .collect();
        self.delete_all(keys).await?;
        for folder in folders {
            self.store.prune(&folder).await;
        }
        Ok(())
    }

    /// Remove a folder written by an attempt whose result was discarded. Best effort: what
    /// cannot be removed now is logged and left behind.
    pub async fn remove_folder(&self, folder: &str) {
        if let Err(e) = self.try_remove_folder(folder).await {
            // Not lost: the task's attempt that finishes removes its other folders, and the
            // sweep at start whatever is left.
            tracing::warn!(folder, error = %e, "could not remove a discarded folder yet");
        }
    }

    /// Remove what earlier attempts at `task_id` left behind (a worker that died after writing
    /// its files and before recording them, a preview folder, a folder a failed write could not
    /// remove), keeping the folder `keep` (from `new_folder`), or nothing when `keep` is `None`.
    /// Best effort: when the store is unreachable it is tried again in the background, with
    /// backoff, for up to [`CLEANUP_RETRY_FOR`]; what is still left then goes to the sweep at
    /// start.
    pub async fn remove_stale_attempts(&self, task_id: &str, keep: Option<&str>) {
        let e = match self.try_remove_stale_attempts(task_id, keep).await {
            Ok(()) => return,
            Err(e) => e,
        };
        if !e.is_transient() {
            tracing::warn!(task_id, error = %e, "could not remove an earlier attempt's files");
            return;
        }
        tracing::warn!(
            task_id,
            error = %e,
            "could not remove an earlier attempt's files yet; trying again in the background"
        );
        let (blobs, task_id, keep) = (self.clone(), task_id.to_string(), keep.map(String::from));
        tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + CLEANUP_RETRY_FOR;
            let mut wait = Duration::from_millis(500);
            loop {
                tokio::time::sleep(wait).await;
                match blobs
                    .try_remove_stale_attempts(&task_id, keep.as_deref())
                    .await
                {
                    Ok(()) => return,
                    Err(e) if e.is_transient() && tokio::time::Instant::now() < deadline => {
                        wait = (wait * 2).min(CLEANUP_RETRY_EVERY_MAX);
                    }
                    Err(e) => {
                        tracing::warn!(
                            task_id,
                            error = %e,
                            "gave up removing an earlier attempt's files; the sweep at start will"
                        );
                        return;
                    }
                }
            }
        });
    }

    async fn try_remove_stale_attempts(
        &self,
        task_id: &str,
        keep: Option<&str>,
    ) -> Result<(), BlobError> {
        let stale: Vec<String> = self
            .list(task_id)
            .await?
            .into_iter()
            .filter(|key| keep.is_none_or(|keep| !in_folder(key, keep)))
            .collect();
        if stale.is_empty() {
            return Ok(());
        }
        tracing::info!(
            task_id,
            files = stale.len(),
            "removing an earlier attempt's files"
        );
        self.delete_all(stale).await
    }

    async fn try_remove_folder(&self, folder: &str) -> Result<(), BlobError> {
        let keys = self.list(folder).await?;
        self.delete_all(keys).await?;
        self.store.prune(folder).await;
        Ok(())
    }

    /// Delete `keys` a few at a time (one request each on object storage); the first error.
    async fn delete_all(&self, keys: Vec<String>) -> Result<(), BlobError> {
        let results: Vec<Result<(), BlobError>> = futures::stream::iter(keys)
            .map(|key| async move { self.store.delete(&key).await })
            .buffer_unordered(8)
            .collect()
            .await;
        results.into_iter().collect()
    }
}

/// Where storage probes write, beside the task folders; never a task id.
pub const PROBE_FOLDER: &str = "storage-probe";
/// Where callers' uploads are kept, beside the task folders; never a task id.
pub const UPLOAD_FOLDER: &str = "uploads";

/// What a key of easel's own is.
#[derive(Debug, PartialEq, Eq)]
pub enum Layout<'a> {
    /// `{task_id}/{token}/{name}`: one of a task attempt's images (or what a failed write of
    /// one left); the folder is `{task_id}/{token}`.
    Image {
        task_id: uuid::Uuid,
        folder: &'a str,
    },
    /// `storage-probe/{name}`: a probe's test write.
    Probe,
    /// `uploads/{account_id}/{token}.{ext}`: a caller's upload, removed with its row when it
    /// expires (`worker::retention`), never by the sweep of images no task refers to.
    Upload { account_id: uuid::Uuid },
}

impl<'a> Layout<'a> {
    /// The layout `key` follows, or None for a key easel did not make (left alone).
    pub fn of(key: &'a str) -> Option<Layout<'a>> {
        let parts: Vec<&str> = key.split('/').collect();
        match parts.as_slice() {
            [PROBE_FOLDER, name] if name.ends_with(".bin") => Some(Layout::Probe),
            [UPLOAD_FOLDER, account, name] => {
                let account_id = uuid::Uuid::parse_str(account).ok()?;
                let (token, ext) = name.split_once('.')?;
                let token_ok = token.len() == 32 && token.bytes().all(|b| b.is_ascii_hexdigit());
                let ext_ok =
                    content_type_of(name) != "application/octet-stream" && !ext.contains('.');
                (token_ok && ext_ok && account == &account_id.hyphenated().to_string())
                    .then_some(Layout::Upload { account_id })
            }
            [task, token, name] => {
                let task_id = uuid::Uuid::parse_str(task).ok()?;
                let token_ok = token.len() == 32 && token.bytes().all(|b| b.is_ascii_hexdigit());
                // Images (PNG, or a backend's JPEG kept as it came), what a failed write of one
                // left, and previews of a running task (`preview-N.jpg`).
                let name_ok = (name.ends_with(".png")
                    || name.ends_with(".jpg")
                    || name.ends_with(".partial"))
                    && is_valid_key(name);
                (token_ok && name_ok && task == &task_id.hyphenated().to_string()).then(|| {
                    Layout::Image {
                        task_id,
                        folder: &key[..task.len() + 1 + token.len()],
                    }
                })
            }
            _ => None,
        }
    }
}

/// Whether `key` lies inside the folder `folder`.
fn in_folder(key: &str, folder: &str) -> bool {
    key.strip_prefix(folder)
        .is_some_and(|rest| rest.starts_with('/'))
}

/// Whether `key` is one easel could have made: `/`-separated segments of ASCII letters, digits,
/// `.`, `_` and `-`, none empty, `.` or `..`. Anything else (absolute paths, traversal,
/// backslashes, encoded characters) is refused before it reaches a store.
pub fn is_valid_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 512
        && key.split('/').all(|segment| {
            !segment.is_empty()
                && segment != "."
                && segment != ".."
                && segment
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        })
}

fn check_key(key: &str) -> Result<(), BlobError> {
    if is_valid_key(key) {
        Ok(())
    } else {
        Err(BlobError::invalid_key(key))
    }
}

#[cfg(test)]
mod tests {
    use super::store::io_error;
    use super::*;

    #[test]
    fn keys_easel_makes_are_valid_and_traversal_is_not() {
        let folder = Blobs::new_folder("0190d6c1-2b7e-7c3a-9f00-000000000001");
        assert!(is_valid_key(&folder));
        assert!(is_valid_key(&format!("{folder}/grid.png")));
        for bad in [
            "",
            "/etc/passwd",
            "../easel.db",
            "a/../../easel.db",
            "a/./b",
            "a//b",
            "a/",
            "a\\b",
            "a/b%2e",
            "a b",
            "a/\0",
        ] {
            assert!(!is_valid_key(bad), "{bad:?}");
        }
    }

    #[test]
    fn only_keys_in_easels_layout_are_its_own() {
        let folder = Blobs::new_folder("0190d6c1-2b7e-7c3a-9f00-000000000001");
        let key = format!("{folder}/grid.png");
        match Layout::of(&key) {
            Some(Layout::Image { task_id, folder: f }) => {
                assert_eq!(task_id.to_string(), "0190d6c1-2b7e-7c3a-9f00-000000000001");
                assert_eq!(f, folder);
            }
            other => panic!("{other:?}"),
        }
        // A backend's JPEG kept as it came, a preview, and a failed write's leftover.
        for name in ["0.jpg", "grid.jpg", "preview-3.jpg", "0.partial"] {
            assert!(Layout::of(&format!("{folder}/{name}")).is_some(), "{name}");
        }
        assert_eq!(Layout::of("storage-probe/0a1b.bin"), Some(Layout::Probe));
        let account = "0190d6c1-2b7e-7c3a-9f00-000000000002";
        assert_eq!(
            Layout::of(&format!(
                "uploads/{account}/0123456789abcdef0123456789abcdef.jpg"
            )),
            Some(Layout::Upload {
                account_id: account.parse().unwrap()
            })
        );
        for foreign in [
            format!("uploads/{account}/0123456789abcdef0123456789abcdef.txt"),
            format!("uploads/{account}/short.png"),
            "uploads/not-a-uuid/0123456789abcdef0123456789abcdef.png".to_string(),
        ] {
            assert_eq!(Layout::of(&foreign), None, "{foreign}");
        }
        for foreign in [
            "backups/db.tar",
            "0190d6c1-2b7e-7c3a-9f00-000000000001/short/0.png",
            "0190d6c1-2b7e-7c3a-9f00-000000000001/0.png",
            "not-a-uuid/0123456789abcdef0123456789abcdef/0.png",
            "0190d6c1-2b7e-7c3a-9f00-000000000001/0123456789abcdef0123456789abcdef/notes.txt",
            "0190d6c1-2b7e-7c3a-9f00-000000000001/0123456789abcdef0123456789abcdef/0.webp",
            "0190d6c1-2b7e-7c3a-9f00-000000000001/0123456789abcdef0123456789abcdef/a/0.png",
        ] {
            assert_eq!(Layout::of(foreign), None, "{foreign}");
        }
    }

    #[test]
    fn a_key_is_in_a_folder_only_below_it() {
        assert!(in_folder("t/abc/0.png", "t/abc"));
        assert!(!in_folder("t/abcd/0.png", "t/abc"));
        assert!(!in_folder("t/abc", "t/abc"));
    }

    #[test]
    fn a_full_disk_is_transient_and_a_refusal_is_not() {
        let full = std::io::Error::from_raw_os_error(libc::ENOSPC);
        assert!(io_error(full).is_transient());
        let eio = std::io::Error::from_raw_os_error(libc::EIO);
        assert!(io_error(eio).is_transient());
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        assert!(!io_error(denied).is_transient());
    }
}
