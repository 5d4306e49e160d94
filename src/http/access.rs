//! The access log: one line per request, written when it ends, with what the request noted on
//! its way (`telemetry::request`: the account it acted for, the task it was about).

use std::convert::Infallible;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::http::{Request, Response};
use futures::future::BoxFuture;
use tower::{Layer, Service};

use super::client_address::ClientAddress;
use crate::telemetry::{access, request};

/// The header that carries the request's id (set by `SetRequestIdLayer` when missing).
const REQUEST_ID: &str = "x-request-id";

/// Writes the access line of every request that passes through it.
#[derive(Clone, Copy, Default)]
pub struct AccessLogLayer;
impl<S> Layer<S> for AccessLogLayer {
    type Service = AccessLog<S>;

    fn layer(&self, inner: S) -> AccessLog<S> {
        AccessLog { inner }
    }
}

#[derive(Clone)]
pub struct AccessLog<S> {
    inner: S,
}

impl<S, B, R> Service<Request<B>> for AccessLog<S>
where
    S: Service<Request<B>, Response = Response<R>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = Response<R>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response<R>, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let started = Instant::now();
        let method = req.method().clone();
        let path = req.uri().path().to_owned();
        let client = req.extensions().get::<ClientAddress>().map(|c| c.0);
        let request_id = req
            .headers()
            .get(REQUEST_ID)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        // The service that was made ready is the one to call; a fresh clone stays for the next.
        let ready = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, ready);
        Box::pin(request::scope(request_id, async move {
            let response = inner.call(req).await;
            let status = response.as_ref().map_or(500, |r| r.status().as_u16());
            let elapsed = started.elapsed();
            crate::metrics::observe_request(&path, status, elapsed);
            request::with_noted(|n| {
                access::log(&access::Line {
                    method: method.as_str(),
                    path: &path,
                    client,
                    request_id: n.request_id.as_deref(),
                    account: n.account.as_deref(),
                    task_id: n.task_id,
                    status,
                    latency_ms: elapsed.as_secs_f64() * 1000.0,
                });
            });
            response
        }))
    }
}
