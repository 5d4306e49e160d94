//! The HTTP boundary: shared state, extractors (the caller's key, the JSON body, the task id),
//! the one place refusals become responses, the access log, `/metrics`, and the app that puts
//! the API's and the dashboard's routers side by side. Nothing below this layer knows HTTP.

pub mod access;
pub mod app;
pub mod body;
pub mod error;
pub mod extract;
pub mod hosts;
pub mod idempotency;
pub mod metrics;
pub mod prefer;
pub mod server;
pub mod state;
