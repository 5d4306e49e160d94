//! Where generated images are kept and how they are addressed: files under `{data_dir}/files`,
//! served at `{public_url}/files/...`. Keys carry a random token, so addresses are unguessable.

use std::io::Write;
use std::path::{Path, PathBuf};

use rand::RngCore;

#[derive(Clone, Debug)]
pub struct Blobs {
    root: PathBuf,
    base_url: String,
    /// fsync each file before it is published (on with `sqlite_synchronous = full`).
    durable: bool,
}

impl Blobs {
    pub fn new(root: PathBuf, public_url: &str, durable: bool) -> Blobs {
        Blobs {
            root,
            base_url: format!("{}/files", public_url.trim_end_matches('/')),
            durable,
        }
    }

    /// A fresh, unguessable folder key for one task attempt's images.
    pub fn new_folder(task_id: &str) -> String {
        let mut token = [0u8; 16];
        rand::rngs::OsRng.fill_bytes(&mut token);
        format!("{task_id}/{}", hex::encode(token))
    }

    /// Write `bytes` at `key` (atomically: a reader never sees half a file).
    pub async fn put(&self, key: &str, bytes: Vec<u8>) -> std::io::Result<()> {
        let path = self.root.join(key);
        let durable = self.durable;
        tokio::task::spawn_blocking(move || write_atomic(&path, &bytes, durable))
            .await
            .map_err(std::io::Error::other)?
    }

    /// The address a client fetches `key` at.
    pub fn url(&self, key: &str) -> String {
        format!("{}/{key}", self.base_url)
    }

    /// Remove a folder written by an attempt whose result was discarded.
    pub async fn remove_folder(&self, key: &str) {
        let _ = tokio::fs::remove_dir_all(self.root.join(key)).await;
    }

    /// Make `folder` and the names of the files renamed into it durable: fsync the folder and
    /// each folder above it up to the root. A file's own fsync does not persist its name; its
    /// directory's does. Nothing to do unless durable.
    pub async fn sync_folder(&self, folder: &str) -> std::io::Result<()> {
        if !self.durable {
            return Ok(());
        }
        let root = self.root.clone();
        let dir = root.join(folder);
        tokio::task::spawn_blocking(move || {
            let mut dir = dir.as_path();
            loop {
                std::fs::File::open(dir)?.sync_all()?;
                match dir.parent() {
                    Some(parent) if dir != root => dir = parent,
                    _ => return Ok(()),
                }
            }
        })
        .await
        .map_err(std::io::Error::other)?
    }

    /// Remove what earlier attempts at `task_id` left behind (a worker that died after writing
    /// its files and before recording them), keeping the folder `keep` (from `new_folder`), or
    /// nothing when `keep` is `None`.
    pub async fn remove_stale_attempts(&self, task_id: &str, keep: Option<&str>) {
        let task_dir = self.root.join(task_id);
        let keep = keep.and_then(|k| k.strip_prefix(task_id)?.strip_prefix('/').map(String::from));
        let Some(keep) = keep else {
            let _ = tokio::fs::remove_dir_all(&task_dir).await;
            return;
        };
        let Ok(mut entries) = tokio::fs::read_dir(&task_dir).await else {
            return;
        };
        while let Ok(Some(entry)) = entries.next_entry().await {
            if entry.file_name().to_str() != Some(keep.as_str()) {
                tracing::info!(task_id, folder = ?entry.file_name(), "removing an earlier attempt's files");
                let _ = tokio::fs::remove_dir_all(entry.path()).await;
            }
        }
    }
}

fn write_atomic(path: &Path, bytes: &[u8], durable: bool) -> std::io::Result<()> {
    let dir = path.parent().expect("keys have a folder");
    std::fs::create_dir_all(dir)?;
    let tmp = path.with_extension("partial");
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(bytes)?;
    if durable {
        file.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    Ok(())
}
