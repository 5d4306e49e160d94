//! Model backends: the servers people run their image models on, driven over HTTP. Each kind is
//! an adapter implementing [`Generator`](super::Generator); the pool (`generate::pool`) spreads
//! tasks over the configured ones. This module holds what every adapter shares: the `[[backends]]`
//! settings, the secrets they name, and how an HTTP answer or failure is sorted into the errors a
//! task understands (transient, permanent, refused).

pub mod comfyui;
pub mod openai;
pub mod sdwebui;

use std::time::Duration;

use reqwest::header::{HeaderMap, RETRY_AFTER};
use reqwest::StatusCode;

use std::sync::Arc;

use super::inputs::{decode, InputLimits};
use super::pool::Pool;
use super::raster::{dimensions, RgbaImage};
use super::{GenerateError, Generator, Job, Procedural};
pub use crate::config::backends::{kind_can, BackendConfig, BackendKind};
use crate::config::Config;

/// The pool of the configured backends; without any, one `procedural` backend that runs as many
/// jobs at once as there are workers. An error naming the backend and the setting when one
/// cannot work (an unset key variable, a missing workflow file).
pub fn build(config: &Config) -> anyhow::Result<Pool> {
    let mut members: Vec<(Arc<dyn Generator>, usize)> = Vec::new();
    if config.backends.is_empty() {
        let procedural = Procedural::new(config.worker.procedural_min_duration);
        members.push((Arc::new(procedural), config.worker.workers.max(1)));
    }
    for backend in &config.backends {
        let fail = |e: String| anyhow::anyhow!("configuration: {e}");
        let generator: Arc<dyn Generator> = match backend.kind {
            BackendKind::Procedural => Arc::new(Procedural {
                name: backend.name.clone(),
                min_duration: config.worker.procedural_min_duration,
            }),
            BackendKind::Openai => Arc::new(openai::OpenAi::new(backend).map_err(fail)?),
            BackendKind::Sdwebui => Arc::new(sdwebui::SdWebUi::new(backend).map_err(fail)?),
            BackendKind::Comfyui => Arc::new(comfyui::ComfyUi::new(backend).map_err(fail)?),
        };
        members.push((generator, backend.concurrency));
    }
    Ok(Pool::new(members, config.worker.generation_budget))
}

/// The HTTP client of one backend: no redirects followed (a backend has no reason to send easel
/// elsewhere), and a connection within 10 s or the backend's timeout if shorter.
pub fn http_client(config: &BackendConfig) -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(config.timeout.min(Duration::from_secs(10)))
        .build()
        .map_err(|e| format!("backends.{}: cannot build an HTTP client: {e}", config.name))
}

/// The size to ask a backend for: the job's new-image size with both sides rounded to a multiple
/// of `multiple` (at least one multiple).
pub fn size_for(job: &Job, multiple: u32) -> (u32, u32) {
    let (w, h) = dimensions(job.aspect.width, job.aspect.height, job.image_size);
    let round = |v: u32| ((v + multiple / 2) / multiple).max(1) * multiple;
    (round(w), round(h))
}

/// A `Retry-After` header's delay (seconds, or an HTTP date), capped at ten minutes.
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    let delay = match value.parse::<u64>() {
        Ok(secs) => Duration::from_secs(secs),
        Err(_) => {
            let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
            (at.with_timezone(&chrono::Utc) - chrono::Utc::now())
                .to_std()
                .unwrap_or_default()
        }
    };
    Some(delay.min(Duration::from_secs(600)))
}

/// An answer that is not a success, sorted: 408, 429 and 5xx are transient (with the backend's
/// `Retry-After`); any other status is the backend rejecting the job. `detail` is a short excerpt
/// of its body, for the task's `error`.
pub fn status_error(status: StatusCode, headers: &HeaderMap, body: &str) -> GenerateError {
    let detail = excerpt(body);
    let message = if detail.is_empty() {
        format!("the backend answered HTTP {}", status.as_u16())
    } else {
        format!("the backend answered HTTP {}: {detail}", status.as_u16())
    };
    if status == StatusCode::TOO_MANY_REQUESTS
        || status == StatusCode::REQUEST_TIMEOUT
        || status.is_server_error()
    {
        GenerateError::Transient {
            message,
            retry_after: retry_after(headers),
        }
    } else {
        GenerateError::Failed(message)
    }
}

/// A request that got no answer, sorted: every transport failure (refused, reset, timed out,
/// closed early) is transient; a body that is not what was promised is the backend's fault.
pub fn transport_error(e: &reqwest::Error) -> GenerateError {
    if e.is_decode() {
        return GenerateError::Failed(format!("the backend's answer is malformed: {e}"));
    }
    let what = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "could not connect"
    } else {
        "the connection failed"
    };
    GenerateError::transient(format!("{what}: {}", innermost(e)))
}

/// The innermost cause of an error, which says what happened (without the URL, which may hold
/// credentials).
fn innermost(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

/// The first 200 characters of a body, on one line.
pub fn excerpt(body: &str) -> String {
    let one_line: String = body.split_whitespace().collect::<Vec<_>>().join(" ");
    match one_line.char_indices().nth(200) {
        Some((i, _)) => format!("{}...", &one_line[..i]),
        None => one_line,
    }
}

/// Decode an image a backend made, under the input limits: a malformed one is the backend's
/// fault, never a panic.
pub fn decode_output(bytes: &[u8], what: &str) -> Result<RgbaImage, GenerateError> {
    decode(bytes, &InputLimits::default())
        .map_err(|e| GenerateError::Failed(format!("{what} from the backend: {e}")))
}
