//! Blobs as files under one folder (`{data_dir}/files`): each key a path below it.

use std::io::Write;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use bytes::Bytes;
use futures::future::join_all;

use super::store::{io_error, worst, BlobError, BlobStore};

#[derive(Debug)]
pub(super) struct Local {
    root: PathBuf,
    /// fsync each file before it is published, and a new folder's folders (on with
    /// `sqlite_synchronous = full`).
    durable: bool,
}

impl Local {
    pub(super) fn new(root: PathBuf, durable: bool) -> Local {
        Local { root, durable }
    }
}

#[async_trait]
impl BlobStore for Local {
    async fn put(&self, key: &str, bytes: Bytes) -> Result<(), BlobError> {
        let path = self.root.join(key);
        let durable = self.durable;
        blocking(move || write_atomic(&path, &bytes, durable)).await
    }

    async fn get(&self, key: &str) -> Result<Option<Bytes>, BlobError> {
        match tokio::fs::read(self.root.join(key)).await {
            Ok(bytes) => Ok(Some(Bytes::from(bytes))),
            // A folder's key holds no bytes either.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::IsADirectory
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(io_error(e)),
        }
    }

    async fn delete(&self, key: &str) -> Result<(), BlobError> {
        let root = self.root.clone();
        let path = root.join(key);
        blocking(move || {
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(e),
            }
            // Folders exist only for the files in them: remove those left empty, up to the
            // root. One that still holds files refuses, which ends the walk.
            let mut dir = path.parent();
            while let Some(d) = dir.filter(|d| *d != root) {
                if std::fs::remove_dir(d).is_err() {
                    break;
                }
                dir = d.parent();
            }
            Ok(())
        })
        .await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>, BlobError> {
        let root = self.root.clone();
        let start = root.join(prefix);
        blocking(move || {
            let mut keys = Vec::new();
            walk(&root, &start, &mut keys)?;
            Ok(keys)
        })
        .await
    }

    async fn list_old(
        &self,
        before: std::time::SystemTime,
        limit: usize,
    ) -> Result<Vec<String>, BlobError> {
        let root = self.root.clone();
        blocking(move || {
            let mut keys = Vec::new();
            let mut seen = 0;
            walk_old(&root, &root, before, limit, &mut seen, &mut keys)?;
            Ok(keys)
        })
        .await
    }

    async fn prune(&self, folder: &str) {
        let root = self.root.clone();
        let dir = root.join(folder);
        let _ = blocking(move || {
            let mut dir = Some(dir.as_path());
            // `remove_dir` refuses a folder that holds anything, which ends the walk.
            while let Some(d) = dir.filter(|d| *d != root) {
                if std::fs::remove_dir(d).is_err() {
                    break;
                }
                dir = d.parent();
            }
            Ok(())
        })
        .await;
    }

    /// Each file written in place (no reader can ask for it before its key is recorded, so no
    /// temporary file and rename), and, when durable, every fsync at once: each file's, and that
    /// of `folder` and each folder above it up to the root (a file's own fsync does not persist
    /// its name; its folder's does). The files are created before any folder's fsync starts,
    /// so that those find every name in place.
    async fn put_new_folder(
        &self,
        folder: &str,
        files: Vec<(String, Bytes)>,
    ) -> Result<(), BlobError> {
        let root = &self.root;
        let dir = root.join(folder);
        let paths: Vec<PathBuf> = files.iter().map(|(key, _)| root.join(key)).collect();
        let created: Vec<std::fs::File> = {
            let dir = dir.clone();
            blocking(move || {
                std::fs::create_dir_all(&dir)?;
                paths.iter().map(std::fs::File::create).collect()
            })
            .await?
        };
        let durable = self.durable;
        let writes = created
            .into_iter()
            .zip(files)
            .map(|(mut file, (_, bytes))| {
                blocking(move || {
                    file.write_all(&bytes)?;
                    if durable {
                        file.sync_all()?;
                    }
                    Ok(())
                })
            });
        // `folder` and each folder above it, up to the root.
        let folders: Vec<PathBuf> = if durable {
            let up_to_root = dir.ancestors().take_while(|d| d.starts_with(root));
            up_to_root.map(Path::to_path_buf).collect()
        } else {
            Vec::new()
        };
        let syncs = folders
            .into_iter()
            .map(|d| blocking(move || std::fs::File::open(d)?.sync_all()));
        let (written, synced) = futures::join!(join_all(writes), join_all(syncs));
        worst(written.into_iter().chain(synced))
    }
}

/// Run blocking file work off the async threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<T, BlobError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| BlobError::Transient(e.into()))?
        .map_err(io_error)
}

/// The key of the file at `path` under `root`: its relative path with `/` between folders; none
/// for a name that is not UTF-8 (easel writes none).
fn key_of(root: &Path, path: &Path) -> Option<String> {
    let relative = path.strip_prefix(root).ok()?.to_str()?;
    Some(relative.replace(std::path::MAIN_SEPARATOR, "/"))
}

/// The keys of the files below `dir` (relative to `root`); nothing when `dir` is missing.
fn walk(root: &Path, dir: &Path, keys: &mut Vec<String>) -> std::io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        // A file where a folder was asked for: nothing below it.
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            walk(root, &path, keys)?;
        } else {
            keys.extend(key_of(root, &path));
        }
    }
    Ok(())
}

/// As `walk`, keeping the files last modified before `before` and stopping after `limit`
/// files; `seen` counts them.
fn walk_old(
    root: &Path,
    dir: &Path,
    before: std::time::SystemTime,
    limit: usize,
    seen: &mut usize,
    keys: &mut Vec<String>,
) -> std::io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        if *seen >= limit {
            return Ok(());
        }
        let entry = entry?;
        let path = entry.path();
        let kind = entry.file_type()?;
        if kind.is_dir() {
            walk_old(root, &path, before, limit, seen, keys)?;
            continue;
        }
        *seen += 1;
        // A file removed meanwhile is simply not a candidate.
        let Ok(modified) = entry.metadata().and_then(|m| m.modified()) else {
            continue;
        };
        if modified >= before {
            continue;
        }
        keys.extend(key_of(root, &path));
    }
    Ok(())
}

/// Write through a temporary file renamed into place, so a reader never sees half a file. A
/// write that fails (a full disk) removes its temporary file: nothing of it stays behind.
fn write_atomic(path: &Path, bytes: &[u8], durable: bool) -> std::io::Result<()> {
    let dir = path.parent().expect("keys have a folder");
    std::fs::create_dir_all(dir)?;
    let tmp = path.with_extension("partial");
    let written = (|| {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        if durable {
            file.sync_all()?;
        }
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}
