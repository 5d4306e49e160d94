//! Request bodies. Every request's body is wrapped as it comes in ([`bound`]): it is read under
//! its route's byte limit, counted on the bytes actually read whatever the framing (a declared
//! `Content-Length`, chunked, HTTP/2 data frames), and must arrive whole within `body_timeout`.
//! Nothing reads a body on its own: the extractors that need one call [`read`] once the caller is
//! known, so a body is never read before the check it waits on.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::http::request::Parts;
use axum::http::{header, Request};
use http_body::Frame;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use tower::BoxError;

/// The route of the operation whose bodies may carry a mask (`mask_body_limit`).
pub const MASK_ROUTE: &str = "/api/v1/inpaint";

/// Routes whose bodies may carry an image (a mask, an upload, a `data:` URL in an image field):
/// read under `mask_body_limit`, every other under `body_limit`.
pub const IMAGE_ROUTES: &[&str] = &[
    MASK_ROUTE,
    "/api/v1/upload",
    "/api/v1/imagine",
    "/api/v1/blend",
    "/api/v1/describe",
    "/api/v1/upscale-highres",
    "/api/v1/faceswap",
    "/playground/upload",
];

/// The byte limit that applies to a request's body, kept with the request so that a refusal can
/// name it.
#[derive(Clone, Copy, Debug)]
pub struct BodyLimit(pub usize);

/// Why a body could not be read.
#[derive(Debug, PartialEq, Eq)]
pub enum BodyError {
    /// More bytes than the limit, declared or sent.
    TooLarge { limit: usize },
    /// Not all of it arrived within `body_timeout`.
    TimedOut,
    /// The connection failed or the framing was broken.
    Broken,
}

/// The limits every request body is read under.
#[derive(Clone, Copy, Debug)]
pub struct BodyLimits {
    pub body_limit: usize,
    pub mask_body_limit: usize,
    pub body_timeout: Duration,
}

impl BodyLimits {
    fn for_path(&self, path: &str) -> usize {
        if IMAGE_ROUTES.contains(&path) {
            self.mask_body_limit
        } else {
            self.body_limit
        }
    }
}

/// `req` with its body bounded by its route's limit and by a deadline from now.
pub fn bound(mut req: Request<Body>, limits: &BodyLimits) -> Request<Body> {
    let limit = limits.for_path(req.uri().path());
    req.extensions_mut().insert(BodyLimit(limit));
    let deadline = tokio::time::Instant::now() + limits.body_timeout;
    req.map(|body| {
        Body::new(Bounded {
            inner: Limited::new(body, limit),
            deadline: Box::pin(tokio::time::sleep_until(deadline)),
        })
    })
}

/// The whole body of `req`, or why not.
pub async fn read(req: Request<Body>) -> Result<Bytes, BodyError> {
    let (parts, body) = req.into_parts();
    read_body(&parts, body).await
}

/// The whole of `body`, the body of the request whose head is `parts`. A declared length over
/// the limit is refused before anything is read.
pub async fn read_body(parts: &Parts, body: Body) -> Result<Bytes, BodyError> {
    let limit = parts
        .extensions
        .get::<BodyLimit>()
        .map_or(usize::MAX, |l| l.0);
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(BodyError::TooLarge { limit });
    }
    match body.collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) => Err(classify(&e, limit)),
    }
}

fn classify(error: &(dyn std::error::Error + 'static), limit: usize) -> BodyError {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if e.is::<LengthLimitError>() {
            return BodyError::TooLarge { limit };
        }
        if e.is::<TimedOut>() {
            return BodyError::TimedOut;
        }
        cause = e.source();
    }
    BodyError::Broken
}

#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive in time")]
struct TimedOut;

/// A body under a byte limit and a deadline.
struct Bounded {
    inner: Limited<Body>,
    deadline: Pin<Box<tokio::time::Sleep>>,
}

impl HttpBody for Bounded {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.deadline.is_elapsed() {
            return Poll::Ready(Some(Err(TimedOut.into())));
        }
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Pending => match self.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(TimedOut.into()))),
                Poll::Pending => Poll::Pending,
            },
            ready => ready,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(timeout: Duration) -> BodyLimits {
        BodyLimits {
            body_limit: 10,
            mask_body_limit: 100,
            body_timeout: timeout,
        }
    }

    fn request(path: &str, body: Body) -> Request<Body> {
        Request::post(path).body(body).unwrap()
    }

    fn chunked(parts: Vec<&'static [u8]>) -> Body {
        Body::from_stream(futures::stream::iter(
            parts.into_iter().map(Ok::<_, std::io::Error>),
        ))
    }

    #[tokio::test]
    async fn the_limit_holds_on_the_bytes_read_whatever_was_declared() {
        let l = limits(Duration::from_secs(5));
        let ok = bound(request("/signin", chunked(vec![b"12345", b"67890"])), &l);
        assert_eq!(read(ok).await.unwrap(), Bytes::from_static(b"1234567890"));
        let over = bound(request("/signin", chunked(vec![b"12345", b"678901"])), &l);
        assert_eq!(read(over).await, Err(BodyError::TooLarge { limit: 10 }));
        // The mask route has its own limit.
        let mask = bound(request(MASK_ROUTE, chunked(vec![&[b'x'; 50]])), &l);
        assert_eq!(read(mask).await.unwrap().len(), 50);
        // A declared length over the limit is refused before reading.
        let mut declared = bound(request("/x", Body::empty()), &l);
        declared
            .headers_mut()
            .insert(header::CONTENT_LENGTH, "11".parse().unwrap());
        assert_eq!(read(declared).await, Err(BodyError::TooLarge { limit: 10 }));
    }

    #[tokio::test]
    async fn a_body_that_stops_arriving_times_out() {
        let l = limits(Duration::from_millis(50));
        let stalled =
            Body::from_stream(futures::stream::pending::<Result<Bytes, std::io::Error>>());
        let req = bound(request("/signin", stalled), &l);
        assert_eq!(read(req).await, Err(BodyError::TimedOut));
    }
}
