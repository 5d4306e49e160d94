//! HTTP client that makes single webhook delivery attempts.
//!
//! One [`reqwest::Client`] is shared by every delivery (it keeps a keep-alive pool per
//! destination). Redirects are never followed, proxies from the environment are ignored, and
//! DNS answers go through [`PublicOnlyResolver`] so that names cannot lead to internal
//! addresses. An attempt succeeds only on a 2xx whose whole exchange — connect, send, status
//! and reading the (bounded) body — finishes within the timeout.

use std::error::Error as StdError;
use std::fmt;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use reqwest::redirect;
use url::Url;

use super::signing;
use super::ssrf::{self, DestinationPolicy, NonPublicDestination, PublicOnlyResolver};

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
        if timeout.is_zero() {
            return Err("webhook timeout must be greater than zero".to_owned());
        }
        let user_agent = HeaderValue::from_str(user_agent)
            .map_err(|_| "webhook user agent is not a valid header value".to_owned())?;
        let http = reqwest::Client::builder()
            .use_rustls_tls()
            .redirect(redirect::Policy::none())
            .referer(false)
            .no_proxy()
            .https_only(!policy.allow_http)
            .dns_resolver(Arc::new(PublicOnlyResolver::new(policy.allow_private)))
            .connect_timeout(timeout)
            .timeout(timeout)
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .pool_max_idle_per_host(concurrency)
            .user_agent(user_agent)
            .build()
            .map_err(|e| format!("failed to build webhook HTTP client: {}", innermost(&e)))?;
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
        let url = ssrf::validate_webhook_url(raw, &self.inner.policy)?;
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

fn format_duration(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else if Duration::from_millis(d.as_millis() as u64) == d {
        format!("{}ms", d.as_millis())
    } else {
        format!("{d:?}")
    }
}

/// Errors below reqwest's own (whose text includes the URL), outermost first.
fn sources<'a>(err: &'a reqwest::Error) -> impl Iterator<Item = &'a (dyn StdError + 'static)> {
    std::iter::successors(err.source(), |&e| e.source())
}

fn innermost(err: &reqwest::Error) -> String {
    sources(err)
        .last()
        .map(|e| e.to_string())
        .unwrap_or_else(|| "unknown error".to_owned())
}

/// Kinds of every `io::Error` in the chain, including ones wrapped inside another `io::Error`
/// (whose `source()` skips the wrapped error itself).
fn io_kinds(err: &reqwest::Error) -> Vec<io::ErrorKind> {
    let mut kinds = Vec::new();
    for e in sources(err) {
        let mut current = e.downcast_ref::<io::Error>();
        while let Some(io_err) = current {
            kinds.push(io_err.kind());
            current = io_err
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<io::Error>());
        }
    }
    kinds
}

