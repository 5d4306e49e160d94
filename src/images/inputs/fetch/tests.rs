//! Fetching against local servers: formats, redirects, the destination policy, size and time
//! limits, and how failures are sorted.

use super::*;
use crate::images::inputs::decode;
use crate::images::inputs::samples::*;
use crate::net::destination::without_link_local;
use crate::net::testing::Recording;
use crate::net::testing::{self, closed_port, endless, raw_server, resetting_server};
use crate::net::testing::{serve_recording, trickle};
use crate::net::NonPublicDestination;
use reqwest::dns::Resolve;
use std::net::SocketAddr;
use std::time::Instant;

use axum::extract::State;
use axum::http::{header, StatusCode as Code, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use tokio::io::AsyncWriteExt;

const UA: &str = "easel/0.1.0-test";
/// Development switches on, so the loopback test servers are reachable.
const OPEN: DestinationPolicy = DestinationPolicy::OPEN;
const STRICT: DestinationPolicy = DestinationPolicy::STRICT;
/// Small enough that the size tests stay quick.
const SMALL_MAX_BYTES: u64 = 1000;

fn fetcher(limits: InputLimits) -> ImageFetcher {
    ImageFetcher::new(OPEN, limits, UA).unwrap()
}

/// The paths the test server was asked for.
type Seen = testing::Seen<String>;

async fn handle(State((seen, addr)): State<Recording<String>>, uri: Uri) -> Response {
    let path = uri.path().to_owned();
    seen.record(path.clone());
    let image = |bytes: Vec<u8>| (Code::OK, bytes).into_response();
    let redirect = |to: String| (Code::FOUND, [(header::LOCATION, to)]).into_response();
    if let Some(n) = path.strip_prefix("/chain/") {
        // Relative locations, so that resolving them against the current URL is tested too.
        return match n.parse::<u32>().unwrap() {
            0 => image(png_bytes(3, 2)),
            n => redirect(format!("/chain/{}", n - 1)),
        };
    }
    match path.as_str() {
        "/img.png" => image(png_bytes(40, 30)),
        "/img.jpg" => image(jpeg_bytes(40, 30)),
        "/img.webp" => image(webp_bytes(40, 30)),
        "/img.gif" => image(gif_bytes(40, 30)),
        "/moved" => (
            Code::MOVED_PERMANENTLY,
            [(header::LOCATION, format!("http://{addr}/img.png"))],
        )
            .into_response(),
        "/to-metadata" => redirect("http://169.254.169.254/latest/meta-data/".to_owned()),
        "/to-metadata-v6" => redirect("http://[fe80::1]/".to_owned()),
        "/to-metadata-mapped" => redirect("http://[::ffff:169.254.169.254]/".to_owned()),
        "/to-ftp" => redirect(format!("ftp://{addr}/img.png")),
        "/to-file" => redirect("file:///etc/passwd".to_owned()),
        "/no-location" => Code::FOUND.into_response(),
        "/missing" => Code::NOT_FOUND.into_response(),
        "/boom" => Code::INTERNAL_SERVER_ERROR.into_response(),
        "/busy" => Code::TOO_MANY_REQUESTS.into_response(),
        "/exact" => image(vec![b'a'; SMALL_MAX_BYTES as usize]),
        "/big" => image(vec![b'a'; SMALL_MAX_BYTES as usize + 1]),
        // Chunked, no length declared, never ends.
        "/endless" => (Code::OK, endless(&[b'a'; 100])).into_response(),
        "/trickle" => (Code::OK, trickle()).into_response(),
        _ => Code::NOT_FOUND.into_response(),
    }
}

async fn start_server() -> (SocketAddr, Seen) {
    serve_recording(Router::new().fallback(handle)).await
}

#[tokio::test]
async fn a_png_served_is_fetched_and_decoded() {
    let (addr, seen) = start_server().await;
    let f = fetcher(limits());
    let bytes = f.fetch(&format!("http://{addr}/img.png")).await.unwrap();
    let img = decode(&bytes, &f.limits()).unwrap();
    assert_image(&img, 40, 30);
    assert_eq!(img.data, pattern(40, 30).into_raw());
    assert_eq!(seen.all(), ["/img.png"]);
}

#[tokio::test]
async fn jpeg_webp_and_gif_are_fetched_and_decoded() {
    let (addr, _seen) = start_server().await;
    let f = fetcher(limits());
    for path in ["/img.jpg", "/img.webp", "/img.gif"] {
        let bytes = f.fetch(&format!("http://{addr}{path}")).await.unwrap();
        let img = decode(&bytes, &f.limits()).unwrap();
        assert_image(&img, 40, 30);
    }
    // Lossless WebP gives the pixels back exactly; JPEG only roughly.
    let webp = decode(&webp_bytes(40, 30), &limits()).unwrap();
    assert_eq!(webp.data, pattern(40, 30).into_raw());
    let jpeg = decode(&jpeg_bytes(40, 30), &limits()).unwrap();
    let want = pattern(40, 30).into_raw();
    let off = jpeg
        .data
        .iter()
        .zip(&want)
        .map(|(a, b)| u64::from(a.abs_diff(*b)))
        .sum::<u64>()
        / want.len() as u64;
    assert!(off < 16, "mean difference {off}");
}

#[tokio::test]
async fn three_redirects_are_followed_and_a_fourth_is_refused() {
    let (addr, seen) = start_server().await;
    let f = fetcher(limits());
    let bytes = f.fetch(&format!("http://{addr}/chain/3")).await.unwrap();
    assert_image(&decode(&bytes, &f.limits()).unwrap(), 3, 2);
    assert_eq!(seen.all(), ["/chain/3", "/chain/2", "/chain/1", "/chain/0"]);

    let err = f
        .fetch(&format!("http://{addr}/chain/4"))
        .await
        .unwrap_err();
    assert!(matches!(err, InputError::TooManyRedirects(3)), "{err:?}");
    assert_eq!(err.to_string(), "more than 3 redirects");
    assert!(!err.is_transient());
    // The fourth redirect's target is never requested.
    assert_eq!(
        seen.all()[4..],
        ["/chain/4", "/chain/3", "/chain/2", "/chain/1"]
    );

    // An absolute location and a 301 work as well.
    let bytes = f.fetch(&format!("http://{addr}/moved")).await.unwrap();
    assert_image(&decode(&bytes, &f.limits()).unwrap(), 40, 30);
}

/// Even with every development switch on, a redirect to a link-local literal (a cloud
/// metadata endpoint) fails at the check, before any connection: nothing listens at
/// 169.254.169.254 here, so a connection attempt would end in a different error.
#[tokio::test]
async fn a_redirect_to_a_metadata_endpoint_is_refused_without_connecting() {
    let (addr, seen) = start_server().await;
    let f = fetcher(limits());
    for path in ["/to-metadata", "/to-metadata-v6", "/to-metadata-mapped"] {
        let err = f.fetch(&format!("http://{addr}{path}")).await.unwrap_err();
        assert!(matches!(err, InputError::RedirectRefused(_)), "{err:?}");
        assert_eq!(err.to_string(), "redirect to a non-public address refused");
        assert!(!err.is_transient());
    }
    assert_eq!(seen.all().len(), 3);
}

#[tokio::test]
async fn redirects_to_other_schemes_or_nowhere_are_refused() {
    let (addr, _seen) = start_server().await;
    let f = fetcher(limits());
    for path in ["/to-ftp", "/to-file"] {
        let err = f.fetch(&format!("http://{addr}{path}")).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "redirect to a URL that is not http or https refused",
            "{path}"
        );
    }
    let err = f
        .fetch(&format!("http://{addr}/no-location"))
        .await
        .unwrap_err();
    assert!(matches!(err, InputError::BadRedirect(302)), "{err:?}");
}

