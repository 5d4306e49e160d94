//! The delivery client against real local servers: statuses, bodies, timeouts, broken
//! connections and the destination policy.

use super::*;
use crate::net::testing::Recording;
use crate::net::testing::{self, closed_port, endless, raw_server, resetting_server};
use crate::net::testing::{serve_recording, trickle};
use std::net::SocketAddr;

use axum::extract::{ConnectInfo, State};
use axum::http::{header, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, post};
use axum::Router;

const UA: &str = "easel/0.1.0-test";
const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
const OPEN: DestinationPolicy = DestinationPolicy::OPEN;
/// Plain http allowed, private addresses not: what stops a name that resolves to loopback.
const HTTP: DestinationPolicy = DestinationPolicy {
    allow_http: true,
    allow_private: false,
};
const PRIVATE: &str =
    "invalid destination: webhook_url must not point to a private or reserved address";

#[derive(Clone, Debug)]
struct Recorded {
    path: String,
    peer: SocketAddr,
    headers: axum::http::HeaderMap,
    body: Bytes,
}

type Seen = testing::Seen<Recorded>;

impl Seen {
    fn paths(&self) -> Vec<String> {
        self.all().into_iter().map(|r| r.path).collect()
    }
}

async fn handle(
    State((seen, addr)): State<Recording<Recorded>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    uri: Uri,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_owned();
    seen.record(Recorded {
        path: path.clone(),
        peer,
        headers,
        body,
    });
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
        "/forever-fast" => (StatusCode::OK, endless(&[b'a'; 4096])).into_response(),
        "/forever-slow" => (StatusCode::OK, trickle()).into_response(),
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn start_server() -> (SocketAddr, Seen) {
    let routes = Router::new()
        .route("/target", any(handle))
        .route("/{*path}", post(handle));
    serve_recording(routes).await
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

/// A delivery (with a caller's secret) to `path` on a fresh test server, by a client with
/// `timeout`, that must fail: its outcome, its error, and the paths the server saw.
async fn failed_delivery(path: &str, timeout: Duration) -> (AttemptOutcome, String, Seen) {
    let (addr, seen) = start_server().await;
    let url = format!("http://{addr}{path}");
    let outcome = client(timeout, OPEN)
        .send(&delivery(&url, b"k", Some("caller-secret-123")))
        .await;
    let error = assert_failed(&outcome).to_owned();
    (outcome, error, seen)
}

/// Deliveries to `urls` that `c` refuses before sending anything, each with `error`.
async fn assert_refused(c: &WebhookClient, urls: &[String], error: &str) {
    for url in urls {
        let outcome = c.send(&delivery(url, b"k", None)).await;
        assert_eq!(assert_failed(&outcome), error, "{url}");
        assert_eq!(outcome.status_code, None);
    }
}

/// A delivery to `addr`, where the connection breaks before any answer: no status, and the
/// error it records.
async fn failed_connection(addr: SocketAddr) -> String {
    let url = format!("http://{addr}/ok");
    let outcome = open_client().send(&delivery(&url, b"k", None)).await;
    assert_eq!(outcome.status_code, None);
    assert_failed(&outcome).to_owned()
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
    let (outcome, error, _) = failed_delivery("/bad", Duration::from_secs(5)).await;
    assert_eq!(outcome.status_code, Some(400));
    assert_eq!(error, "HTTP 400: bad request: missing field `x`");
}

#[tokio::test]
async fn fails_on_500_with_truncated_snippet() {
    let (outcome, error, _) = failed_delivery("/err", Duration::from_secs(5)).await;
    assert_eq!(outcome.status_code, Some(500));
    assert!(error.starts_with("HTTP 500: internal boom xxx"), "{error}");
    assert_eq!(error.len(), "HTTP 500: ".len() + ERROR_SNIPPET_BYTES);
    assert!(!error.contains("caller-secret-123"));
    assert!(!error.contains("v1,"));
}

#[tokio::test]
async fn does_not_follow_redirects() {
    let (outcome, error, seen) = failed_delivery("/redirect", Duration::from_secs(5)).await;
    assert_eq!(outcome.status_code, Some(302));
    assert_eq!(error, "redirect (302) not followed");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(seen.paths(), vec!["/redirect".to_owned()]);
}

#[tokio::test]
async fn times_out_on_slow_server() {
    let (outcome, error, seen) = failed_delivery("/slow", Duration::from_millis(300)).await;
    assert_eq!(error, "timed out after 300ms");
    assert_eq!(outcome.status_code, None);
    assert!(outcome.duration >= Duration::from_millis(300));
    assert!(outcome.duration < Duration::from_secs(2), "{outcome:?}");
    assert_eq!(seen.paths(), vec!["/slow".to_owned()]);
}

#[tokio::test]
async fn fails_on_endless_slow_2xx_body() {
    let (outcome, error, _) = failed_delivery("/forever-slow", Duration::from_millis(300)).await;
    assert_eq!(error, "timed out after 300ms");
    assert_eq!(outcome.status_code, Some(200));
    assert!(outcome.duration < Duration::from_secs(2), "{outcome:?}");
}

#[tokio::test]
async fn fails_on_endless_fast_2xx_body() {
    let (outcome, error, _) = failed_delivery("/forever-fast", Duration::from_secs(5)).await;
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
    let addr = raw_server(|stream| async move { drop(stream) }).await;
    let error = failed_connection(addr).await;
    assert!(error.contains("connection"), "{error}");
}

#[tokio::test]
async fn fails_when_server_resets_connection() {
    let addr = resetting_server().await;
    let error = failed_connection(addr).await;
    assert!(error.contains("connection"), "{error}");
}

#[tokio::test]
async fn fails_on_connection_refused() {
    let error = failed_connection(closed_port().await).await;
    assert_eq!(error, "connection refused");
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
    let private = [
        format!("https://127.0.0.1:{port}/ok"),
        format!("https://[::1]:{port}/ok"),
        format!("https://localhost:{port}/ok"),
        format!("https://[::ffff:127.0.0.1]:{port}/ok"),
    ];
    assert_refused(&strict, &private, PRIVATE).await;
    let http = [
        format!("http://127.0.0.1:{port}/ok"),
        format!("http://localhost:{port}/ok"),
    ];
    let https_only = "invalid destination: webhook_url must be an absolute https URL";
    assert_refused(&strict, &http, https_only).await;
    assert!(seen.all().is_empty());
}

/// The last destination that passed is remembered, so that deliveries in a row to one URL
/// are not parsed again; a refused one is never remembered, and a remembered one never
/// answers for another URL.
#[tokio::test]
async fn a_checked_destination_is_remembered_and_a_refused_one_never_is() {
    let c = client(Duration::from_secs(5), HTTP);
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
    let loopback = [
        format!("http://127.0.0.1:{port}/ok"),
        format!("http://localhost:{port}/ok"),
        format!("http://app.localhost:{port}/ok"),
    ];
    assert_refused(&client(Duration::from_secs(5), HTTP), &loopback, PRIVATE).await;
    assert!(seen.all().is_empty());
}

#[tokio::test]
async fn resolver_blocks_names_resolving_to_private_addresses() {
    // Bypass the URL check to prove the installed resolver is the last line of defence
    // (a public-looking name that resolves, or re-binds, to loopback).
    let (addr, seen) = start_server().await;
    let c = client(Duration::from_secs(5), HTTP);
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
fn snippet_is_lossy_bounded_and_flattened() {
    assert_eq!(body_snippet(b"  a\r\nb\t "), "a  b");
    assert_eq!(body_snippet(&[0xff, b'o', b'k']), "\u{fffd}ok");
    assert_eq!(body_snippet(&[b'z'; 2000]).len(), ERROR_SNIPPET_BYTES);
}
