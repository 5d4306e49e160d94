//! The access log: one line per request, written when it ends, with what the request learned
//! on its way (the account it acted for, the task it was about).
//!
//! What a request learns is noted in a task-local slot rather than recorded into a `tracing`
//! span: a span per request formatted its fields when it was made and again when each field was
//! recorded, then its line repeated them, about 20,000 instructions per submit of about 125,000
//! (callgrind, wrk at 16 connections). Lines logged inside a request (`ApiError`) read the same
//! slot, so they name the request too.

use std::cell::RefCell;
use std::convert::Infallible;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::http::{HeaderValue, Request, Response};
use futures::future::BoxFuture;
use tower::{Layer, Service};
use uuid::Uuid;

/// The header that carries the request's id (set by `SetRequestIdLayer` when missing).
const REQUEST_ID: &str = "x-request-id";

tokio::task_local! {
    static NOTED: RefCell<Noted>;
}

/// What a request learned about itself.
#[derive(Default)]
struct Noted {
    request_id: Option<HeaderValue>,
    account: Option<String>,
    task_id: Option<Uuid>,
}

/// Note the account the request acts for (once its key was found live).
pub fn note_account(account: &str) {
    let _ = NOTED.try_with(|n| n.borrow_mut().account = Some(account.to_owned()));
}

/// Note the task the request is about.
pub fn note_task(task_id: Uuid) {
    let _ = NOTED.try_with(|n| n.borrow_mut().task_id = Some(task_id));
}

/// The request id, account and task noted so far, for a line logged inside the request; empty
/// strings outside one.
pub fn context() -> (String, String, String) {
    NOTED
        .try_with(|n| {
            let n = n.borrow();
            (
                n.request_id
                    .as_ref()
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned(),
                n.account.clone().unwrap_or_default(),
                n.task_id.map(|id| id.to_string()).unwrap_or_default(),
            )
        })
        .unwrap_or_default()
}

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
        let noted = Noted {
            request_id: req.headers().get(REQUEST_ID).cloned(),
            ..Noted::default()
        };
        // The service that was made ready is the one to call; a fresh clone stays for the next.
        let ready = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, ready);
        Box::pin(NOTED.scope(RefCell::new(noted), async move {
            let response = inner.call(req).await;
            let status = response.as_ref().map_or(500, |r| r.status().as_u16());
            let elapsed = started.elapsed();
            crate::metrics::observe_request(&path, status, elapsed);
            NOTED.with(|n| {
                let n = n.borrow();
                tracing::info!(
                    method = %method,
                    path = %path,
                    request_id = n.request_id.as_ref().and_then(|v| v.to_str().ok()),
                    account = n.account.as_deref(),
                    task_id = n.task_id.map(tracing::field::display),
                    status,
                    latency_ms = elapsed.as_secs_f64() * 1000.0,
                    "request done"
                );
            });
            response
        }))
    }
}