/// The production policy cannot reach a loopback test server at all, so its per-hop rule is
/// checked on the hop check itself, and its submit-time rule on `validate`.
#[test]
fn the_production_policy_refuses_http_and_private_hops() {
    let f = ImageFetcher::new(STRICT, limits(), UA).unwrap();
    let hop = |raw: &str| f.check_hop(&Url::parse(raw).unwrap());
    assert_eq!(
        hop("http://example.com/a.png").unwrap_err().to_string(),
        "redirect to a URL that is not https refused"
    );
    for raw in [
        "https://10.0.0.1/a.png",
        "https://127.0.0.1/a.png",
        "https://[::1]/a.png",
        "https://localhost/a.png",
        "https://169.254.169.254/latest/meta-data/",
        "https://[fd00::1]/a.png",
    ] {
        assert_eq!(
            hop(raw).unwrap_err().to_string(),
            "redirect to a non-public address refused",
            "{raw}"
        );
    }
    assert_eq!(
        hop("https://user@example.com/").unwrap_err().to_string(),
        "redirect to an unusable URL (must not contain user info) refused"
    );
    hop("https://example.com/a.png").unwrap();
    hop("https://8.8.8.8/a.png").unwrap();

    assert_eq!(
        f.validate("http://example.com/a.png").unwrap_err(),
        "must be an absolute https URL"
    );
    assert_eq!(
        f.validate("https://192.168.1.1/a.png").unwrap_err(),
        "must not point to a private or reserved address"
    );
    assert_eq!(
        f.validate("https://example.com/a.png").unwrap().as_str(),
        "https://example.com/a.png"
    );
}

