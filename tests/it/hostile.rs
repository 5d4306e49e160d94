//! Hostile clients against the real binary, through real sockets: stalled bodies, idle HTTP/2
//! connections, bodies over the limit in every framing, bodies sent with a made-up key, redirects
//! after sign-in, and other host names. The attack comes from 127.0.0.2; each test shows that
//! `/healthz`, asked over a fresh connection from 127.0.0.1, is still answered while it runs.

use std::time::{Duration, Instant};

use crate::common::binary::Easel;
use axum::body::{Body, Bytes};
use http_body_util::BodyExt;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use reqwest::redirect::Policy;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

const ATTACKER: &str = "127.0.0.2";

fn target(easel: &Easel) -> String {
    easel.base.trim_start_matches("http://").to_string()
}

/// A connection to `target` from the address `source`.
async fn connect_from(source: &str, target: &str) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{source}:0").parse().unwrap()).unwrap();
    socket.connect(target.parse().unwrap()).await.unwrap()
}

/// How long `/healthz` took over a new connection, or `None` when it was not answered 200
/// within 5 s.
async fn healthz(easel: &Easel) -> Option<Duration> {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let started = Instant::now();
    let res = http
        .get(format!("{}/healthz", easel.base))
        .send()
        .await
        .ok()?;
    (res.status() == 200).then(|| started.elapsed())
}

/// `/healthz` is answered within `within` (the usual answer takes about a millisecond; `within`
/// leaves room for a loaded machine, but not for waiting out the attack).
async fn assert_healthz_answered(easel: &Easel, within: Duration) {
    let took = healthz(easel).await.expect("/healthz answered");
    assert!(took < within, "/healthz took {took:?} during the attack");
}

/// Everything the server sends on `stream` until it closes it or `within` passes; `closed`
/// tells which.
async fn answer(stream: &mut TcpStream, within: Duration) -> (String, bool) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return (String::from_utf8_lossy(&got).into_owned(), false),
            Ok(Ok(0)) | Ok(Err(_)) => return (String::from_utf8_lossy(&got).into_owned(), true),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// The `easel_form` cookie a signed-out page sets, as `name=value`.
