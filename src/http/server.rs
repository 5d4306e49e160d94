//! The HTTP server loop. `axum::serve` sets no deadline on a connection's phases and accepts
//! connections without bound; this loop gives every phase a deadline, on HTTP/1 and HTTP/2 alike,
//! so that slow, idle or numerous clients cannot starve the others:
//! - at most `max_connections` open connections (the rest wait in the kernel's accept queue), and
//!   at most `max_per_address` from one client address (the rest are closed as they come);
//! - request headers must arrive within `header_timeout` (hyper's HTTP/1 timer once the first
//!   byte is in; before it, and for HTTP/2, the idle clock below), and fit in `MAX_HEADER_BYTES`
//!   (measured again on each request's head, [`head_bytes`]);
//! - each request body must arrive whole within `body_timeout` ([`super::body`]);
//! - a connection with no request in progress is closed: `header_timeout` after it opened,
//!   `idle_timeout` after its last answer ended (an HTTP/1 one sooner if `header_timeout` is
//!   shorter: hyper's timer runs for the next request's head). Only requests count as activity,
//!   so neither HTTP/2 pings (ours or the client's) nor a trickle of bytes keep it open;
//! - an answer the client stops reading fails once no byte of it has been taken for
//!   `idle_timeout`;
//! - an HTTP/1 answer given before its request's body was read whole says `Connection: close`
//!   ([`Unread`]), and the connection closes after it; what the client still sends is read, and
//!   discarded, for a moment, so that the client gets the answer rather than a reset;
//! - on shutdown, idle connections close at once and busy ones after their current request;
//! - a connection whose first request is a `GET` of an event stream's path is served off hyper
//!   ([`streams`]), with the same deadlines and bounds, so that an idle stream holds none of
//!   hyper's buffers.

mod addresses;
mod connection;
mod socket;
mod streams;

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use std::convert::Infallible;

use axum::body::{Body, Bytes, HttpBody};

use super::client_address;
use addresses::Addresses;
use axum::http::{Request, Response};
pub use connection::MAX_HEADER_BYTES;
use connection::{idle, Activity, Busy, Origin};
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use socket::ClientStream;
pub use socket::SendRate;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tower::{BoxError, Service, ServiceExt};

/// Most requests one HTTP/2 connection may have open at once; each one's body is bounded on its
/// own, so this bounds what a connection can hold.
pub const MAX_STREAMS_PER_CONNECTION: u32 = 64;

/// How the server treats connections.
#[derive(Clone, Debug)]
pub struct ConnectionLimits {
    pub max_connections: usize,
    /// 0: no limit per address.
    pub max_per_address: usize,
    /// The reverse proxies whose connections are not counted per address, and from which a
    /// request's client address is read from its headers (`super::client_address`).
    pub trusted_proxies: Arc<[ipnet::IpNet]>,
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
    /// How long shutdown waits for requests in progress.
    pub drain: Duration,
    /// The least a client must take of an answer while the server has more to send.
    pub min_send_rate: SendRate,
    /// Whether a path is an event stream's, held open for as long as the client listens: a
    /// connection whose first request is a `GET` of one is served off hyper ([`streams`]).
    pub held_open: fn(&str) -> bool,
}

