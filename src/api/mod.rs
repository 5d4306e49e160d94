//! The HTTP API: routes, shared state, request tracing, and the error shape.

pub mod access;
mod account;
mod error;
mod files;
mod health;
pub mod idempotency;
pub(crate) mod json;
pub mod record;
pub(crate) mod submit;
pub mod tasks;
pub mod wait;

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::DefaultBodyLimit;
use axum::http::{header, Request, Response};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;
use tokio_util::sync::CancellationToken;
use tower::{BoxError, Service};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};

pub use error::ApiError;
pub use record::rfc3339;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_openapi_document_lists_exactly_the_routes() {
        let doc: serde_json::Value = serde_json::from_str(OPENAPI).expect("valid JSON");
        let mut documented: Vec<(String, String)> = Vec::new();
        for (path, ops) in doc["paths"].as_object().expect("paths") {
            for method in ops.as_object().expect("operations").keys() {
                documented.push((method.clone(), path.clone()));
            }
        }
        let mut routes: Vec<(String, String)> = ROUTES
            .iter()
            .map(|(m, p)| (m.to_string(), p.to_string()))
            .collect();
        documented.sort();
        routes.sort();
        assert_eq!(documented, routes);
    }
}

use crate::blobs::Blobs;
use crate::config::Config;
use crate::domain::{ContentPolicy, OpKind};
use crate::generate::inputs::ImageFetcher;
use crate::generate::pool::Pool;
use crate::net::DestinationPolicy;
use crate::store::SharedStore;

/// What every handler can reach. Behind one `Arc`: axum clones the state for every request
/// (each extractor that needs it takes its own copy), and one reference count costs less than
/// the dozen its fields hold (cloning and dropping them was 2.3% of easel's CPU in a profile of
/// submits at 64 connections).
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl AppState {
    pub fn new(shared: Shared) -> AppState {
        AppState(Arc::new(shared))
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// The state's contents.
pub struct Shared {
    pub config: Arc<Config>,
    pub store: SharedStore,
    /// Where images are kept: records make their URLs from their keys, `/files/{key}` reads
    /// them from here.
    pub blobs: Blobs,
    /// The image backends: submits of an operation none of them can run are refused, and
    /// `/readyz` shows their health.
    pub pool: Arc<Pool>,
    /// Checks callers' input image URLs at submit (workers fetch them).
    pub fetcher: ImageFetcher,
    pub destinations: DestinationPolicy,
    pub content_policy: ContentPolicy,
    /// Cancelled when the process starts shutting down.
    pub shutdown: CancellationToken,
    /// The request rate limits by plan (`rate_limits`), checked where the key is read.
    pub rate_limits: crate::ratelimit::RateLimits,
    /// The submits with an `Idempotency-Key` in flight on this node.
    pub idempotency: Arc<idempotency::InFlight>,
}

/// The OpenAPI 3 document of this API, served at `/api/v1/openapi.json`.
pub const OPENAPI: &str = include_str!("openapi.json");

/// Every API route the server answers, as (method, path) with `{param}` placeholders. The OpenAPI
/// document lists exactly these; the tests check both against the running router. The
/// dashboard's pages (`crate::web::routes`) are HTML for people, not part of the API, and are
/// neither listed here nor documented there.
pub const ROUTES: &[(&str, &str)] = &[
    ("post", "/api/v1/imagine"),
    ("post", "/api/v1/upscale-1x"),
    ("post", "/api/v1/upscale-alt"),
    ("post", "/api/v1/upscale-highres"),
    ("post", "/api/v1/variations"),
    ("post", "/api/v1/reroll"),
    ("post", "/api/v1/pan"),
    ("post", "/api/v1/outpaint"),
    ("post", "/api/v1/inpaint"),
    ("post", "/api/v1/blend"),
    ("post", "/api/v1/describe"),
    ("post", "/api/v1/shorten"),
    ("post", "/api/v1/seed"),
    ("post", "/api/v1/faceswap"),
    ("post", "/api/v1/fetch"),
    ("post", "/api/v1/fetch-many"),
    ("get", "/api/v1/tasks"),
    ("get", "/api/v1/tasks/{task_id}"),
    ("post", "/api/v1/tasks/{task_id}/cancel"),
    ("post", "/api/v1/tasks/{task_id}/redeliver"),
    ("get", "/api/v1/tasks/{task_id}/webhook-attempts"),
    ("get", "/api/v1/account"),
    ("get", "/api/v1/openapi.json"),
    ("get", "/healthz"),
    ("get", "/readyz"),
];

/// The whole HTTP surface: the API under `/api/v1`, health checks, the image files and the
/// dashboard, inside the layers every request goes through (request id, the access log line,
/// panics caught, the body limit).
///
/// The layers wrap the router once, from outside, rather than each route through
/// `Router::layer`: a route's service is cloned for every request, and with the layers inside
/// it that clone cost about 21 allocations per request (callgrind, submits at 16 connections).
pub fn app(
    state: AppState,
) -> impl Service<
    Request<Body>,
    Response = Response<impl HttpBody<Data = Bytes, Error = impl Into<BoxError>> + Send + 'static>,
    Error = Infallible,
    Future: Send + 'static,
> + Clone
       + Send
       + 'static {
    // The larger limit here; the body extractor applies each route's own.
    let body_limit = state
        .config
        .limits
        .body_limit
        .max(state.config.limits.mask_body_limit);
    tower::ServiceBuilder::new()
        .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
        .layer(PropagateRequestIdLayer::x_request_id())
        .layer(access::AccessLogLayer)
        .layer(CatchPanicLayer::custom(|_| {
            ApiError::Internal(anyhow::anyhow!("handler panicked")).into_response()
        }))
        .layer(DefaultBodyLimit::max(body_limit))
        .service(router(state))
}

/// The routes, the image files and the fallbacks, without the layers of `app`.
fn router(state: AppState) -> Router {
    let mut health = Router::new()
        .route("/healthz", get(health::alive))
        .route("/readyz", get(health::ready));
    if state.config.server.metrics_token.is_some() {
        // Without a token the path is not routed at all (404, like any unknown path).
        health = health.route("/metrics", get(crate::metrics::guarded));
    }
    if !state.config.runs(crate::config::Role::Api) {
        // A worker or dispatcher node answers its health checks and nothing else.
        return health
            .fallback(|| async { ApiError::RouteNotFound })
            .with_state(state);
    }
    // Full paths rather than a router nested under `/api/v1`: a nested router rewrites every
    // request's URI to strip its prefix (a parse and an allocation per request).
    let mut api = health;
    for kind in OpKind::ALL {
        api = api.route(&format!("/api/v1/{kind}"), post(submit::submit));
    }
    api.route("/api/v1/fetch", post(tasks::fetch))
        .route("/api/v1/fetch-many", post(tasks::fetch_many))
        .route("/api/v1/tasks", get(tasks::list_tasks))
        .route("/api/v1/tasks/{task_id}", get(tasks::get_task))
        .route("/api/v1/tasks/{task_id}/cancel", post(tasks::cancel))
        .route("/api/v1/tasks/{task_id}/redeliver", post(tasks::redeliver))
        .route(
            "/api/v1/tasks/{task_id}/webhook-attempts",
            get(tasks::webhook_attempts),
        )
        .route("/api/v1/account", get(account::get_account))
        .route(
            "/api/v1/openapi.json",
            get(|| async { ([(header::CONTENT_TYPE, "application/json")], OPENAPI) }),
        )
        .route("/files/{*key}", get(files::serve))
        .merge(crate::web::routes())
        .fallback(|| async { ApiError::RouteNotFound })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .with_state(state)
}
