//! What every handler can reach: the use cases' context and the request rate limits.

use std::sync::Arc;

use super::hosts::DashboardHosts;
use crate::auth::LiveKeys;
use crate::ratelimit::RateLimits;
use crate::tasks::Tasks;

/// Behind one `Arc`: axum clones the state for every request (each extractor that needs it takes
/// its own copy), and one reference count costs less than the dozen its fields hold.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl AppState {
    pub fn new(shared: Shared) -> AppState {
        AppState(Arc::new(shared))
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// The state's contents.
pub struct Shared {
    /// The use cases' context; handlers reach its fields directly (`state.store`). Shared, so
    /// that an event stream can keep it past its handler.
    pub tasks: Arc<Tasks>,
    /// The request rate limits by plan (each plan's `rate`), checked where the key is read.
    pub rate_limits: Arc<RateLimits>,
    /// Reads the settings again and puts what changed in place.
    pub reloader: Arc<crate::deploy::reload::Reloader>,
    /// The host names the dashboard answers to.
    pub hosts: DashboardHosts,
    /// Keys found live a moment ago, so a submit's key is checked before its body is read
    /// without a store read each time.
    pub live_keys: LiveKeys,
}

impl std::ops::Deref for Shared {
    type Target = Tasks;

    fn deref(&self) -> &Tasks {
        &self.tasks
    }
}