/// Short description of a transport-level failure.
fn describe_error(err: &reqwest::Error, timeout: Duration) -> String {
    if sources(err).any(|e| e.is::<NonPublicDestination>()) {
        return "destination resolves only to non-public addresses".to_owned();
    }
    if err.is_timeout() {
        return timed_out(timeout);
    }
    let detail = innermost(err);
    let kinds = io_kinds(err);
    let io_kind = kinds.iter().copied().find(|kind| {
        matches!(
            kind,
            io::ErrorKind::ConnectionRefused
                | io::ErrorKind::ConnectionReset
                | io::ErrorKind::ConnectionAborted
                | io::ErrorKind::BrokenPipe
                | io::ErrorKind::TimedOut
                | io::ErrorKind::UnexpectedEof
        )
    });
    match io_kind {
        Some(io::ErrorKind::ConnectionRefused) => return "connection refused".to_owned(),
        Some(io::ErrorKind::ConnectionReset) => return "connection reset by peer".to_owned(),
        Some(io::ErrorKind::ConnectionAborted) => return "connection aborted".to_owned(),
        Some(io::ErrorKind::BrokenPipe) => return "connection closed by peer".to_owned(),
        Some(io::ErrorKind::TimedOut) => return timed_out(timeout),
        Some(io::ErrorKind::UnexpectedEof) => {
            return "connection closed before a response was received".to_owned()
        }
        _ => {}
    }
    let messages: Vec<String> = sources(err).map(|e| e.to_string().to_lowercase()).collect();
    let mentions = |needle: &str| messages.iter().any(|m| m.contains(needle));

    if mentions("dns error") || mentions("failed to lookup address") {
        return format!("dns resolution failed: {detail}");
    }
    if mentions("connection closed before message completed") {
        return "connection closed before a response was received".to_owned();
    }
    if err.is_connect() {
        let tls = kinds.contains(&io::ErrorKind::InvalidData)
            || [
                "tls",
                "certificate",
                "handshake",
                "alert",
                "corrupt message",
            ]
            .iter()
            .any(|needle| mentions(needle));
        if tls {
            return format!("tls error: {detail}");
        }
        return format!("connection failed: {detail}");
    }
    if err.is_body() || err.is_decode() {
        return format!("error reading response body: {detail}");
    }
    if err.is_builder() {
        return format!("invalid request: {detail}");
    }
    format!("request failed: {detail}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use std::net::SocketAddr;
    use std::sync::Mutex;

    use axum::body::Body;
    use axum::extract::{ConnectInfo, State};
    use axum::http::{header, StatusCode, Uri};
    use axum::response::{IntoResponse, Response};
    use axum::routing::{any, post};
    use axum::Router;
    use futures::stream;

    const UA: &str = "easel/0.1.0-test";
    const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    const OPEN: DestinationPolicy = DestinationPolicy {
        allow_http: true,
        allow_private: true,
    };

    #[derive(Clone, Debug)]
    struct Recorded {
        path: String,
        peer: SocketAddr,
        headers: axum::http::HeaderMap,
        body: Bytes,
    }

    #[derive(Clone, Default)]
    struct Seen(Arc<Mutex<Vec<Recorded>>>);

    impl Seen {
        fn all(&self) -> Vec<Recorded> {
            self.0.lock().unwrap().clone()
        }
        fn paths(&self) -> Vec<String> {
            self.all().into_iter().map(|r| r.path).collect()
        }
    }

    type Ctx = (Seen, SocketAddr);

    fn record(
        seen: &Seen,
        peer: SocketAddr,
        uri: &Uri,
        headers: axum::http::HeaderMap,
        body: Bytes,
    ) {
        seen.0.lock().unwrap().push(Recorded {
            path: uri.path().to_owned(),
            peer,
            headers,
            body,
        });
    }

    async fn handle(
        State((seen, addr)): State<Ctx>,
        ConnectInfo(peer): ConnectInfo<SocketAddr>,
        uri: Uri,
        headers: axum::http::HeaderMap,
        body: Bytes,
    ) -> Response {
        let path = uri.path().to_owned();
        record(&seen, peer, &uri, headers, body);
        match path.as_str() {
            "/ok" => (StatusCode::OK, "thanks").into_response(),
            "/no-content" => StatusCode::NO_CONTENT.into_response(),
            "/bad" => (StatusCode::BAD_REQUEST, "bad request:\nmissing field `x`").into_response(),
            "/err" => {
                let body = format!("internal boom {}", "x".repeat(4000));
                (StatusCode::INTERNAL_SERVER_ERROR, body).into_response()
            }
            "/redirect" => (
                StatusCode::FOUND,
                [(header::LOCATION, format!("http://{addr}/target"))],
            )
                .into_response(),
            "/slow" => {
                tokio::time::sleep(Duration::from_secs(3)).await;
                StatusCode::OK.into_response()
            }
            "/near-limit" => (StatusCode::OK, vec![b'a'; MAX_RESPONSE_BODY_BYTES]).into_response(),
            "/too-big" => (StatusCode::OK, vec![b'a'; MAX_RESPONSE_BODY_BYTES + 1]).into_response(),
            "/forever-fast" => {
                let chunks =
                    stream::repeat_with(|| Ok::<_, Infallible>(Bytes::from_static(&[b'a'; 4096])));
                (StatusCode::OK, Body::from_stream(chunks)).into_response()
            }
            "/forever-slow" => {
                let chunks = stream::unfold((), |()| async {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    Some((Ok::<_, Infallible>(Bytes::from_static(b"a")), ()))
                });
                (StatusCode::OK, Body::from_stream(chunks)).into_response()
            }
            _ => StatusCode::NOT_FOUND.into_response(),
        }
    }

    async fn start_server() -> (SocketAddr, Seen) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Seen::default();
        let app = Router::new()
            .route("/target", any(handle))
            .route("/{*path}", post(handle))
            .with_state((seen.clone(), addr));
        tokio::spawn(async move {
            axum::serve(
                listener,
                app.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .await
            .unwrap();
        });
        (addr, seen)
    }

    fn client(timeout: Duration, policy: DestinationPolicy) -> WebhookClient {
        WebhookClient::new(timeout, policy, UA, 16).unwrap()
    }

    fn open_client() -> WebhookClient {
        client(Duration::from_secs(5), OPEN)
    }

    fn now() -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64
    }

    const BODY: &[u8] =
        br#"{"task_id":"tsk_01","status":"succeeded","images":[{"url":"https://x/y.png"}]}"#;

    fn delivery<'a>(url: &'a str, key: &'a [u8], secret: Option<&'a str>) -> DeliveryRequest<'a> {
        DeliveryRequest {
            url,
            body: BODY,
            msg_id: "msg_0001",
            timestamp: now(),
            signing_key: key,
            secret_header: secret,
        }
    }

    fn assert_failed(outcome: &AttemptOutcome) -> &str {
        assert!(!outcome.delivered, "unexpectedly delivered: {outcome:?}");
        outcome.error.as_deref().expect("failure has an error")
    }

    #[tokio::test]
    async fn delivers_200_with_exact_body_and_headers() {
        let (addr, seen) = start_server().await;
        let key = signing::decode_secret(SECRET).unwrap();
        let url = format!("http://{addr}/ok");
        let req = delivery(&url, &key, Some("caller-secret-123"));
        let outcome = open_client().send(&req).await;
        assert!(outcome.delivered, "{outcome:?}");
        assert_eq!(outcome.status_code, Some(200));
        assert_eq!(outcome.error, None);
        assert!(outcome.duration < Duration::from_secs(5));

        let all = seen.all();
        assert_eq!(all.len(), 1);
        let got = &all[0];
        assert_eq!(got.path, "/ok");
        assert_eq!(&got.body[..], BODY);
        let h = &got.headers;
        assert_eq!(h["content-type"], "application/json");
        assert_eq!(h["x-webhook-secret"], "caller-secret-123");
        assert_eq!(h["webhook-id"], "msg_0001");
        assert_eq!(h["webhook-timestamp"], req.timestamp.to_string().as_str());
        assert_eq!(h["user-agent"], UA);
        let sig = h["webhook-signature"].to_str().unwrap();
        assert!(sig.starts_with("v1,"), "{sig}");
        assert_eq!(sig, signing::sign(&key, "msg_0001", req.timestamp, BODY));
        standardwebhooks::Webhook::new(SECRET)
            .unwrap()
            .verify(&got.body, h)
            .expect("standardwebhooks verifies the delivery");
    }

    #[tokio::test]
    async fn omits_secret_header_when_none() {
        let (addr, seen) = start_server().await;
        let key = signing::decode_secret(SECRET).unwrap();
        let url = format!("http://{addr}/ok");
        let outcome = open_client().send(&delivery(&url, &key, None)).await;
        assert!(outcome.delivered, "{outcome:?}");
        let all = seen.all();
        assert_eq!(all.len(), 1);
        assert!(all[0].headers.get("x-webhook-secret").is_none());
        assert!(all[0].headers.get("webhook-signature").is_some());
    }

    #[tokio::test]
    async fn delivers_204() {
        let (addr, _seen) = start_server().await;
        let url = format!("http://{addr}/no-content");
        let outcome = open_client().send(&delivery(&url, b"k", None)).await;
        assert!(outcome.delivered, "{outcome:?}");
        assert_eq!(outcome.status_code, Some(204));
        assert_eq!(outcome.error, None);
    }

    #[tokio::test]
    async fn reuses_pooled_connection_and_clones_share_pool() {
        let (addr, seen) = start_server().await;
        let url = format!("http://{addr}/ok");
        let first = open_client();
        let second = first.clone();
        assert!(first.send(&delivery(&url, b"k", None)).await.delivered);
        assert!(second.send(&delivery(&url, b"k", None)).await.delivered);
        let peers: Vec<SocketAddr> = seen.all().iter().map(|r| r.peer).collect();
        assert_eq!(peers.len(), 2);
        assert_eq!(peers[0], peers[1], "keep-alive connection was not reused");
    }

    #[tokio::test]
    async fn fails_on_400_with_status_and_snippet() {
        let (addr, _seen) = start_server().await;
        let url = format!("http://{addr}/bad");
        let outcome = open_client()
            .send(&delivery(&url, b"k", Some("caller-secret-123")))
            .await;
        let error = assert_failed(&outcome);
        assert_eq!(outcome.status_code, Some(400));
        assert_eq!(error, "HTTP 400: bad request: missing field `x`");
    }

    #[tokio::test]
    async fn fails_on_500_with_truncated_snippet() {
        let (addr, _seen) = start_server().await;
        let url = format!("http://{addr}/err");
        let outcome = open_client()
            .send(&delivery(&url, b"k", Some("caller-secret-123")))
            .await;
        let error = assert_failed(&outcome);
        assert_eq!(outcome.status_code, Some(500));
        assert!(error.starts_with("HTTP 500: internal boom xxx"), "{error}");
        assert_eq!(error.len(), "HTTP 500: ".len() + ERROR_SNIPPET_BYTES);
        assert!(!error.contains("caller-secret-123"));
        assert!(!error.contains("v1,"));
    }

    #[tokio::test]
    async fn does_not_follow_redirects() {
        let (addr, seen) = start_server().await;
        let url = format!("http://{addr}/redirect");
        let outcome = open_client().send(&delivery(&url, b"k", None)).await;
        let error = assert_failed(&outcome);
        assert_eq!(outcome.status_code, Some(302));
        assert_eq!(error, "redirect (302) not followed");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(seen.paths(), vec!["/redirect".to_owned()]);
    }

    #[tokio::test]
    async fn times_out_on_slow_server() {
        let (addr, seen) = start_server().await;
        let url = format!("http://{addr}/slow");
        let outcome = client(Duration::from_millis(300), OPEN)
            .send(&delivery(&url, b"k", None))
            .await;
        let error = assert_failed(&outcome);
        assert_eq!(error, "timed out after 300ms");
        assert_eq!(outcome.status_code, None);
        assert!(outcome.duration >= Duration::from_millis(300));
        assert!(outcome.duration < Duration::from_secs(2), "{outcome:?}");
        assert_eq!(seen.paths(), vec!["/slow".to_owned()]);
    }

    #[tokio::test]
    async fn fails_on_endless_slow_2xx_body() {
        let (addr, _seen) = start_server().await;
        let url = format!("http://{addr}/forever-slow");
        let outcome = client(Duration::from_millis(300), OPEN)
            .send(&delivery(&url, b"k", None))
            .await;
        let error = assert_failed(&outcome);
        assert_eq!(error, "timed out after 300ms");
        assert_eq!(outcome.status_code, Some(200));
        assert!(outcome.duration < Duration::from_secs(2), "{outcome:?}");
    }

    #[tokio::test]
    async fn fails_on_endless_fast_2xx_body() {
        let (addr, _seen) = start_server().await;
        let url = format!("http://{addr}/forever-fast");
        let outcome = client(Duration::from_secs(5), OPEN)
            .send(&delivery(&url, b"k", None))
            .await;
        let error = assert_failed(&outcome);
        assert_eq!(error, "response body exceeds 64 KiB");
        assert_eq!(outcome.status_code, Some(200));
    }

    #[tokio::test]
    async fn body_bound_is_inclusive() {
        let (addr, _seen) = start_server().await;
        let c = open_client();
        let near = format!("http://{addr}/near-limit");
        let outcome = c.send(&delivery(&near, b"k", None)).await;
        assert!(outcome.delivered, "{outcome:?}");
        let big = format!("http://{addr}/too-big");
        let outcome = c.send(&delivery(&big, b"k", None)).await;
        assert_eq!(assert_failed(&outcome), "response body exceeds 64 KiB");
        assert_eq!(outcome.status_code, Some(200));
    }

    #[tokio::test]
    async fn fails_when_server_closes_connection() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                drop(stream);
            }
        });
        let url = format!("http://{addr}/ok");
        let outcome = open_client().send(&delivery(&url, b"k", None)).await;
        let error = assert_failed(&outcome);
        assert_eq!(outcome.status_code, None);
        assert!(error.contains("connection"), "{error}");
    }

    #[tokio::test]
    async fn fails_when_server_resets_connection() {
        use tokio::io::AsyncReadExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                let mut buf = [0u8; 1024];
                let _ = stream.read(&mut buf).await;
                let _ = stream.set_zero_linger();
                drop(stream);
            }
        });
        let url = format!("http://{addr}/ok");
        let outcome = open_client().send(&delivery(&url, b"k", None)).await;
        let error = assert_failed(&outcome);
        assert_eq!(outcome.status_code, None);
        assert!(error.contains("connection"), "{error}");
    }

    #[tokio::test]
    async fn fails_on_connection_refused() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let url = format!("http://{addr}/ok");
        let outcome = open_client().send(&delivery(&url, b"k", None)).await;
        assert_eq!(assert_failed(&outcome), "connection refused");
        assert_eq!(outcome.status_code, None);
    }

    #[tokio::test]
    async fn tls_to_plain_http_server_fails() {
        let (addr, seen) = start_server().await;
        let url = format!("https://{addr}/ok");
        let outcome = open_client().send(&delivery(&url, b"k", None)).await;
        let error = assert_failed(&outcome);
        assert_eq!(outcome.status_code, None);
        assert!(error.starts_with("tls error"), "{error}");
        assert!(seen.all().is_empty());
    }

    #[tokio::test]
    async fn default_policy_refuses_loopback_before_sending() {
        let (addr, seen) = start_server().await;
        let port = addr.port();
        let strict = client(Duration::from_secs(5), DestinationPolicy::default());
        for url in [
            format!("https://127.0.0.1:{port}/ok"),
            format!("https://[::1]:{port}/ok"),
            format!("https://localhost:{port}/ok"),
            format!("https://[::ffff:127.0.0.1]:{port}/ok"),
        ] {
            let outcome = strict.send(&delivery(&url, b"k", None)).await;
            assert_eq!(
                assert_failed(&outcome),
                "invalid destination: webhook_url must not point to a private or reserved address",
                "{url}"
            );
            assert_eq!(outcome.status_code, None);
        }
        for url in [
            format!("http://127.0.0.1:{port}/ok"),
            format!("http://localhost:{port}/ok"),
        ] {
            let outcome = strict.send(&delivery(&url, b"k", None)).await;
            assert_eq!(
                assert_failed(&outcome),
                "invalid destination: webhook_url must be an absolute https URL",
                "{url}"
            );
        }
        assert!(seen.all().is_empty());
    }

    /// The last destination that passed is remembered, so that deliveries in a row to one URL
    /// are not parsed again; a refused one is never remembered, and a remembered one never
    /// answers for another URL.
    #[tokio::test]
    async fn a_checked_destination_is_remembered_and_a_refused_one_never_is() {
        let c = client(
            Duration::from_secs(5),
            DestinationPolicy {
                allow_http: true,
                allow_private: false,
            },
        );
        let public = "http://93.184.216.34/hook";
        let private = "http://10.1.2.3/hook";
        assert!(c.checked(private).is_err());
        assert_eq!(c.checked(public).unwrap().as_str(), public);
        assert!(c.checked(private).is_err(), "refused after a public one");
        assert_eq!(c.checked(public).unwrap().as_str(), public);
        let other = c.checked("http://93.184.216.34/other").unwrap();
        assert_eq!(other.path(), "/other");
        assert!(c.checked("http://127.0.0.1/hook").is_err());
        assert!(c.checked("not a url").is_err());
    }

    #[tokio::test]
    async fn allow_http_alone_still_refuses_loopback() {
        let (addr, seen) = start_server().await;
        let port = addr.port();
        let policy = DestinationPolicy {
            allow_http: true,
            allow_private: false,
        };
        let c = client(Duration::from_secs(5), policy);
        for url in [
            format!("http://127.0.0.1:{port}/ok"),
            format!("http://localhost:{port}/ok"),
            format!("http://app.localhost:{port}/ok"),
        ] {
            let outcome = c.send(&delivery(&url, b"k", None)).await;
            assert_eq!(
                assert_failed(&outcome),
                "invalid destination: webhook_url must not point to a private or reserved address",
                "{url}"
            );
        }
        assert!(seen.all().is_empty());
    }

    #[tokio::test]
    async fn resolver_blocks_names_resolving_to_private_addresses() {
        // Bypass the URL check to prove the installed resolver is the last line of defence
        // (a public-looking name that resolves, or re-binds, to loopback).
        let (addr, seen) = start_server().await;
        let policy = DestinationPolicy {
            allow_http: true,
            allow_private: false,
        };
        let c = client(Duration::from_secs(5), policy);
        let url = Url::parse(&format!("http://localhost:{}/ok", addr.port())).unwrap();
        let outcome = c
            .attempt(url, &delivery("unused", b"k", None), Instant::now())
            .await;
        assert_eq!(
            assert_failed(&outcome),
            "destination resolves only to non-public addresses"
        );
        assert_eq!(outcome.status_code, None);
        assert!(seen.all().is_empty());
    }

    #[tokio::test]
    async fn allow_private_reaches_localhost_by_name() {
        let (addr, seen) = start_server().await;
        let url = format!("http://localhost:{}/ok", addr.port());
        let outcome = open_client().send(&delivery(&url, b"k", None)).await;
        assert!(outcome.delivered, "{outcome:?}");
        assert_eq!(seen.paths(), vec!["/ok".to_owned()]);
    }

    #[tokio::test]
    async fn invalid_header_values_fail_without_leaking() {
        let (addr, seen) = start_server().await;
        let url = format!("http://{addr}/ok");
        let c = open_client();
        let outcome = c
            .send(&delivery(&url, b"k", Some("bad\nsecret-value")))
            .await;
        let error = assert_failed(&outcome);
        assert_eq!(error, "x-webhook-secret is not a valid header value");
        let mut req = delivery(&url, b"k", None);
        req.msg_id = "msg\r\n";
        let outcome = c.send(&req).await;
        assert_eq!(
            assert_failed(&outcome),
            "webhook-id is not a valid header value"
        );
        assert!(seen.all().is_empty());
    }

    #[tokio::test]
    async fn unresolvable_host_fails_with_dns_error() {
        let c = open_client();
        let outcome = c
            .send(&delivery("http://does-not-exist.invalid/ok", b"k", None))
            .await;
        let error = assert_failed(&outcome);
        assert_eq!(outcome.status_code, None);
        // Where no resolver answers at all, the lookup itself may run into the timeout.
        assert!(
            error.starts_with("dns resolution failed") || error == "timed out after 5s",
            "{error}"
        );
    }

    #[test]
    fn new_rejects_bad_arguments() {
        assert!(WebhookClient::new(Duration::ZERO, OPEN, UA, 16).is_err());
        assert!(WebhookClient::new(DEFAULT_TIMEOUT, OPEN, "easel\n1", 16).is_err());
        let c = WebhookClient::new(DEFAULT_TIMEOUT, OPEN, UA, 16).unwrap();
        assert_eq!(c.timeout(), DEFAULT_TIMEOUT);
        assert_eq!(c.policy(), OPEN);
    }

    #[test]
    fn formats_durations() {
        assert_eq!(format_duration(Duration::from_secs(10)), "10s");
        assert_eq!(format_duration(Duration::from_millis(300)), "300ms");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
    }

    #[test]
    fn snippet_is_lossy_bounded_and_flattened() {
        assert_eq!(body_snippet(b"  a\r\nb\t "), "a  b");
        assert_eq!(body_snippet(&[0xff, b'o', b'k']), "\u{fffd}ok");
        assert_eq!(body_snippet(&[b'z'; 2000]).len(), ERROR_SNIPPET_BYTES);
    }
}
