//! Event streams served off hyper. hyper keeps, for an HTTP/1 connection's whole life, an 8 KiB
//! read buffer and an 8 KiB buffer for answer heads: for an event stream, open for hours and
//! mostly idle, they were most of what it cost (docs/benchmarks.md). A connection whose first
//! request is a `GET` of a stream's path ([`super::ConnectionLimits::held_open`]) is answered
//! here instead:
//! - its head is read under the same deadline and bounds as hyper's (`header_timeout`,
//!   [`MAX_HEADER_BYTES`], at most [`MAX_HEADERS`] headers) and parsed with `httparse`, hyper's
//!   own parser;
//! - the request goes to the same router, with the same client address;
//! - the answer is written as it comes, with no framing (`Connection: close`, its end is the
//!   connection's), through the same [`ClientStream`] (the stall and send-rate deadlines);
//! - the connection closes after it; a client that leaves is seen at once (its end of the
//!   socket is watched while the stream waits for its next event).
//!
//! Every other connection is hyper's, its requests as they come; only the first request of a
//! connection decides, so a stream asked for on a connection that served other requests before
//! is still hyper's.

use std::convert::Infallible;
use std::io;
use std::os::fd::AsRawFd;
use std::pin::pin;
use std::sync::Arc;
use std::time::SystemTime;

use axum::body::{Body, Bytes, HttpBody};
use axum::http::header::{self, HeaderName, HeaderValue};
use axum::http::{Method, Request, Response, StatusCode, Uri, Version};
use http_body_util::BodyExt;
use nix::sys::socket::{recv, MsgFlags};
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;
use tower::{BoxError, Service, ServiceExt};

use super::connection::{Activity, Busy, Origin, MAX_HEADER_BYTES};
use super::socket::ClientStream;

/// The most of a connection's first bytes looked at (peeked, left in the socket) to tell whether
/// its first request asks for a stream: the request line up to the end of its path.
pub(super) const PEEK_BYTES: usize = 128;

/// The most headers a request may have, as hyper allows; more is 431.
const MAX_HEADERS: usize = 100;

/// What a connection's first bytes say of its first request.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum First {
    /// A `GET` of a stream's path: served here.
    HeldOpen,
    /// Anything else: hyper's.
    Other,
    /// Not yet known: the bytes so far could still start a `GET` of a stream's path.
    More,
}

/// Reads the request line in `peeked` (a connection's first bytes) as far as it must.
pub(super) fn classify(peeked: &[u8], held_open: fn(&str) -> bool) -> First {
    const GET: &[u8] = b"GET ";
    if peeked.len() < GET.len() {
        return if GET.starts_with(peeked) {
            First::More
        } else {
            First::Other
        };
    }
    let Some(target) = peeked.strip_prefix(GET) else {
        return First::Other;
    };
    match target
        .iter()
        .position(|b| matches!(b, b' ' | b'?' | b'\r' | b'\n'))
    {
        Some(end) => match std::str::from_utf8(&target[..end]) {
            Ok(path) if held_open(path) => First::HeldOpen,
            _ => First::Other,
        },
        None if peeked.len() < PEEK_BYTES => First::More,
        None => First::Other,
    }
}

/// A connection's first bytes, peeked into `buf` (left in the socket for whoever reads the
/// request): more than the `seen` of the last call, or 0 once the client has closed.
pub(super) async fn peek(stream: &TcpStream, buf: &mut [u8], seen: usize) -> io::Result<usize> {
    loop {
        stream.readable().await?;
        let peeked = stream.try_io(Interest::READABLE, || {
            let n = recv(stream.as_raw_fd(), buf, MsgFlags::MSG_PEEK).map_err(io::Error::from)?;
            // Only what was seen before: wait for more. A WouldBlock clears the socket's
            // readiness, so the wait lasts until the next bytes come.
            if n == seen && n > 0 {
                Err(io::ErrorKind::WouldBlock.into())
            } else {
                Ok(n)
            }
        });
        match peeked {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            other => return other,
        }
    }
}

/// Serves the connection's one request: a stream, or the router's refusal of it.
pub(super) async fn serve<S, B>(
    mut io: ClientStream,
    app: S,
    origin: &Origin,
    activity: &Arc<Activity>,
    stop: &CancellationToken,
) where
    S: Service<Request<Body>, Response = Response<B>, Error = Infallible>,
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let head = tokio::select! {
        head = read_head(&mut io) => head,
        () = stop.cancelled() => return,
    };
    let mut req = match head {
        Ok(req) => req,
        Err(Some(status)) => {
            let _ = refuse(&mut io, status).await;
            return;
        }
        // Closed, or failed, before its head was whole.
        Err(None) => return,
    };
    let _busy = Busy::start(activity);
    origin.mark(&mut req);
    // Boxed: the router's future is done once the answer's head is ready, and held inline it
    // would take its room in every open stream's task for the stream's life.
    let Ok(res) = Box::pin(app.oneshot(req)).await;
    if answer(&mut io, res.map(Body::new)).await.is_ok() {
        let _ = io.shutdown().await;
    }
}