async fn form_cookie(easel: &Easel) -> String {
    let res = reqwest::get(format!("{}/signin", easel.base))
        .await
        .unwrap();
    let cookie = res
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|c| c.to_str().unwrap().to_string())
        .find(|c| c.starts_with("easel_form="))
        .expect("the sign-in page sets its form cookie");
    cookie.split(';').next().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_form_bodies_time_out_and_one_address_cannot_take_every_slot() {
    let dir = tempfile::tempdir().unwrap();
    let easel = Easel::start(
        dir.path(),
        &[
            ("EASEL_MAX_CONNECTIONS", "20"),
            ("EASEL_MAX_CONNECTIONS_PER_ADDRESS", "10"),
            ("EASEL_BODY_TIMEOUT", "2s"),
        ],
    );
    let target = target(&easel);
    let cookie = form_cookie(&easel).await;
    // Headers and 2 bytes of a 100-byte sign-in form, then silence, twenty times over.
    let head = format!(
        "POST /signin HTTP/1.1\r\nHost: {target}\r\nCookie: {cookie}\r\n\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\nem"
    );
    let mut stalled = Vec::new();
    for _ in 0..20 {
        let mut s = connect_from(ATTACKER, &target).await;
        let _ = s.write_all(head.as_bytes()).await;
        stalled.push(s);
    }
    assert_healthz_answered(&easel, Duration::from_secs(1)).await;

    let mut timed_out = 0;
    let mut refused = 0;
    for s in stalled.iter_mut() {
        let (got, closed) = answer(s, Duration::from_secs(6)).await;
        if got.starts_with("HTTP/1.1 408") {
            timed_out += 1;
        } else if got.is_empty() && closed {
            refused += 1;
        } else {
            panic!("unexpected answer to a stalled form (closed: {closed}): {got}");
        }
    }
    assert_eq!(
        (timed_out, refused),
        (10, 10),
        "ten stalled bodies time out; the address's other ten connections are closed at once"
    );

    // A signed-in form's body is not read without a session: answered at once, body never sent.
    let mut s = connect_from(ATTACKER, &target).await;
    s.write_all(
        format!(
            "POST /keys HTTP/1.1\r\nHost: {target}\r\n\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\nna"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let (got, _) = answer(&mut s, Duration::from_secs(1)).await;
    assert!(got.starts_with("HTTP/1.1 303"), "{got}");
    assert_healthz_answered(&easel, Duration::from_secs(1)).await;
}

type H2 = hyper::client::conn::http2::SendRequest<Body>;

/// An HTTP/2 cleartext connection from the attacker's address that pings every 100 ms, and the
/// time its connection ended (once the server closes it).
async fn h2c(target: &str) -> (H2, tokio::task::JoinHandle<Instant>) {
    let stream = connect_from(ATTACKER, target).await;
    let (send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .keep_alive_interval(Duration::from_millis(100))
        .keep_alive_while_idle(true)
        .handshake(TokioIo::new(stream))
        .await
        .unwrap();
    let ended = tokio::spawn(async move {
        let _ = conn.await;
        Instant::now()
    });
    (send, ended)
}

async fn h2_request(send: &mut H2, req: hyper::Request<Body>) -> (u16, String) {
    send.ready().await.unwrap();
    let res = send.send_request(req).await.unwrap();
    let status = res.status().as_u16();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_http2_connections_are_closed_however_much_they_ping() {
    let dir = tempfile::tempdir().unwrap();
    let easel = Easel::start(
        dir.path(),
        &[
            ("EASEL_MAX_CONNECTIONS", "20"),
            ("EASEL_MAX_CONNECTIONS_PER_ADDRESS", "0"),
            ("EASEL_HEADER_TIMEOUT", "1s"),
            ("EASEL_IDLE_TIMEOUT", "1s"),
        ],
    );
    let target = target(&easel);
    let started = Instant::now();
    let mut conns = Vec::new();
    for i in 0..20 {
        let (mut send, ended) = h2c(&target).await;
        if i % 2 == 0 {
            // Half of them make one request first, then go idle.
            let req = hyper::Request::get(format!("{}/healthz", easel.base))
                .body(Body::empty())
                .unwrap();
            assert_eq!(h2_request(&mut send, req).await.0, 200);
        }
        conns.push((send, ended));
    }
    // Every slot is held now; they free up as the idle connections are closed.
    assert_healthz_answered(&easel, Duration::from_secs(4)).await;
    for (_send, ended) in conns {
        let ended = tokio::time::timeout(Duration::from_secs(5), ended)
            .await
            .expect("the server closed the idle connection")
            .unwrap();
        assert!(ended - started < Duration::from_secs(5));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_over_the_limit_are_refused_in_every_framing_and_none_is_read_for_a_bad_key() {
    let dir = tempfile::tempdir().unwrap();
    let easel = Easel::start(dir.path(), &[("EASEL_BODY_TIMEOUT", "30s")]);
    let key = easel.first_key.clone().unwrap();
    let target = target(&easel);
    let big = || {
        Body::from_stream(futures::stream::iter(
            (0..16).map(|_| Ok::<_, std::io::Error>(Bytes::from(vec![b' '; 64 * 1024]))),
        ))
    };

    // HTTP/1 chunked, 1 MiB where 64 KiB is the limit.
    let res = reqwest::Client::new()
        .post(format!("{}/api/v1/imagine", easel.base))
        .header("Authorization", &key)
        .header("Content-Type", "application/json")
        .body(reqwest::Body::wrap_stream(futures::stream::iter(
            (0..16).map(|_| Ok::<_, std::io::Error>(vec![b' '; 64 * 1024])),
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 413);
    let text = res.text().await.unwrap();
    assert!(
        text.contains("65536"),
        "names the limit that applied: {text}"
    );

    // HTTP/2 data frames without a declared length.
    let (mut send, _) = h2c(&target).await;
    let req = hyper::Request::post(format!("{}/api/v1/imagine", easel.base))
        .header("authorization", &key)
        .header("content-type", "application/json")
        .body(big())
        .unwrap();
    let (status, text) = h2_request(&mut send, req).await;
    assert_eq!(status, 413, "{text}");
    assert!(text.contains("65536"), "{text}");

    // A dashboard form, chunked.
    let cookie = form_cookie(&easel).await;
    let req = hyper::Request::post(format!("{}/signin", easel.base))
        .header("cookie", &cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(big())
        .unwrap();
    let (status, text) = h2_request(&mut send, req).await;
    assert_eq!(status, 413, "{text}");
    assert_healthz_answered(&easel, Duration::from_secs(1)).await;

    // A made-up key of the right shape: 401 while the body is still on its way (it never comes).
    for path in ["/api/v1/imagine", "/api/v1/inpaint"] {
        let mut s = connect_from(ATTACKER, &target).await;
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {target}\r\nAuthorization: easel_{}\r\n\
             Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{{\"pr\r\n",
            "A".repeat(32)
        );
        s.write_all(head.as_bytes()).await.unwrap();
        let (got, _) = answer(&mut s, Duration::from_secs(3)).await;
        assert!(got.starts_with("HTTP/1.1 401"), "{path}: {got}");
    }
    assert_healthz_answered(&easel, Duration::from_secs(1)).await;
}

/// Post a signed-out form (`/signin`, `/signup`) as its page does: the page's form cookie and
/// CSRF token, and the dashboard's own origin.
async fn post_signed_out_form(
    http: &reqwest::Client,
    easel: &Easel,
    path: &str,
    fields: &[(&str, &str)],
) -> reqwest::Response {
    let cookie = form_cookie(easel).await;
    let page = http
        .get(format!("{}{path}", easel.base))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let field = "name=\"csrf\" value=\"";
    let at = page.find(field).expect("a csrf field") + field.len();
    let csrf = &page[at..at + page[at..].find('"').unwrap()];
    let mut form = vec![("csrf", csrf)];
    form.extend_from_slice(fields);
    http.post(format!("{}{path}", easel.base))
        .header("cookie", &cookie)
        .header("origin", &easel.base)
        .form(&form)
        .send()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_in_redirects_stay_on_this_site_and_the_dashboard_answers_only_its_own_names() {
    let dir = tempfile::tempdir().unwrap();
    let easel = Easel::start(dir.path(), &[]);
    let target = target(&easel);
    let http = reqwest::Client::builder()
        .redirect(Policy::none())
        .build()
        .unwrap();
    let password = "tq8-Vex!plover-Quarry-19";

    // Sign up once, then sign in with hostile `next` values.
    let res = post_signed_out_form(
        &http,
        &easel,
        "/signup",
        &[("email", "owner@example.com"), ("password", password)],
    )
    .await;
    assert_eq!(res.status(), 303, "signed up");
    for next in [
        "/\t/evil.example",
        "/\r\n/x",
        "//evil.example",
        "/\\evil.example",
        "/ /x",
    ] {
        let res = post_signed_out_form(
            &http,
            &easel,
            "/signin",
            &[
                ("email", "owner@example.com"),
                ("password", password),
                ("next", next),
            ],
        )
        .await;
        assert_eq!(res.status(), 303, "next={next:?}");
        assert_eq!(res.headers()["location"], "/", "next={next:?}");
    }

    // Another host name (a DNS-rebinding page's): 421 on every dashboard page and form.
    for (method, path) in [("GET", "/signin"), ("POST", "/signup"), ("GET", "/keys")] {
        let mut s = connect_from(ATTACKER, &target).await;
        let port = target.rsplit(':').next().unwrap();
        s.write_all(
            format!(
                "{method} {path} HTTP/1.1\r\nHost: evil.example:{port}\r\n\
                 Origin: http://evil.example:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
        let (got, _) = answer(&mut s, Duration::from_secs(3)).await;
        assert!(got.starts_with("HTTP/1.1 421"), "{method} {path}: {got}");
    }
    // The dashboard's own names and addresses are served; the API answers any name.
    let port = target.rsplit(':').next().unwrap();
    for host in [format!("localhost:{port}"), target.clone()] {
        let res = http
            .get(format!("{}/signin", easel.base))
            .header("host", &host)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200, "{host}");
    }
    let res = http
        .get(format!("{}/healthz", easel.base))
        .header("host", "anything.example")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    // A form whose Origin is another site, sent to an allowed host: refused.
    let cookie = form_cookie(&easel).await;
    let res = http
        .post(format!("{}/signin", easel.base))
        .header("cookie", &cookie)
        .header("origin", "http://localhost:3000")
        .form(&[("csrf", "x"), ("email", "a@b.c"), ("password", "x")])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 403);
    assert_healthz_answered(&easel, Duration::from_secs(1)).await;
}

/// The server reads a connection's protocol from its first bytes before serving it: a request
/// whose first bytes come alone is read as it is, over HTTP/1, whether those bytes already say
/// HTTP/1 ("G") or could still begin HTTP/2's preface ("P"); a client that sends only such a
/// start is closed once its head is due.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_first_bytes_come_alone_is_still_read() {
    let dir = tempfile::tempdir().unwrap();
    let easel = Easel::start(dir.path(), &[("EASEL_HEADER_TIMEOUT", "1s")]);
    let target = target(&easel);
    for (first, rest, expect) in [
        (
            "G",
            "ET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            "HTTP/1.1 200",
        ),
        (
            "P",
            "OST /api/v1/imagine HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
             Content-Length: 2\r\nConnection: close\r\n\r\n{}",
            "HTTP/1.1 401",
        ),
    ] {
        let mut stream = connect_from(ATTACKER, &target).await;
        stream.write_all(first.as_bytes()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        stream.write_all(rest.as_bytes()).await.unwrap();
        let (got, closed) = answer(&mut stream, Duration::from_secs(5)).await;
        assert!(got.starts_with(expect), "{first}...: {got}");
        assert!(closed, "{first}...: the connection closes after its answer");
    }
    let mut stream = connect_from(ATTACKER, &target).await;
    let started = Instant::now();
    stream.write_all(b"P").await.unwrap();
    let (got, closed) = answer(&mut stream, Duration::from_secs(5)).await;
    assert!(
        closed,
        "a lone first byte is not held past the header timeout"
    );
    assert!(started.elapsed() < Duration::from_secs(3), "{got}");
    assert_healthz_answered(&easel, Duration::from_secs(1)).await;
}
