//! The HTTP server loop. `axum::serve` sets no header-read timeout and accepts connections without
//! bound; this loop adds both, so that slow or numerous clients cannot starve the others:
//! - at most `max_connections` open connections (the rest wait in the kernel's accept queue);
//! - request headers must arrive within `header_timeout`, and fit in `MAX_HEADER_BYTES`;
//! - on shutdown, idle connections close at once and busy ones after their current request.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

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
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
) {
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
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.cancelled() => break,
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(
            app.clone()
                .map_request(|req: hyper::Request<Incoming>| req.map(Body::new)),
        );
        let conn = builder
            .serve_connection(TokioIo::new(stream), service)
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