/// The request's head, read whole: Err(Some(status)) for one refused (too large, malformed),
/// Err(None) when the connection closed or failed first.
async fn read_head(io: &mut ClientStream) -> Result<Request<Body>, Option<StatusCode>> {
    let mut buf: Vec<u8> = Vec::with_capacity(1024);
    loop {
        buf.reserve(1024);
        let before = buf.len();
        match io.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return Err(None),
            Ok(_) => {}
        }
        // Parsed only once a blank line may have come: a head sent a byte at a time is then
        // scanned once, not once per byte over all that came before.
        if may_end(&buf, before) {
            if let Some(req) = parse(&buf)? {
                return Ok(req);
            }
        }
        if buf.len() > MAX_HEADER_BYTES {
            return Err(Some(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE));
        }
    }
}

/// Whether the bytes from `from` on (with the three before, which a blank line may span) hold
/// the end of a line followed by an empty one, as a head's end is.
fn may_end(buf: &[u8], from: usize) -> bool {
    let recent = &buf[from.saturating_sub(3)..];
    memchr::memmem::find(recent, b"\n\r\n").is_some()
        || memchr::memmem::find(recent, b"\n\n").is_some()
}

/// The request in `buf`, once its head is whole (None before). Bytes after the head (a body, a
/// request sent ahead) are left unread: the connection closes after this request.
fn parse(buf: &[u8]) -> Result<Option<Request<Body>>, Option<StatusCode>> {
    let bad = Some(StatusCode::BAD_REQUEST);
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut head = httparse::Request::new(&mut headers);
    let len = match head.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(Some(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE))
        }
        Err(_) => return Err(bad),
    };
    if len > MAX_HEADER_BYTES {
        return Err(Some(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE));
    }
    let mut req = Request::new(Body::empty());
    *req.method_mut() =
        Method::from_bytes(head.method.unwrap_or_default().as_bytes()).or(Err(bad))?;
    *req.uri_mut() = head.path.unwrap_or_default().parse::<Uri>().or(Err(bad))?;
    *req.version_mut() = match head.version {
        Some(0) => Version::HTTP_10,
        _ => Version::HTTP_11,
    };
    let map = req.headers_mut();
    map.reserve(head.headers.len());
    for h in head.headers.iter() {
        let name = HeaderName::from_bytes(h.name.as_bytes()).or(Err(bad))?;
        map.append(name, HeaderValue::from_bytes(h.value).or(Err(bad))?);
    }
    Ok(Some(req))
}

/// A refusal before the request reached the router, as hyper words its own: no body.
async fn refuse(io: &mut ClientStream, status: StatusCode) -> io::Result<()> {
    let res = Response::builder()
        .status(status)
        .body(Body::empty())
        .expect("a static answer");
    answer(io, res).await?;
    io.shutdown().await
}

/// Headers that belong to one connection, not to the answer: the answer's own are written
/// instead.
const HOP_BY_HOP: [HeaderName; 5] = [
    header::CONNECTION,
    header::TRANSFER_ENCODING,
    header::CONTENT_LENGTH,
    header::TE,
    header::UPGRADE,
];

/// Writes `res`: its head, then its body as each part comes, until the body ends or the client
/// leaves.
async fn answer(io: &mut ClientStream, res: Response<Body>) -> io::Result<()> {
    let (parts, body) = res.into_parts();
    let head = head_of(&parts, body.size_hint().exact());
    io.write_all(&head).await?;
    drop(head);
    let mut body = pin!(body);
    // What the client sends after its request is not read as requests: it is read to see the
    // client leave (0 bytes), and dropped.
    let mut probe = [0u8; 16];
    loop {
        tokio::select! {
            frame = body.frame() => match frame {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        io.write_all(&data).await?;
                    }
                }
                Some(Err(_)) | None => return Ok(()),
            },
            read = io.read(&mut probe) => match read {
                Ok(0) => return Ok(()),
                Ok(_) => {}
                Err(e) => return Err(e),
            },
        }
    }
}

