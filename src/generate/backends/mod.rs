//! Model backends: the servers people run their image models on, driven over HTTP. Each kind is
//! an adapter implementing [`Generator`](super::Generator); the pool (`generate::pool`) spreads
//! tasks over the configured ones. Their `[[backends]]` settings live in `config::backends`;
//! `http` sorts HTTP answers and failures into the errors a task understands;
//! `edits` (canvases and masks) and `answers` (the images a backend answers with) hold the
//! image work the kinds share. Each kind keeps its protocol client apart from
//! its image and workflow work, and none of them reaches back up here but for the settings.

pub mod answers;
mod build;
pub mod comfyui;
pub mod edits;
pub mod http;
pub mod openai;
pub mod sdcpp;
pub mod sdwebui;
pub mod tls;

pub use build::build;

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use crate::generate::{GenerateError, Job, Progress};
use crate::net::format_duration;

/// The checkpoint of each model a backend serves that names one (`[[models]]` `checkpoint`).
pub type Checkpoints = BTreeMap<String, String>;

/// The checkpoint a job runs on: its model's, else the backend's own `model` setting.
pub fn checkpoint_of<'a>(
    job: &Job,
    checkpoints: &'a Checkpoints,
    own: Option<&'a str>,
) -> Option<&'a str> {
    job.extras
        .settings
        .model
        .as_deref()
        .and_then(|m| checkpoints.get(m))
        .map(String::as_str)
        .or(own)
}

/// Runs `work`, a backend's part of a job, until it ends, the backend's `timeout` passes or the
/// job is stopped. `Err` says why it was cut short (a transient "timed out", or `Canceled`), so
/// that a backend with a queue can take the job off it before answering with that.
pub async fn until_cut<T>(
    timeout: Duration,
    progress: &Progress,
    work: impl Future<Output = T>,
) -> Result<T, GenerateError> {
    tokio::select! {
        timed = tokio::time::timeout(timeout, work) => timed.map_err(|_| {
            GenerateError::transient(format!("timed out after {}", format_duration(timeout)))
        }),
        _ = progress.stopped() => Err(GenerateError::Canceled),
    }
}

/// The `[[backends]]` settings live with the other settings; the adapters read them from here.
pub use crate::config::backends::{kind_can, BackendConfig, BackendKind};
