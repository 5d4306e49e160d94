//! HTTP client that makes single webhook delivery attempts.
//!
//! One [`reqwest::Client`] is shared by every delivery (it keeps a keep-alive pool per
//! destination). Redirects are never followed, proxies from the environment are ignored, and
//! DNS answers go through [`PublicOnlyResolver`] so that names cannot lead to internal
//! addresses. An attempt succeeds only on a 2xx whose whole exchange — connect, send, status
//! and reading the (bounded) body — finishes within the timeout.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use url::Url;

use super::signing;
use crate::net::client::callers_client;
use crate::net::failure::innermost;
use crate::net::{
    format_duration, validate_webhook_url, DestinationPolicy, Failure, PublicOnlyResolver,
};

/// Default limit for one whole attempt.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Most response-body bytes read from a destination; a 2xx with a longer body fails.
pub const MAX_RESPONSE_BODY_BYTES: usize = 64 * 1024;
/// Most bytes of a non-2xx response body kept for diagnostics.
pub const ERROR_SNIPPET_BYTES: usize = 512;

const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Delivers webhook attempts. Cheap to clone: clones share one connection pool.
#[derive(Clone)]
pub struct WebhookClient {
    inner: Arc<Inner>,
}

struct Inner {
    http: reqwest::Client,
    timeout: Duration,
    policy: DestinationPolicy,
    /// The last destination that passed the policy, as given and as parsed. Deliveries in a
    /// row often go to one URL; parsing it again for each cost about 6,400 instructions per
    /// delivery (callgrind). The check depends on nothing but the URL and the policy, which is
    /// fixed for the client's life.
    last_checked: Mutex<Option<(String, Url)>>,
}

impl fmt::Debug for WebhookClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebhookClient")
            .field("timeout", &self.inner.timeout)
            .field("policy", &self.inner.policy)
            .finish_non_exhaustive()
    }
}

/// One delivery attempt to make.
#[derive(Clone, Copy)]
pub struct DeliveryRequest<'a> {
    /// Destination URL (checked again against the policy before sending).
    pub url: &'a str,
    /// Exact JSON bytes, sent as-is.
    pub body: &'a [u8],
    /// `webhook-id`: stable across retries of the same message.
    pub msg_id: &'a str,
    /// `webhook-timestamp`: unix seconds of this attempt; part of the signed content.
    pub timestamp: i64,
    /// Decoded `whsec_` signing key.
    pub signing_key: &'a [u8],
    /// Value for `x-webhook-secret`, when the caller supplied one.
    pub secret_header: Option<&'a str>,
}

impl fmt::Debug for DeliveryRequest<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the key or the secret.
        f.debug_struct("DeliveryRequest")
            .field("url", &self.url)
            .field("body_len", &self.body.len())
            .field("msg_id", &self.msg_id)
            .field("timestamp", &self.timestamp)
            .field("has_secret_header", &self.secret_header.is_some())
            .finish_non_exhaustive()
    }
}

/// What happened in one attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptOutcome {
    /// `true` only for a 2xx whose whole exchange finished within the timeout.
    pub delivered: bool,
    /// Response status, when one was received.
    pub status_code: Option<u16>,
    /// Short human-readable reason when not delivered. Never contains the secret or signature.
    pub error: Option<String>,
    /// Wall time of the attempt.
    pub duration: Duration,
}

impl AttemptOutcome {
    fn delivered(status: u16, duration: Duration) -> Self {
        Self {
            delivered: true,
            status_code: Some(status),
            error: None,
            duration,
        }
    }

    fn failed(status_code: Option<u16>, error: String, duration: Duration) -> Self {
        Self {
            delivered: false,
            status_code,
            error: Some(error),
            duration,
        }
    }
}

/// What the exchange got to before it finished, failed or was cut off by the timeout.
#[derive(Default)]
struct Progress {
    status: Option<u16>,
    snippet: Vec<u8>,
    oversized: bool,
}

