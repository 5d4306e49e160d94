//! Retention: on worker nodes, a loop that deletes the images of tasks that became final more
//! than `retention` ago and marks their data removed, and the callers' uploads that are past
//! `upload_retention` (their files, then their rows).
//!
//! Each round takes the oldest expired tasks whose data is not marked removed, a batch at a
//! time: it deletes their files through the blob store (a file already gone is no error), then
//! marks the batch removed in one write, and takes the next batch at once while batches come
//! back full. Nothing else is kept: a node that stops between the deletes and the mark finds the
//! same tasks again and only repeats the deletes, and two nodes sweeping at once do the same. A
//! blob store that fails ends the round before anything is marked, so no task is marked removed
//! while its files are still there; the next round tries again.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::blobs::{is_valid_key, Blobs};
use crate::store::{now_ms, upload_day, SharedStore};

/// Tasks one batch of a round takes.
pub const RETENTION_BATCH: u32 = 100;

/// Sweep every `retention_sweep_interval` until `shutdown`: expired uploads always, tasks'
/// data when `retention` is set.
pub async fn run(
    store: SharedStore,
    blobs: Blobs,
    retention: Option<Duration>,
    every: Duration,
    shutdown: CancellationToken,
) {
    loop {
        tokio::select! {
            swept = sweep_uploads(&store, &blobs, RETENTION_BATCH) => match swept {
                Ok(0) => {}
                Ok(removed) => tracing::info!(removed, "retention removed expired uploads"),
                Err(e) => tracing::warn!(error = %e, "the upload sweep stopped; it tries again next round"),
            },
            _ = shutdown.cancelled() => return,
        }
        if let Some(retention) = retention {
            tokio::select! {
                swept = sweep_expired(&store, &blobs, retention, RETENTION_BATCH) => match swept {
                    Ok(0) => {}
                    Ok(removed) => tracing::info!(removed, "retention removed the data of expired tasks"),
                    Err(e) => tracing::warn!(error = %e, "the retention sweep stopped; it tries again next round"),
                },
                _ = shutdown.cancelled() => return,
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = shutdown.cancelled() => return,
        }
    }
}

/// One round: remove the data of the tasks that became final `retention` ago or earlier, `batch`
/// tasks at a time, until a batch comes back short. Returns how many tasks this round marked.
pub async fn sweep_expired(
    store: &SharedStore,
    blobs: &Blobs,
    retention: Duration,
    batch: u32,
) -> anyhow::Result<u64> {
    let retention = i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
    let mut removed = 0;
    loop {
        let expired = store
            .expired_tasks(now_ms().saturating_sub(retention), batch)
            .await?;
        let keys: Vec<String> = expired
            .iter()
            .flat_map(|t| t.keys.iter().cloned())
            .filter(|key| {
                // Only keys easel made are ever stored; one that is not is not a file to delete.
                let valid = is_valid_key(key);
                if !valid {
                    tracing::warn!(key, "retention skipped a stored key that is not valid");
                }
                valid
            })
            .collect();
        if !keys.is_empty() {
            blobs.delete_keys(keys).await?;
        }
        let seqs: Vec<i64> = expired.iter().map(|t| t.seq).collect();
        let marked = store.mark_data_removed(&seqs, now_ms()).await?;
        crate::metrics::retention_removed(marked);
        removed += marked;
        if expired.len() < batch as usize {
            return Ok(removed);
        }
        // In the background: let the node's own work go first.
        tokio::task::yield_now().await;
    }
}

/// One round over the uploads past their `expires_at`, `batch` at a time: their files are
/// deleted, then their rows (with the daily counts of days before yesterday, which no limit
/// reads). A blob store that fails ends the round before the rows go, so no row is forgotten
/// while its file is still there. Returns how many uploads were removed.
pub async fn sweep_uploads(store: &SharedStore, blobs: &Blobs, batch: u32) -> anyhow::Result<u64> {
    let mut removed = 0;
    loop {
        let now = now_ms();
        let expired = store.expired_uploads(now, batch).await?;
        let keys: Vec<String> = expired
            .iter()
            .map(|u| u.key.clone())
            .filter(|key| is_valid_key(key))
            .collect();
        if !keys.is_empty() {
            blobs.delete_keys(keys).await?;
        }
        let ids: Vec<String> = expired.iter().map(|u| u.id.clone()).collect();
        removed += store.delete_uploads(&ids, upload_day(now) - 1).await?;
        if expired.len() < batch as usize {
            return Ok(removed);
        }
        tokio::task::yield_now().await;
    }
}
