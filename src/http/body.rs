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

/// Routes whose bodies are an image or may carry one whole (a mask, an upload): read under
/// `mask_body_limit`.
pub const IMAGE_ROUTES: &[&str] = &[
    MASK_ROUTE,
    "/api/v1/upload",
    "/playground/upload",
    // The studio's Create (image prompts) and region editor (a mask).
    "/studio/create",
    "/studio/region",
    // The OpenAI Images API's multipart forms.
    "/v1/images/edits",
    "/v1/images/variations",
];

/// Where the moderation lists are written (`PUT .../{name}`), read under `mask_body_limit`.
pub const MODERATION_LISTS: &str = "/api/v1/admin/moderation/lists/";

/// Routes with image fields, which take `data:` URLs: a body that carries one may be up to
/// `mask_body_limit`, any other keeps `body_limit` (checked once read, see [`read_body`]).
pub const DATA_URL_ROUTES: &[&str] = &[
    "/api/v1/imagine",
    "/api/v1/blend",
    "/api/v1/describe",
    "/api/v1/upscale-highres",
    "/api/v1/faceswap",
    // A batch's requests may carry any of those, and an inpaint's mask.
    "/api/v1/batch",
];

/// The limit of a body on a [`DATA_URL_ROUTES`] route that carries no `data:` URL.
#[derive(Clone, Copy, Debug)]
struct PlainLimit(usize);

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

/// How the API answers a body it could not read.
impl From<BodyError> for crate::refusal::ApiError {
    fn from(e: BodyError) -> Self {
        match e {
            BodyError::TooLarge { limit } => Self::PayloadTooLarge { limit },
            BodyError::TimedOut => Self::RequestTimeout,
            BodyError::Broken => Self::BadRequest {
                code: "invalid_body",
                msg: "body: the request body could not be read".into(),
            },
        }
    }
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
        // A moderation list is written whole: 20,000 terms do not fit in `body_limit`. Only
        // an operator's key gets as far as reading it.
        let list = path.starts_with(MODERATION_LISTS);
        if list || IMAGE_ROUTES.contains(&path) || DATA_URL_ROUTES.contains(&path) {
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
    if DATA_URL_ROUTES.contains(&req.uri().path()) {
        req.extensions_mut()
            .insert(PlainLimit(limits.body_limit.min(limit)));
    }
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
    let bytes = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => return Err(classify(&e, limit)),
    };
    // Only a body that carries a data: URL earns the larger limit of its route.
    if let Some(PlainLimit(plain)) = parts.extensions.get::<PlainLimit>() {
        if bytes.len() > *plain && !carries_data_url(&bytes) {
            return Err(BodyError::TooLarge { limit: *plain });
        }
    }
    Ok(bytes)
}

/// Whether `bytes` hold `data:` (in any case) anywhere: a JSON body with a data: URL in it.
fn carries_data_url(bytes: &[u8]) -> bool {
    bytes.windows(5).any(|w| w.eq_ignore_ascii_case(b"data:"))
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
        // A route with image fields: the larger limit only for a body with a data: URL.
        let plain = bound(request("/api/v1/imagine", chunked(vec![&[b'x'; 50]])), &l);
        assert_eq!(read(plain).await, Err(BodyError::TooLarge { limit: 10 }));
        let inline = bound(
            request(
                "/api/v1/imagine",
                chunked(vec![b"\"DATA:image/png", &[b'x'; 40]]),
            ),
            &l,
        );
        assert_eq!(read(inline).await.unwrap().len(), 55);
        let over = bound(
            request("/api/v1/imagine", chunked(vec![b"data:", &[b'x'; 100]])),
            &l,
        );
        assert_eq!(read(over).await, Err(BodyError::TooLarge { limit: 100 }));
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
