//! Fetching an input image by URL: every hop checked under the destination policy, the body
//! bounded in size and time.

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use reqwest::header::{HeaderValue, ACCEPT, LOCATION};
use reqwest::StatusCode;
use url::{Host, Url};

use super::{InputError, InputLimits};
use crate::net::address::is_link_local;
use crate::net::client::callers_client;
use crate::net::destination::NoLinkLocalResolver;
use crate::net::failure::innermost;
use crate::net::{validate_webhook_url, DestinationPolicy, Failure, PublicOnlyResolver};

/// A client for input images; cheap to clone (clones share one connection pool).
#[derive(Clone)]
pub struct ImageFetcher {
    inner: Arc<Fetcher>,
}

struct Fetcher {
    http: reqwest::Client,
    policy: DestinationPolicy,
    limits: InputLimits,
}

impl fmt::Debug for ImageFetcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ImageFetcher")
            .field("policy", &self.inner.policy)
            .field("limits", &self.inner.limits)
            .finish_non_exhaustive()
    }
}

impl ImageFetcher {
    /// Build the shared HTTP client: no redirects followed by reqwest (they are followed and
    /// checked here), no proxies from the environment, https only unless `allow_http`, and DNS
    /// answers filtered by [`PublicOnlyResolver`] and the link-local rule.
    pub fn new(
        policy: DestinationPolicy,
        limits: InputLimits,
        user_agent: &str,
    ) -> Result<ImageFetcher, String> {
        let resolver = NoLinkLocalResolver {
            inner: PublicOnlyResolver::new(policy.allow_private),
        };
        let http = callers_client("input image", policy, resolver, limits.timeout, user_agent)?
            .build()
            .map_err(|e| format!("failed to build input image HTTP client: {e}"))?;
        Ok(ImageFetcher {
            inner: Arc::new(Fetcher {
                http,
                policy,
                limits,
            }),
        })
    }

    /// The limits this fetcher applies.
    pub fn limits(&self) -> InputLimits {
        self.inner.limits
    }

    /// Check a URL at submit time without network access: scheme per policy, host, length,
    /// user info, IP-literal hosts (link-local ones always refused). Returns the parsed URL or
    /// a short lowercase reason without the field's name, like [`validate_webhook_url`].
    pub fn validate(&self, raw: &str) -> Result<Url, String> {
        let url = validate_webhook_url(raw, &self.inner.policy)?;
        let literal = match url.host() {
            Some(Host::Ipv4(ip)) => Some(IpAddr::V4(ip)),
            Some(Host::Ipv6(ip)) => Some(IpAddr::V6(ip)),
            _ => None,
        };
        if literal.is_some_and(is_link_local) {
            return Err("must not point to a link-local address".to_owned());
        }
        Ok(url)
    }

    /// Fetch the bytes at `url` under the policy and limits: at most `max_redirects` redirects,
    /// each checked again; the whole fetch within `timeout`; at most `max_bytes` read.
    pub async fn fetch(&self, url: &str) -> Result<Bytes, InputError> {
        let url = self.validate(url).map_err(InputError::InvalidUrl)?;
        let timeout = self.inner.limits.timeout;
        match tokio::time::timeout(timeout, self.fetch_from(url)).await {
            Ok(result) => result,
            Err(_elapsed) => Err(InputError::TimedOut(timeout)),
        }
    }

    /// The fetch of a URL that passed [`ImageFetcher::validate`].
    async fn fetch_from(&self, mut url: Url) -> Result<Bytes, InputError> {
        let limits = self.inner.limits;
        let mut redirects = 0;
        loop {
            let response = self
                .inner
                .http
                .get(url.clone())
                .header(
                    ACCEPT,
                    HeaderValue::from_static("image/png, image/jpeg, image/webp, image/gif"),
                )
                .send()
                .await
                .map_err(|e| transport_error(&e, limits.timeout))?;
            let status = response.status();
            if is_followed_redirect(status) {
                if redirects == limits.max_redirects {
                    return Err(InputError::TooManyRedirects(limits.max_redirects));
                }
                let next = response
                    .headers()
                    .get(LOCATION)
                    .and_then(|value| value.to_str().ok())
                    .and_then(|location| url.join(location).ok())
                    .ok_or(InputError::BadRedirect(status.as_u16()))?;
                url = self.check_hop(&next)?;
                redirects += 1;
                continue;
            }
            if !status.is_success() {
                return Err(InputError::Status(status.as_u16()));
            }
            return read_body(response, limits).await;
        }
    }