#[tokio::test]
async fn the_production_policy_refuses_a_loopback_url_before_fetching() {
    let (addr, seen) = start_server().await;
    let f = ImageFetcher::new(STRICT, limits(), UA).unwrap();
    let port = addr.port();
    for url in [
        format!("http://127.0.0.1:{port}/img.png"),
        format!("https://127.0.0.1:{port}/img.png"),
        format!("https://localhost:{port}/img.png"),
    ] {
        let err = f.fetch(&url).await.unwrap_err();
        assert!(matches!(err, InputError::InvalidUrl(_)), "{url}: {err:?}");
    }
    assert!(seen.all().is_empty());
}

#[test]
fn link_local_literals_are_refused_even_with_private_allowed() {
    let f = fetcher(limits());
    for raw in [
        "http://169.254.169.254/latest/meta-data/",
        "http://169.254.0.1/",
        "http://2852039166/",
        "http://0xa9.0xfe.0xa9.0xfe/",
        "http://[fe80::1]/",
        "http://[febf::1]/",
        "http://[::ffff:169.254.169.254]/",
        "http://[64:ff9b::a9fe:a9fe]/",
        "http://[2002:a9fe:a9fe::1]/",
    ] {
        assert_eq!(
            f.validate(raw).unwrap_err(),
            "must not point to a link-local address",
            "{raw}"
        );
    }
    f.validate("http://127.0.0.1:8080/a.png").unwrap();
    f.validate("http://10.0.0.1/a.png").unwrap();
    f.validate("http://[fd00::1]/a.png").unwrap();
    f.validate("http://169.253.0.1/a.png").unwrap();
}

#[test]
fn dns_answers_lose_link_local_addresses() {
    let addrs: Vec<SocketAddr> = [
        "169.254.169.254:0",
        "[fe80::1]:0",
        "[::ffff:169.254.1.1]:0",
        "127.0.0.1:0",
        "[fd00::1]:0",
        "93.184.216.34:0",
    ]
    .iter()
    .map(|s| s.parse().unwrap())
    .collect();
    let kept = without_link_local(addrs.into_iter());
    let kept: Vec<String> = kept.iter().map(|a| a.ip().to_string()).collect();
    assert_eq!(kept, ["127.0.0.1", "fd00::1", "93.184.216.34"]);
}

#[tokio::test]
async fn the_resolver_keeps_loopback_when_private_is_allowed() {
    let resolver = NoLinkLocalResolver {
        inner: PublicOnlyResolver::new(true),
    };
    let addrs: Vec<SocketAddr> = resolver
        .resolve("localhost".parse().unwrap())
        .await
        .unwrap()
        .collect();
    assert!(!addrs.is_empty() && addrs.iter().all(|a| a.ip().is_loopback()));
    let strict = NoLinkLocalResolver {
        inner: PublicOnlyResolver::new(false),
    };
    let err = match strict.resolve("localhost".parse().unwrap()).await {
        Ok(_) => panic!("localhost resolved under the production policy"),
        Err(err) => err,
    };
    assert!(err.is::<NonPublicDestination>(), "{err}");
}

