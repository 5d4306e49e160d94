//! The event streams open on this node, counted under their limits.

use std::sync::{Arc, Mutex};

use super::in_progress::Counts;
use crate::config::limits::Limits;
use crate::refusal::ApiError;

/// The streams open on this node, by account, under `max_streams_per_account` and
/// `max_streams`.
pub struct Streams {
    open: Mutex<Open>,
    /// What the streams say alike of one event, made once.
    pub memo: super::event_memo::EventMemo,
    per_account: u32,
    total: u32,
}

#[derive(Default)]
struct Open {
    by_account: Counts,
    total: u32,
}

/// One open stream's place under the limits; given back when dropped (the connection closed).
pub struct StreamSlot {
    account_id: String,
    streams: Arc<Streams>,
}

impl Streams {
    pub fn new(limits: &Limits) -> Streams {
        Streams {
            open: Mutex::default(),
            memo: Default::default(),
            per_account: limits.max_streams_per_account,
            total: limits.max_streams,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        // The counts are left consistent by every holder.
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Take a place for one more stream of `account_id`: 429 past the account's limit, 503 past
    /// the node's.
    pub fn open(streams: &Arc<Streams>, account_id: &str) -> Result<StreamSlot, ApiError> {
        let mut open = streams.lock();
        if open.total >= streams.total {
            return Err(ApiError::Unavailable {
                msg: format!(
                    "this node has its most event streams open ({}); try again shortly",
                    streams.total
                ),
                retry_after_secs: 5,
            });
        }
        if !open.by_account.take(account_id, streams.per_account) {
            return Err(ApiError::QuotaExceeded {
                msg: format!(
                    "the account has its most event streams open on this node ({}); close one \
                     first",
                    streams.per_account
                ),
                retry_after_secs: 5,
            });
        }
        open.total += 1;
        crate::metrics::event_streams(1);
        Ok(StreamSlot {
            account_id: account_id.to_string(),
            streams: streams.clone(),
        })
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = self.streams.lock();
        open.total -= 1;
        open.by_account.give(&self.account_id);
        crate::metrics::event_streams(-1);
    }
}
