//! HTTP as every backend kind uses it: the client's settings, and how an answer that is not a
//! success or a request that got none is sorted into the errors a task understands (transient,
//! permanent).

use std::time::Duration;

use reqwest::header::{HeaderMap, RETRY_AFTER};
use reqwest::StatusCode;

use super::tls::Trust;
use crate::generate::GenerateError;
use crate::net::failure::{innermost, Failure};

/// The HTTP client of backend `name`: no redirects followed (a backend has no reason to send easel
/// elsewhere), a connection within 10 s or its `timeout` if shorter, and TLS trusting `trust`.
pub fn http_client(
    name: &str,
    timeout: Duration,
    trust: &Trust,
) -> Result<reqwest::Client, String> {
    let builder = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(timeout.min(Duration::from_secs(10)));
    trust
        .http(builder)
        .map_err(|e| format!("backends.{name}.{e}"))?
        .build()
        .map_err(|e| format!("backends.{name}: cannot build an HTTP client: {e}"))
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

/// `body` where `status` is a success, else the error [`status_error`] sorts the answer into.
pub fn successful<B: AsRef<[u8]>>(
    status: StatusCode,
    headers: &HeaderMap,
    body: B,
) -> Result<B, GenerateError> {
    if status.is_success() {
        return Ok(body);
    }
    let text = String::from_utf8_lossy(body.as_ref());
    Err(status_error(status, headers, &text))
}

/// A request that got no answer, sorted by the one reading of client errors (`net::Failure`):
/// every transport failure (refused, reset, timed out, closed early) is transient; a body that
/// is not what was promised is the backend's fault.
pub fn transport_error(e: &reqwest::Error) -> GenerateError {
    if e.is_decode() {
        return GenerateError::Failed(format!("the backend's answer is malformed: {e}"));
    }
    let what = match Failure::of(e) {
        Failure::TimedOut => "timed out",
        Failure::ConnectionRefused
        | Failure::Dns
        | Failure::Tls
        | Failure::Connect
        | Failure::NonPublic => "could not connect",
        _ if e.is_connect() => "could not connect",
        _ => "the connection failed",
    };
    let cause = innermost(e).unwrap_or_else(|| e.to_string());
    GenerateError::transient(format!("{what}: {cause}"))
}

/// The first 200 characters of a body, on one line.
pub fn excerpt(body: &str) -> String {
    let one_line: String = body.split_whitespace().collect::<Vec<_>>().join(" ");
    match one_line.char_indices().nth(200) {
        Some((i, _)) => format!("{}...", &one_line[..i]),
        None => one_line,
    }
}
