//! Counts of things in progress by account on this node (event streams, uploads being checked),
//! each under a per-account limit, and the uploads' own count under
//! `max_uploads_in_progress_per_account` (see `upload::admit`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// How many of something each account has in progress; accounts with none are not kept.
#[derive(Default)]
pub struct Counts(HashMap<String, u32>);

impl Counts {
    /// Count one more for `account_id` unless it has `most` already; whether it was counted.
    pub fn take(&mut self, account_id: &str, most: u32) -> bool {
        let mine = self.0.get(account_id).copied().unwrap_or(0);
        if mine >= most {
            return false;
        }
        self.0.insert(account_id.to_string(), mine + 1);
        true
    }

    /// Count one fewer for `account_id`.
    pub fn give(&mut self, account_id: &str) {
        if let Some(n) = self.0.get_mut(account_id) {
            *n -= 1;
            if *n == 0 {
                self.0.remove(account_id);
            }
        }
    }
}

/// The uploads being checked on this node, by account, under
/// `max_uploads_in_progress_per_account`.
#[derive(Default)]
pub struct InProgress {
    by_account: Mutex<Counts>,
}

/// One upload's place, given back when dropped.
pub struct Turn {
    account_id: String,
    of: Arc<InProgress>,
}

impl InProgress {
    pub(super) fn take(of: &Arc<InProgress>, account_id: &str, most: u32) -> Option<Turn> {
        of.lock().take(account_id, most).then(|| Turn {
            account_id: account_id.to_string(),
            of: of.clone(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        // The counts are left consistent by every holder.
        self.by_account.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.of.lock().give(&self.account_id);
    }
}