    /// A redirect target checked as a caller's URL would be, the refusal worded for a hop.
    fn check_hop(&self, target: &Url) -> Result<Url, InputError> {
        let policy = self.inner.policy;
        let scheme_ok = match target.scheme() {
            "https" => true,
            "http" => policy.allow_http,
            _ => false,
        };
        if !scheme_ok {
            let to = if policy.allow_http {
                "to a URL that is not http or https"
            } else {
                "to a URL that is not https"
            };
            return Err(InputError::RedirectRefused(to.to_owned()));
        }
        self.validate(target.as_str()).map_err(|reason| {
            if reason.starts_with("must not point to") {
                InputError::RedirectRefused("to a non-public address".to_owned())
            } else {
                InputError::RedirectRefused(format!("to an unusable URL ({reason})"))
            }
        })
    }
}

/// The redirect statuses that carry a new location for the same GET. 300 (a choice), 304 (no
/// conditional request was made) and 305/306 are not followed and fail as statuses.
fn is_followed_redirect(status: StatusCode) -> bool {
    matches!(status.as_u16(), 301 | 302 | 303 | 307 | 308)
}

/// Read the body, failing as soon as it passes `max_bytes`: a declared `Content-Length` over
/// the limit fails before reading, and an undeclared or chunked body is counted as it arrives.
async fn read_body(response: reqwest::Response, limits: InputLimits) -> Result<Bytes, InputError> {
    if response
        .content_length()
        .is_some_and(|len| len > limits.max_bytes)
    {
        return Err(InputError::TooLarge(limits.max_bytes));
    }
    // The declared length sizes the buffer only up to the limit, so a lie costs nothing.
    let capacity = response
        .content_length()
        .unwrap_or(0)
        .min(limits.max_bytes)
        .min(usize::MAX as u64) as usize;
    let mut body = BytesMut::with_capacity(capacity);
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| transport_error(&e, limits.timeout))?;
        if body.len() as u64 + chunk.len() as u64 > limits.max_bytes {
            return Err(InputError::TooLarge(limits.max_bytes));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

/// Sort a transport failure into a short reason and whether it may pass if tried again.
fn transport_error(err: &reqwest::Error, timeout: Duration) -> InputError {
    let detail = || innermost(err).unwrap_or_else(|| err.to_string());
    let transport = |reason: String, transient: bool| InputError::Transport { reason, transient };
    match Failure::of(err) {
        Failure::NonPublic => InputError::NonPublicHost,
        Failure::TimedOut => InputError::TimedOut(timeout),
        Failure::ConnectionRefused => transport("connection refused".to_owned(), true),
        Failure::ConnectionReset => transport("connection reset by peer".to_owned(), true),
        Failure::ConnectionAborted | Failure::BrokenPipe | Failure::ClosedEarly => {
            transport("connection closed early".to_owned(), true)
        }
        // Mostly a name that does not exist; a resolver's passing failure looks the same.
        Failure::Dns => transport(format!("dns resolution failed: {}", detail()), false),
        Failure::Tls => transport(format!("tls error: {}", detail()), false),
        Failure::Connect => transport(format!("connection failed: {}", detail()), true),
        Failure::Body => transport(format!("error reading the body: {}", detail()), true),
        Failure::Builder | Failure::Other => {
            transport(format!("request failed: {}", detail()), false)
        }
    }
}

#[cfg(test)]
mod tests;
