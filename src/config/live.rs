//! Settings that a reload replaces while easel runs: each reader takes the value as it is now
//! (an `Arc`, cheap to clone) and keeps it for what it is doing, so a request, a claim or a job
//! sees one version from start to end.

use std::sync::{Arc, RwLock};

/// A value that a reload may replace.
pub struct Live<T>(RwLock<Arc<T>>);

impl<T> Live<T> {
    pub fn new(value: T) -> Live<T> {
        Live(RwLock::new(Arc::new(value)))
    }

    /// The value now.
    pub fn get(&self) -> Arc<T> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replace the value; readers that hold the old one keep it until they are done.
    pub fn set(&self, value: T) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(value);
    }
}

impl<T: Default> Default for Live<T> {
    fn default() -> Self {
        Live::new(T::default())
    }
}