/// Serve `app` on `listener` until `shutdown`, then close connections gracefully.
pub async fn serve<S, B>(
    listener: TcpListener,
    app: S,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
) where
    S: Service<Request<Body>, Response = Response<B>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(MAX_HEADER_BYTES);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Duration::from_secs(30))
        .max_concurrent_streams(MAX_STREAMS_PER_CONNECTION)
        .max_header_list_size(MAX_HEADER_BYTES as u32);
    let builders = Arc::new(Builders {
        http1: builder.clone().http1_only(),
        http2: builder.clone().http2_only(),
        either: builder,
    });
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let addresses = Addresses::new(limits.max_per_address);
    let graceful = GracefulShutdown::new();

    loop {
        let permit = tokio::select! {
            permit = slots.clone().acquire_owned() => permit.expect("semaphore never closes"),
            _ = shutdown.cancelled() => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.cancelled() => break,
        };
        let (stream, peer) = stream;
        // A trusted proxy's connections carry many clients: their share is counted per request
        // (the sign-in and sign-up limits), not per connection.
        let proxied = client_address::trusted(peer.ip(), &limits.trusted_proxies);
        let admitted = if proxied {
            Some(None)
        } else {
            addresses.admit(peer.ip())
        };
        let Some(place) = admitted else {
            // Closed at once: the client's other connections are its share.
            tracing::debug!(%peer, "connection refused: too many from this address");
            continue;
        };
        let _ = stream.set_nodelay(true);
        let activity = Arc::new(Activity::new());
        let watched = activity.clone();
        let origin = Origin {
            peer,
            proxied,
            trusted: limits.trusted_proxies.clone(),
        };
        let (for_hyper, app_for_streams) = (origin.clone(), app.clone());
        let app = app.clone();
        let service =
            TowerToHyperService::new(tower::service_fn(move |req: hyper::Request<Incoming>| {
                // Busy from the handler's call until the answer's last byte is out.
                let busy = Busy::start(&activity);
                let too_large = head_bytes(&req) > MAX_HEADER_BYTES;
                let (mut req, unread) = Unread::track(req);
                for_hyper.mark(&mut req);
                let answer = (!too_large).then(|| app.clone().oneshot(req));
                async move {
                    let at_end = move || drop(busy);
                    let Some(answer) = answer else {
                        let res = Response::builder()
                            .status(axum::http::StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE)
                            .header(axum::http::header::CONNECTION, "close")
                            .body(Body::empty())
                            .expect("a static answer");
                        return Ok(res.map(|body| Watched::new(body, at_end)));
                    };
                    let answered = answer.await;
                    answered.map(|mut res| {
                        unread.mark(&mut res);
                        res.map(|body| Watched::new(Body::new(body), at_end))
                    })
                }
            }));
        let (first, later) = (limits.header_timeout, limits.idle_timeout);
        let (idle_timeout, min_send_rate) = (limits.idle_timeout, limits.min_send_rate);
        let (builders, watcher, stop) = (builders.clone(), graceful.watcher(), shutdown.clone());
        let held_open = limits.held_open;
        tokio::spawn(async move {
            let _held = (place, permit);
            let protocol = tokio::select! {
                protocol = sniff(&stream, held_open) => protocol,
                () = idle(&watched, first, later) => {
                    tracing::debug!(%peer, "idle connection closed");
                    return;
                }
                () = stop.cancelled() => return,
            };
            let builder = match protocol {
                Ok(Some(Protocol::Http1)) => &builders.http1,
                Ok(Some(Protocol::Http2)) => &builders.http2,
                Ok(Some(Protocol::HeldOpen)) => {
                    let io = ClientStream::new(stream, idle_timeout, min_send_rate);
                    tokio::select! {
                        () = streams::serve(io, app_for_streams, &origin, &watched, &stop) => {}
                        () = idle(&watched, first, later) => tracing::debug!(%peer, "idle connection closed"),
                    }
                    return;
                }
                Ok(None) => &builders.either,
                // Closed before its first byte.
                Err(_) => return,
            };
            let io = ClientStream::new(stream, idle_timeout, min_send_rate);
            // Boxed, so that the task of a stream served off hyper (above) is not as large as
            // hyper's connection.
            let conn = Box::pin(
                watcher.watch(
                    builder
                        .serve_connection(TokioIo::new(io), service)
                        .into_owned(),
                ),
            );
            tokio::select! {
                // Errors here are the client's (reset, malformed request, header timeout).
                _ = conn => {}
                () = idle(&watched, first, later) => tracing::debug!(%peer, "idle connection closed"),
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(limits.drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after the drain period; closing them");
    }
}

/// The bytes of a request's head as sent: its request line and headers. hyper's HTTP/1 limit
/// (`max_buf_size`) is on its read buffer, which one read may take to twice the limit, so the
/// head is measured here as well.
fn head_bytes(req: &hyper::Request<Incoming>) -> usize {
    let target = req.uri().path_and_query().map_or(1, |p| p.as_str().len())
        + req.uri().authority().map_or(0, |a| a.as_str().len());
    let headers: usize = req
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum();
    req.method().as_str().len() + target + headers + 14
}

/// The connection builders: one for each protocol, and one that reads the first bytes itself.
struct Builders {
    http1: Builder<TokioExecutor>,
    http2: Builder<TokioExecutor>,
    either: Builder<TokioExecutor>,
}

/// The connection preface of HTTP/2 over cleartext TCP, its client's first bytes.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// What a connection's client speaks.
enum Protocol {
    Http1,
    Http2,
    /// HTTP/1, its first request a `GET` of an event stream's path ([`streams`]).
    HeldOpen,
}

/// The protocol of a connection, read from its first bytes without taking them (`MSG_PEEK`);
/// None while they are only the start of HTTP/2's preface. hyper-util decides alone by reading
/// the first bytes and handing them back to hyper ahead of the socket; hyper then reads a
/// request in two steps and its HTTP/1 read buffer doubles to 16 KiB, which a connection keeps
/// for life. Peeked, the first read takes the request whole. An HTTP/1 connection's request line
/// is peeked as far as its path, to tell an event stream's ([`streams::classify`]).
async fn sniff(
    stream: &TcpStream,
    held_open: fn(&str) -> bool,
) -> std::io::Result<Option<Protocol>> {
    let mut first = [0u8; streams::PEEK_BYTES];
    let mut seen = 0;
    loop {
        seen = streams::peek(stream, &mut first, seen).await?;
        if seen == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let start = seen.min(H2_PREFACE.len());
        if first[..start] == H2_PREFACE[..start] {
            return Ok((start == H2_PREFACE.len()).then_some(Protocol::Http2));
        }
        match streams::classify(&first[..seen], held_open) {
            streams::First::HeldOpen => return Ok(Some(Protocol::HeldOpen)),
            streams::First::Other => return Ok(Some(Protocol::Http1)),
            streams::First::More => {}
        }
    }
}

/// Whether an HTTP/1 request's body was read to its end by the time its answer was ready.
///
/// An answer given before its request's body was read (a 401, 413 or 429 refuses without reading
/// it) leaves the rest of that body on the connection, so hyper closes the connection once the
/// answer is written, unless the rest has already arrived. Its answer's head was written saying
/// nothing of that, so a client that pools connections could send its next request on one that
/// is closing, and see it fail. Such answers say `Connection: close` instead. HTTP/2 ends the
/// request's stream alone and needs nothing.
struct Unread(Option<Arc<AtomicBool>>);

impl Unread {
    fn track(req: hyper::Request<Incoming>) -> (Request<Body>, Unread) {
        let http1 = req.version() <= axum::http::Version::HTTP_11;
        if !http1 || req.body().is_end_stream() {
            return (req.map(Body::new), Unread(None));
        }
        let ended = Arc::new(AtomicBool::new(false));
        let flag = ended.clone();
        let req = req.map(|body| {
            Body::new(Watched::new(body, move || {
                flag.store(true, Ordering::Release)
            }))
        });
        (req, Unread(Some(ended)))
    }

    fn mark<B>(&self, res: &mut Response<B>) {
        if let Some(ended) = &self.0 {
            if !ended.load(Ordering::Acquire) {
                res.headers_mut().insert(
                    axum::http::header::CONNECTION,
                    axum::http::HeaderValue::from_static("close"),
                );
            }
        }
    }
}

/// A request's or an answer's body that calls `at_end` once it has been read to its end (or has
/// failed). Dropped before that, it drops `at_end` uncalled: a request body left unread stays
/// unread ([`Unread`]), and an answer hyper gave up on still stops counting as in progress
/// ([`Busy`], held by the answer's `at_end`), so a long download or event stream is not an idle
/// connection while it lasts.
struct Watched<B, F> {
    body: B,
    at_end: Option<F>,
}

impl<B, F> Watched<B, F> {
    fn new(body: B, at_end: F) -> Self {
        Watched {
            body,
            at_end: Some(at_end),
        }
    }
}

impl<B: HttpBody + Unpin, F: FnOnce() + Unpin> HttpBody for Watched<B, F> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if matches!(polled, Poll::Ready(None | Some(Err(_)))) || self.body.is_end_stream() {
            if let Some(at_end) = self.at_end.take() {
                at_end();
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