#[tokio::test]
async fn a_body_over_the_size_limit_is_cut_off() {
    let (addr, _seen) = start_server().await;
    let f = fetcher(InputLimits {
        max_bytes: SMALL_MAX_BYTES,
        ..limits()
    });
    let exact = f.fetch(&format!("http://{addr}/exact")).await.unwrap();
    assert_eq!(exact.len() as u64, SMALL_MAX_BYTES);
    // Declared too long, and chunked without end: both stop at the limit.
    for path in ["/big", "/endless"] {
        let err = f.fetch(&format!("http://{addr}{path}")).await.unwrap_err();
        assert!(
            matches!(err, InputError::TooLarge(SMALL_MAX_BYTES)),
            "{err:?}"
        );
        assert_eq!(err.to_string(), "larger than 1000 bytes");
        assert!(!err.is_transient());
    }
}

/// A body without a length or chunking, delimited only by the connection's close, that
/// never ends: the fetch returns only if reading stops at the limit.
#[tokio::test]
async fn an_endless_close_delimited_body_is_cut_off() {
    let addr = raw_server(|mut stream| async move {
        let head = b"HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nConnection: close\r\n\r\n";
        if stream.write_all(head).await.is_err() {
            return;
        }
        let block = [b'a'; 512];
        while stream.write_all(&block).await.is_ok() {}
    })
    .await;
    let f = fetcher(InputLimits {
        max_bytes: SMALL_MAX_BYTES,
        ..limits()
    });
    let err = f.fetch(&format!("http://{addr}/x")).await.unwrap_err();
    assert!(matches!(err, InputError::TooLarge(_)), "{err:?}");
}

#[tokio::test]
async fn a_server_that_never_answers_times_out() {
    let addr = raw_server(|stream| async move {
        tokio::time::sleep(Duration::from_secs(60)).await;
        drop(stream);
    })
    .await;
    let timeout = Duration::from_millis(300);
    let f = fetcher(InputLimits {
        timeout,
        ..limits()
    });
    let started = Instant::now();
    let err = f.fetch(&format!("http://{addr}/x")).await.unwrap_err();
    assert!(
        matches!(err, InputError::TimedOut(t) if t == timeout),
        "{err:?}"
    );
    assert_eq!(err.to_string(), "timed out after 300ms");
    assert!(err.is_transient());
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// The limit is on the whole fetch, not on each read: a body that trickles in forever
/// fails by the timeout although every read is quick.
#[tokio::test]
async fn a_trickling_body_times_out() {
    let (addr, _seen) = start_server().await;
    let f = fetcher(InputLimits {
        timeout: Duration::from_millis(300),
        ..limits()
    });
    let err = f
        .fetch(&format!("http://{addr}/trickle"))
        .await
        .unwrap_err();
    assert!(matches!(err, InputError::TimedOut(_)), "{err:?}");
}

#[tokio::test]
async fn statuses_and_refusals_are_sorted_transient_or_permanent() {
    let (addr, _seen) = start_server().await;
    let f = fetcher(limits());
    let err = f
        .fetch(&format!("http://{addr}/missing"))
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "answered HTTP 404");
    assert!(!err.is_transient());
    for (path, status) in [("/boom", 500), ("/busy", 429)] {
        let err = f.fetch(&format!("http://{addr}{path}")).await.unwrap_err();
        assert_eq!(err.to_string(), format!("answered HTTP {status}"));
        assert!(err.is_transient(), "{status}");
    }

    let closed = closed_port().await;
    let err = f.fetch(&format!("http://{closed}/x")).await.unwrap_err();
    assert_eq!(err.to_string(), "connection refused");
    assert!(err.is_transient());

    let err = f.fetch("not a url").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid URL: must be an absolute http or https URL"
    );
    assert!(!err.is_transient());
}

#[tokio::test]
async fn a_connection_reset_is_transient() {
    let addr = resetting_server().await;
    let err = fetcher(limits())
        .fetch(&format!("http://{addr}/x"))
        .await
        .unwrap_err();
    assert!(matches!(err, InputError::Transport { .. }), "{err:?}");
    assert!(err.is_transient(), "{err}");
}

#[test]
fn new_refuses_bad_arguments() {
    let zero = InputLimits {
        timeout: Duration::ZERO,
        ..limits()
    };
    assert!(ImageFetcher::new(OPEN, zero, UA).is_err());
    assert!(ImageFetcher::new(OPEN, limits(), "easel\n1").is_err());
}
