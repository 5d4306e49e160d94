//! The uploads being checked on this node, by account, under
//! `max_uploads_in_progress_per_account` (see `upload::admit`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The uploads being checked on this node, by account, under
/// `max_uploads_in_progress_per_account`.
#[derive(Default)]
pub struct InProgress {
    by_account: Mutex<HashMap<String, u32>>,
}

/// One upload's place, given back when dropped.
pub struct Turn {
    account_id: String,
    of: Arc<InProgress>,
}

impl InProgress {
    pub(super) fn take(of: &Arc<InProgress>, account_id: &str, most: u32) -> Option<Turn> {
        let mut counts = of.lock();
        let mine = counts.entry(account_id.to_string()).or_default();
        if *mine >= most {
            return None;
        }
        *mine += 1;
        Some(Turn {
            account_id: account_id.to_string(),
            of: of.clone(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        // The counts are left consistent by every holder.
        self.by_account.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut counts = self.of.lock();
        if let Some(n) = counts.get_mut(&self.account_id) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&self.account_id);
            }
        }
    }
}
