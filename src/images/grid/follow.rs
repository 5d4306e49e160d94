//! Grids that follow their task. A task whose four images came from a model backend is recorded
//! as soon as those four files are stored; its grid (four decodes, a composition and an
//! encoding: most of easel's own time per task at model sizes) is made right after, from the
//! same files. A grid asked for before it is there (a caller quicker than the worker, or a node
//! that stopped between the two) is made then, by `GET /files`, from the files in the store.
//!
//! Only where easel serves its own images: with `blobs_public_url` the grid is made before the
//! task is recorded, as nothing of easel's answers a request for a missing key there.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use bytes::Bytes;
use tokio::sync::{OwnedMutexGuard, Semaphore};

use super::{format_for, format_of_key, make};
use crate::blobs::{BlobError, Blobs};
use crate::images::stored::{Format, StoredImage};

/// A grid still to make: where it goes and the four files it is made of.
pub struct PendingGrid {
    pub key: String,
    pub files: [Bytes; 4],
    pub format: Format,
}

/// The grids being made in this process, by key, so that a request for a grid the worker is
/// making waits for it and then reads it, instead of making it a second time.
static MAKING: LazyLock<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>> =
    LazyLock::new(Mutex::default);

/// How many grids requests make at once in this process: each takes a core for a while, and
/// requests for missing grids must not be able to take every core.
const ON_DEMAND_AT_ONCE: usize = 2;
static ON_DEMAND: LazyLock<Semaphore> = LazyLock::new(|| Semaphore::new(ON_DEMAND_AT_ONCE));

/// Held while one grid is made; the last holder of a key's lock takes the key out of [`MAKING`].
pub struct Making {
    key: String,
    guard: Option<OwnedMutexGuard<()>>,
}

pub async fn making(key: &str) -> Making {
    let lock = MAKING
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .entry(key.to_string())
        .or_default()
        .clone();
    Making {
        key: key.to_string(),
        guard: Some(lock.lock_owned().await),
    }
}

impl Drop for Making {
    fn drop(&mut self) {
        let mut map = MAKING.lock().unwrap_or_else(PoisonError::into_inner);
        drop(self.guard.take());
        // Every waiter holds a reference too: only the map's own is left when none waits.
        if map
            .get(&self.key)
            .is_some_and(|l| Arc::strong_count(l) == 1)
        {
            map.remove(&self.key);
        }
    }
}

/// The grid of `files`, on a blocking thread.
pub async fn compose(files: [Bytes; 4], format: Format) -> Result<StoredImage, String> {
    tokio::task::spawn_blocking(move || make(files.each_ref().map(|f| f.as_ref()), format))
        .await
        .map_err(|e| format!("making the grid failed: {e}"))?
}

/// Make `pending`'s grid and store it, once its task is recorded, holding `_making` (taken
/// before the commit). A failure is logged and left: the grid is made when it is first asked
/// for.
pub async fn make_after(blobs: &Blobs, pending: PendingGrid, _making: Making) {
    match compose(pending.files, pending.format).await {
        Ok(grid) => match blobs.put(&pending.key, grid.bytes).await {
            Ok(()) => crate::metrics::grid_made("after_task"),
            Err(e) => {
                tracing::warn!(error = %e, "the grid could not be stored; it is made when asked for")
            }
        },
        Err(e) => {
            crate::metrics::grid_made("failed");
            tracing::error!(error = %e, "the task's grid could not be made")
        }
    }
}

/// The bytes at `key`, as [`Blobs::get`] reads them; a grid that follows its task and is not
/// there yet is waited for or made now.
pub async fn get(blobs: &Blobs, key: &str) -> Result<Option<Bytes>, BlobError> {
    match blobs.get(key).await {
        Ok(None) => fetch_or_make(blobs, key).await,
        found => found,
    }
}

/// The grid at `key` (`{folder}/grid.png` or `grid.jpg`) when the store does not hold it: made
/// from the folder's four images, stored, and returned. `None` when `key` names no grid, or its
/// folder holds no four images whose grid has that format; an error only from the store.
async fn fetch_or_make(blobs: &Blobs, key: &str) -> Result<Option<Bytes>, BlobError> {
    let Some((folder, "grid.png" | "grid.jpg")) = key.rsplit_once('/') else {
        return Ok(None);
    };
    let Some(format) = format_of_key(key) else {
        return Ok(None);
    };
    let _making = making(key).await;
    if let Some(bytes) = blobs.get(key).await? {
        return Ok(Some(bytes));
    }
    let listed = blobs.list(folder).await?;
    let mut keys = Vec::with_capacity(4);
    for i in 0..4 {
        let mut found = listed.iter().filter(|k| {
            k.strip_prefix(folder)
                .and_then(|name| name.strip_prefix(&format!("/{i}.")))
                .is_some_and(|ext| ext == "png" || ext == "jpg")
        });
        match (found.next(), found.next()) {
            (Some(k), None) => keys.push(k.clone()),
            _ => return Ok(None),
        }
    }
    if format_for(keys.iter().filter_map(|k| format_of_key(k))) != format {
        return Ok(None);
    }
    let mut files = Vec::with_capacity(4);
    for k in &keys {
        match blobs.get(k).await? {
            Some(bytes) => files.push(bytes),
            None => return Ok(None),
        }
    }
    let files: [Bytes; 4] = files.try_into().expect("four keys, four files");
    let _permit = ON_DEMAND
        .acquire()
        .await
        .expect("the semaphore is never closed");
    let grid = match compose(files, format).await {
        Ok(grid) => Bytes::from(grid.bytes),
        Err(e) => {
            crate::metrics::grid_made("failed");
            tracing::error!(key, error = %e, "a grid asked for could not be made");
            return Ok(None);
        }
    };
    crate::metrics::grid_made("on_request");
    if let Err(e) = blobs.put(key, grid.to_vec()).await {
        tracing::warn!(key, error = %e, "a grid made on request could not be stored");
    }
    Ok(Some(grid))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(key: &str) -> bool {
        MAKING.lock().unwrap().contains_key(key)
    }

    #[tokio::test]
    async fn a_keys_lock_is_waited_for_and_gone_once_its_last_holder_is_done() {
        let key = "lock-test/folder/grid.png";
        let first = making(key).await;
        assert!(held(key));
        let waiter = tokio::spawn(async move {
            let second = making(key).await;
            drop(second);
        });
        // The second maker waits while the first holds the key.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!waiter.is_finished());
        drop(first);
        // The waiter's reference kept the entry; the last holder takes it out.
        waiter.await.unwrap();
        assert!(!held(key), "a finished grid's lock is not left behind");
        // A key made and dropped alone leaves nothing either.
        drop(making("lock-test/other/grid.jpg").await);
        assert!(!held("lock-test/other/grid.jpg"));
    }
}
