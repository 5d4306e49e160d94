//! The HTTP boundary, as one tree: the JSON API (`api`) and the dashboard (`web`) as children of
//! the module that builds the router (`app`), beside what they share: state, extractors (the
//! caller's key, the JSON body, the task id), the one place refusals become responses, the access
//! log and `/metrics`. Nothing below this layer knows HTTP.

pub mod access;
pub mod api;
pub mod app;
pub mod body;
pub mod client_address;
pub mod extract;
pub mod hosts;
pub mod idempotency;
pub mod metrics;
#[cfg(unix)]
pub mod open_files;
pub mod openai;
pub mod prefer;
pub mod refusal_response;
pub mod server;
pub mod state;
pub mod strict_json;
pub mod web;
