//! The HTTP server loop. `axum::serve` sets no header-read timeout and accepts connections without
//! bound; this loop adds both, so that slow or numerous clients cannot starve the others:
//! - at most `max_connections` open connections (the rest wait in the kernel's accept queue);
//! - request headers must arrive within `header_timeout`, and fit in `MAX_HEADER_BYTES`;
//! - a connection that says nothing is closed: before its first request after `header_timeout`,
//!   between requests after `KEEP_ALIVE_IDLE` (hyper's own timeout starts only with a first byte),
//!   but never while one of its requests is being answered;
//! - on shutdown, idle connections close at once and busy ones after their current request.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use std::convert::Infallible;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::ConnectInfo;
use axum::http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tower::{BoxError, Service, ServiceExt};

/// How long a keep-alive connection may sit idle between requests.
pub const KEEP_ALIVE_IDLE: Duration = Duration::from_secs(60);

/// The largest request head (request line and headers) accepted; larger ones get 431.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;

/// How the server treats connections.
#[derive(Clone, Copy, Debug)]
pub struct ConnectionLimits {
    pub max_connections: usize,
    pub header_timeout: Duration,
    /// How long shutdown waits for requests in progress.
    pub drain: Duration,
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
        .max_header_list_size(MAX_HEADER_BYTES as u32);
    let builder = Arc::new(builder);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
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
        let _ = stream.set_nodelay(true);
        // Requests of this connection being answered: its silence is not idleness meanwhile.
        let busy = Arc::new(AtomicUsize::new(0));
        let answering = busy.clone();
        // The client's address, for the dashboard's sign-in limits.
        let service = TowerToHyperService::new(
            app.clone()
                .map_request(move |req: hyper::Request<Incoming>| {
                    let mut req = req.map(Body::new);
                    req.extensions_mut().insert(ConnectInfo(peer));
                    req
                })
                .map_future(move |answer| {
                    let busy = Busy::start(&answering);
                    async move {
                        let answered = answer.await;
                        drop(busy);
                        answered
                    }
                }),
        );
        let io = SilenceTimeout::new(stream, limits.header_timeout, KEEP_ALIVE_IDLE, busy);
        let conn = builder
            .serve_connection(TokioIo::new(io), service)
            .into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            // Errors here are the client's (reset, malformed request, header timeout).
            let _ = conn.await;
            drop(permit);
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

/// One request of a connection being answered, from the handler's call until its answer (or
/// its cancellation).
struct Busy(Arc<AtomicUsize>);

impl Busy {
    fn start(count: &Arc<AtomicUsize>) -> Busy {
        count.fetch_add(1, Ordering::Relaxed);
        Busy(count.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A stream whose reads fail with `TimedOut` when the peer stays silent too long: `first` before
/// any byte has arrived, `idle` afterwards. Only a pending read counts, so a slow reader of our
/// answer is not affected, and not while a request of the connection is being answered (`busy`):
/// hyper keeps a read pending then to notice a client that goes away, and a request held by
/// `Prefer: wait` may take a minute.
struct SilenceTimeout<T> {
    inner: T,
    first: bool,
    first_timeout: Duration,
    idle_timeout: Duration,
    deadline: Pin<Box<tokio::time::Sleep>>,
    armed: bool,
    busy: Arc<AtomicUsize>,
}

impl<T> SilenceTimeout<T> {
    fn new(
        inner: T,
        first_timeout: Duration,
        idle_timeout: Duration,
        busy: Arc<AtomicUsize>,
    ) -> Self {
        SilenceTimeout {
            inner,
            first: true,
            first_timeout,
            idle_timeout,
            deadline: Box::pin(tokio::time::sleep(first_timeout)),
            armed: false,
            busy,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for SilenceTimeout<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(result) => {
                this.armed = false;
                this.first = false;
                Poll::Ready(result)
            }
            Poll::Pending => {
                if this.busy.load(Ordering::Relaxed) > 0 {
                    // Armed afresh once the answer is out: hyper reads again for the next request.
                    this.armed = false;
                    return Poll::Pending;
                }
                if !this.armed {
                    let wait = if this.first {
                        this.first_timeout
                    } else {
                        this.idle_timeout
                    };
                    this.deadline
                        .as_mut()
                        .reset(tokio::time::Instant::now() + wait);
                    this.armed = true;
                }
                match this.deadline.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "client silent too long",
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for SilenceTimeout<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}