impl WebhookClient {
    /// Build the shared HTTP client.
    ///
    /// `timeout` bounds each whole attempt (use [`DEFAULT_TIMEOUT`] unless configured);
    /// `user_agent` is sent on every request (e.g. `easel/0.1.0`); `concurrency` is how many
    /// attempts may be in flight at once, and as many idle connections per destination are kept
    /// for reuse (fewer would close and reopen connections to a busy receiver all the time).
    pub fn new(
        timeout: Duration,
        policy: DestinationPolicy,
        user_agent: &str,
        concurrency: usize,
    ) -> Result<Self, String> {
        let resolver = PublicOnlyResolver::new(policy.allow_private);
        let http = callers_client("webhook", policy, resolver, timeout, user_agent)?
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .pool_max_idle_per_host(concurrency)
            .build()
            .map_err(|e| {
                format!(
                    "failed to build webhook HTTP client: {}",
                    innermost(&e).unwrap_or_else(|| "unknown error".to_owned())
                )
            })?;
        Ok(Self {
            inner: Arc::new(Inner {
                http,
                timeout,
                policy,
                last_checked: Mutex::new(None),
            }),
        })
    }

    /// Limit for one whole attempt.
    pub fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// Destination policy the client enforces.
    pub fn policy(&self) -> DestinationPolicy {
        self.inner.policy
    }

    /// Make one attempt. Never panics; every failure becomes an [`AttemptOutcome`].
    ///
    /// The URL is checked again first: the policy may have changed since submit, and reqwest
    /// does not consult the resolver for IP-literal hosts.
    pub async fn send(&self, req: &DeliveryRequest<'_>) -> AttemptOutcome {
        let started = Instant::now();
        let url = match self.checked(req.url) {
            Ok(url) => url,
            Err(msg) => {
                return AttemptOutcome::failed(
                    None,
                    format!("invalid destination: webhook_url {msg}"),
                    started.elapsed(),
                )
            }
        };
        self.attempt(url, req, started).await
    }

    /// `raw` parsed and checked against the policy (IP-literal hosts must be public unless
    /// private destinations are allowed; names are checked when they are resolved).
    fn checked(&self, raw: &str) -> Result<Url, String> {
        let mut last = self.inner.last_checked.lock().expect("not poisoned");
        if let Some((seen, url)) = last.as_ref() {
            if seen == raw {
                return Ok(url.clone());
            }
        }
        let url = validate_webhook_url(raw, &self.inner.policy)?;
        *last = Some((raw.to_string(), url.clone()));
        Ok(url)
    }

    /// The attempt itself, for a URL that already passed the policy check.
    async fn attempt(
        &self,
        url: Url,
        req: &DeliveryRequest<'_>,
        started: Instant,
    ) -> AttemptOutcome {
        let timeout = self.inner.timeout;
        let headers = match delivery_headers(req) {
            Ok(headers) => headers,
            Err(msg) => return AttemptOutcome::failed(None, msg, started.elapsed()),
        };
        let request = self
            .inner
            .http
            .post(url)
            .headers(headers)
            .body(Bytes::copy_from_slice(req.body));

        let mut progress = Progress::default();
        let result = tokio::time::timeout(timeout, exchange(request, &mut progress)).await;
        let duration = started.elapsed();

        let outcome = match (result, progress.status) {
            // A non-2xx status decides the outcome whatever happened while draining its body.
            (_, Some(status)) if !is_success(status) => {
                AttemptOutcome::failed(Some(status), status_error(status, &progress), duration)
            }
            (Err(_elapsed), status) => AttemptOutcome::failed(status, timed_out(timeout), duration),
            (Ok(Err(err)), status) => {
                AttemptOutcome::failed(status, describe_error(&err, timeout), duration)
            }
            (Ok(Ok(())), Some(status)) if progress.oversized => AttemptOutcome::failed(
                Some(status),
                format!(
                    "response body exceeds {} KiB",
                    MAX_RESPONSE_BODY_BYTES / 1024
                ),
                duration,
            ),
            (Ok(Ok(())), Some(status)) => AttemptOutcome::delivered(status, duration),
            (Ok(Ok(())), None) => {
                AttemptOutcome::failed(None, "no response received".to_owned(), duration)
            }
        };
        if let Some(error) = &outcome.error {
            tracing::debug!(
                msg_id = req.msg_id,
                status = outcome.status_code,
                error = error.as_str(),
                elapsed_ms = duration.as_millis() as u64,
                "webhook attempt failed"
            );
        }
        outcome
    }
}

fn is_success(status: u16) -> bool {
    (200..300).contains(&status)
}

