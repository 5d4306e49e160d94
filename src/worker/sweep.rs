//! The sweep of images that no task refers to, run once in the background of a worker node's
//! start.

use std::time::Duration;

use crate::blobs::Blobs;
use crate::store::SharedStore;

/// Most keys one sweep looks at: it runs once per start, and a store with more is swept a part
/// at a time, one part per start.
pub const SWEEP_LIMIT: usize = 100_000;
/// Images younger than this are never swept. A task's images are written and then recorded;
/// a worker keeps trying to record them for up to `lease` (see `persist`), so anything in use
/// is far younger.
pub const SWEEP_MIN_AGE: Duration = Duration::from_secs(3600);
/// Tasks looked up per query of the sweep.
const SWEEP_CHUNK: usize = 200;

/// Remove the images that no task refers to, among the first `limit` keys of the blob store
/// that were written more than `min_age` ago and follow easel's layout (other keys are left
/// alone): folders of attempts that did not finish (a worker killed between writing and
/// recording, a clean-up that failed), of tasks that failed or no longer exist, and old
/// storage probes. A running task's folders are left to its own attempt, which removes its
/// earlier attempts' folders when it ends. Returns how many keys were removed.
pub async fn sweep_orphans(
    store: &SharedStore,
    blobs: &Blobs,
    min_age: Duration,
    limit: usize,
) -> anyhow::Result<usize> {
    use crate::blobs::Layout;
    use crate::domain::TaskStatus;
    use std::collections::{HashMap, HashSet};

    let before = std::time::SystemTime::now() - min_age;
    let keys = blobs.old_keys(before, limit).await?;
    let mut orphans = Vec::new();
    let mut by_task: HashMap<uuid::Uuid, Vec<String>> = HashMap::new();
    for key in keys {
        match Layout::of(&key) {
            Some(Layout::Image { task_id, .. }) => by_task.entry(task_id).or_default().push(key),
            Some(Layout::Probe) => orphans.push(key),
            // Removed with their rows when they expire (`retention`).
            Some(Layout::Upload { .. }) | None => {}
        }
    }
    let ids: Vec<uuid::Uuid> = by_task.keys().copied().collect();
    for chunk in ids.chunks(SWEEP_CHUNK) {
        let tasks: HashMap<String, crate::store::Task> = store
            .tasks_by_id(chunk)
            .await?
            .into_iter()
            .map(|task| (task.id.clone(), task))
            .collect();
        for id in chunk {
            let task = tasks.get(&id.to_string());
            let status = task.map(|t| t.status);
            if matches!(status, Some(TaskStatus::Starting | TaskStatus::Processing)) {
                continue;
            }
            // The folders a finished task's output names are kept; nothing else is, and
            // nothing of a task whose data retention removed.
            let kept: HashSet<String> = task
                .filter(|t| !t.data_removed())
                .and_then(|t| t.output.as_ref())
                .map(|output| {
                    let columns = output.to_columns();
                    columns
                        .grid_key
                        .into_iter()
                        .chain(columns.image_keys.unwrap_or_default())
                        .filter_map(|key| key.rsplit_once('/').map(|(f, _)| f.to_string()))
                        .collect()
                })
                .unwrap_or_default();
            for key in by_task.remove(id).unwrap_or_default() {
                let keep = match Layout::of(&key) {
                    Some(Layout::Image { folder, .. }) => kept.contains(folder),
                    _ => true,
                };
                if !keep {
                    orphans.push(key);
                }
            }
        }
        // In the background: let the node's own work go first.
        tokio::task::yield_now().await;
    }
    let removed = orphans.len();
    if removed > 0 {
        blobs.delete_keys(orphans).await?;
    }
    Ok(removed)
}