/// The head of an answer whose body is `length` bytes (None: until the connection closes).
fn head_of(parts: &axum::http::response::Parts, length: Option<u64>) -> Vec<u8> {
    let status = parts.status;
    let mut head = Vec::with_capacity(256);
    head.extend_from_slice(b"HTTP/1.1 ");
    head.extend_from_slice(status.as_str().as_bytes());
    head.push(b' ');
    head.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    head.extend_from_slice(b"\r\n");
    for (name, value) in &parts.headers {
        if HOP_BY_HOP.contains(name) {
            continue;
        }
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    if !parts.headers.contains_key(header::DATE) {
        head.extend_from_slice(b"date: ");
        head.extend_from_slice(httpdate::fmt_http_date(SystemTime::now()).as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    if let Some(length) = length {
        head.extend_from_slice(format!("content-length: {length}\r\n").as_bytes());
    }
    head.extend_from_slice(b"connection: close\r\n\r\n");
    head
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(path: &str) -> bool {
        path == "/api/v1/events"
    }

    #[test]
    fn the_request_line_is_read_as_far_as_its_path() {
        for (peeked, first) in [
            (&b""[..], First::More),
            (b"G", First::More),
            (b"GET", First::More),
            (b"GET /api/v1/ev", First::More),
            (b"GET /api/v1/events HTTP/1.1\r\n", First::HeldOpen),
            (
                b"GET /api/v1/events?status=failed HTTP/1.1",
                First::HeldOpen,
            ),
            (b"GET /api/v1/events\r\n", First::HeldOpen),
            (b"GET /api/v1/tasks HTTP/1.1\r\n", First::Other),
            (b"GET /api/v1/eventsx HTTP/1.1", First::Other),
            (b"HEAD /api/v1/events HTTP/1.1", First::Other),
            (b"POST /api/v1/events HTTP/1.1", First::Other),
            (b"P", First::Other),
            (b"GET http://x/api/v1/events HTTP/1.1", First::Other),
        ] {
            assert_eq!(
                classify(peeked, events),
                first,
                "{:?}",
                String::from_utf8_lossy(peeked)
            );
        }
        // A path longer than the bytes looked at is not a stream's.
        let long = format!("GET /{}", "a".repeat(PEEK_BYTES));
        assert_eq!(
            classify(&long.as_bytes()[..PEEK_BYTES], events),
            First::Other
        );
        assert_eq!(
            classify(&long.as_bytes()[..PEEK_BYTES - 1], events),
            First::More
        );
    }

    #[test]
    fn a_head_is_parsed_once_whole_and_refused_when_malformed_or_too_large() {
        let head = b"GET /api/v1/events?x=1 HTTP/1.1\r\nHost: a\r\nLast-Event-ID: 7\r\n\r\nrest";
        assert!(parse(&head[..20]).unwrap().is_none());
        let req = parse(head).unwrap().unwrap();
        assert_eq!(req.method(), Method::GET);
        assert_eq!(req.uri().path(), "/api/v1/events");
        assert_eq!(req.uri().query(), Some("x=1"));
        assert_eq!(req.version(), Version::HTTP_11);
        assert_eq!(req.headers()["last-event-id"], "7");
        let old = parse(b"GET / HTTP/1.0\r\n\r\n").unwrap().unwrap();
        assert_eq!(old.version(), Version::HTTP_10);

        let bad = Some(StatusCode::BAD_REQUEST);
        assert_eq!(
            parse(b"GET / HTTP/1.1\r\nNo colon\r\n\r\n").unwrap_err(),
            bad
        );
        assert_eq!(parse(b"GET / HTTP/3.0\r\n\r\n").unwrap_err(), bad);
        let large = Some(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
        let many: String = (0..=MAX_HEADERS).map(|i| format!("x-{i}: 1\r\n")).collect();
        let many = format!("GET / HTTP/1.1\r\n{many}\r\n");
        assert_eq!(parse(many.as_bytes()).unwrap_err(), large);
        let long = format!(
            "GET / HTTP/1.1\r\nx: {}\r\n\r\n",
            "a".repeat(MAX_HEADER_BYTES)
        );
        assert_eq!(parse(long.as_bytes()).unwrap_err(), large);
    }

    #[test]
    fn a_head_is_parsed_only_once_a_blank_line_may_have_come() {
        let head = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
        for split in 1..head.len() {
            // No part of the head before its end looks like one, and whatever piece came
            // last, the end is seen once it has come.
            assert!(!may_end(&head[..split], 0), "{split}");
            assert!(may_end(head, split), "{split}");
        }
        assert!(may_end(b"GET / HTTP/1.1\n\n", 15));
        assert!(!may_end(b"GET / HTTP/1.1\r\nHost: a\r\n", 0));
    }

    #[test]
    fn an_answer_head_says_the_connection_closes_and_drops_the_connections_own_headers() {
        let res = Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "text/event-stream")
            .header("transfer-encoding", "chunked")
            .header("connection", "keep-alive")
            .body(())
            .unwrap();
        let (parts, ()) = res.into_parts();
        let streamed = String::from_utf8(head_of(&parts, None)).unwrap();
        assert!(streamed.starts_with("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"));
        assert!(streamed.contains("\r\ndate: "), "{streamed}");
        assert!(
            streamed.ends_with("\r\nconnection: close\r\n\r\n"),
            "{streamed}"
        );
        assert!(!streamed.contains("chunked") && !streamed.contains("keep-alive"));
        assert!(!streamed.contains("content-length"));
        let sized = String::from_utf8(head_of(&parts, Some(12))).unwrap();
        assert!(sized.contains("\r\ncontent-length: 12\r\n"), "{sized}");
    }
}