/// Send the request and read the response body up to the bound, recording what was seen.
async fn exchange(
    request: reqwest::RequestBuilder,
    progress: &mut Progress,
) -> Result<(), reqwest::Error> {
    let mut response = request.send().await?;
    let status = response.status().as_u16();
    progress.status = Some(status);

    if is_success(status) {
        if response
            .content_length()
            .is_some_and(|len| len > MAX_RESPONSE_BODY_BYTES as u64)
        {
            progress.oversized = true;
            return Ok(());
        }
        let mut total = 0usize;
        while let Some(chunk) = response.chunk().await? {
            total = total.saturating_add(chunk.len());
            if total > MAX_RESPONSE_BODY_BYTES {
                progress.oversized = true;
                return Ok(());
            }
        }
    } else {
        // Keep the start for diagnostics; drain up to the bound so the connection may be reused.
        let mut total = 0usize;
        while let Some(chunk) = response.chunk().await? {
            let room = ERROR_SNIPPET_BYTES.saturating_sub(progress.snippet.len());
            progress
                .snippet
                .extend_from_slice(&chunk[..room.min(chunk.len())]);
            total = total.saturating_add(chunk.len());
            if total > MAX_RESPONSE_BODY_BYTES {
                break;
            }
        }
    }
    Ok(())
}

fn delivery_headers(req: &DeliveryRequest<'_>) -> Result<HeaderMap, String> {
    let mut headers = HeaderMap::with_capacity(5);
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let msg_id = HeaderValue::from_str(req.msg_id)
        .map_err(|_| "webhook-id is not a valid header value".to_owned())?;
    headers.insert(HeaderName::from_static("webhook-id"), msg_id);
    headers.insert(
        HeaderName::from_static("webhook-timestamp"),
        HeaderValue::from(req.timestamp),
    );
    let signature = signing::sign(req.signing_key, req.msg_id, req.timestamp, req.body);
    let mut signature = HeaderValue::from_str(&signature)
        .map_err(|_| "webhook-signature is not a valid header value".to_owned())?;
    signature.set_sensitive(true);
    headers.insert(HeaderName::from_static("webhook-signature"), signature);
    if let Some(secret) = req.secret_header {
        let mut value = HeaderValue::from_str(secret)
            .map_err(|_| "x-webhook-secret is not a valid header value".to_owned())?;
        value.set_sensitive(true);
        headers.insert(HeaderName::from_static("x-webhook-secret"), value);
    }
    Ok(headers)
}

fn status_error(status: u16, progress: &Progress) -> String {
    if (300..400).contains(&status) {
        return format!("redirect ({status}) not followed");
    }
    let snippet = body_snippet(&progress.snippet);
    if snippet.is_empty() {
        format!("HTTP {status}")
    } else {
        format!("HTTP {status}: {snippet}")
    }
}

/// Lossy UTF-8 of at most [`ERROR_SNIPPET_BYTES`] bytes, control characters flattened.
fn body_snippet(bytes: &[u8]) -> String {
    let bytes = &bytes[..bytes.len().min(ERROR_SNIPPET_BYTES)];
    String::from_utf8_lossy(bytes)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect::<String>()
        .trim()
        .to_owned()
}

fn timed_out(timeout: Duration) -> String {
    format!("timed out after {}", format_duration(timeout))
}

/// Short description of a transport-level failure.
fn describe_error(err: &reqwest::Error, timeout: Duration) -> String {
    let detail = || innermost(err).unwrap_or_else(|| "unknown error".to_owned());
    match Failure::of(err) {
        Failure::NonPublic => "destination resolves only to non-public addresses".to_owned(),
        Failure::TimedOut => timed_out(timeout),
        Failure::ConnectionRefused => "connection refused".to_owned(),
        Failure::ConnectionReset => "connection reset by peer".to_owned(),
        Failure::ConnectionAborted => "connection aborted".to_owned(),
        Failure::BrokenPipe => "connection closed by peer".to_owned(),
        Failure::ClosedEarly => "connection closed before a response was received".to_owned(),
        Failure::Dns => format!("dns resolution failed: {}", detail()),
        Failure::Tls => format!("tls error: {}", detail()),
        Failure::Connect => format!("connection failed: {}", detail()),
        Failure::Body => format!("error reading response body: {}", detail()),
        Failure::Builder => format!("invalid request: {}", detail()),
        Failure::Other => format!("request failed: {}", detail()),
    }
}

#[cfg(test)]
mod tests;
