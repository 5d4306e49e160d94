//! The whole HTTP surface: the API's router and the dashboard's side by side, the health checks,
//! the image files and `/metrics`, inside the layers every request goes through (request id, the
//! access log line, panics caught, each body's limit and deadline), with the node's roles applied.

use std::convert::Infallible;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::DefaultBodyLimit;
use axum::http::{Request, Response};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use tower::{BoxError, Service};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};

use super::access::AccessLogLayer;
use super::body::{self, BodyLimits};
use super::state::AppState;
use crate::config::Role;
use crate::refusal::ApiError;

/// The service that serves every request of the main listener.
///
/// The layers wrap the router once, from outside, rather than each route through
/// `Router::layer`: a route's service is cloned for every request, and with the layers inside
/// it every clone costs allocations (docs/benchmarks.md).
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
    let bodies = BodyLimits {
        body_limit: state.config.limits.body_limit,
        mask_body_limit: state.config.limits.mask_body_limit,
        body_timeout: state.config.server.body_timeout,
    };
    tower::ServiceBuilder::new()
        .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
        .layer(PropagateRequestIdLayer::x_request_id())
        .layer(AccessLogLayer)
        .layer(CatchPanicLayer::custom(|_| {
            ApiError::Internal(anyhow::anyhow!("handler panicked")).into_response()
        }))
        // Every body bounded as it comes in (`super::body`); axum's own default limit would
        // only add a second, different one.
        .map_request(move |req| body::bound(req, &bodies))
        .layer(DefaultBodyLimit::disable())
        .service(router(state))
}

/// Whether `path` is an event stream's, which stays open as long as its client listens: the
/// API's (`/api/v1/events`, `/api/v1/tasks/{task_id}/events`) and the dashboard's
/// (`/tasks/events`, `/tasks/{task_id}/events`). The server serves a connection whose first
/// request is a `GET` of one without hyper's buffers (`super::server`); the router answers it
/// the same either way.
pub fn held_open(path: &str) -> bool {
    let (api, rest) = match path.strip_prefix("/api/v1") {
        Some(rest) => (true, rest),
        None => (false, path),
    };
    match rest
        .strip_prefix("/tasks/")
        .and_then(|r| r.strip_suffix("/events"))
    {
        Some(task) => !task.is_empty() && !task.contains('/'),
        None if api => rest == "/events",
        None => rest == "/tasks/events",
    }
}

/// The routes, the image files and the fallbacks, without the layers of `app`.
fn router(state: AppState) -> Router {
    let api = state.config.runs(Role::Api);
    let mut routes = if api {
        // The health checks are among the API's routes.
        crate::http::api::routes()
    } else {
        // A worker or dispatcher node answers its health checks and nothing else.
        crate::http::api::health::routes().into()
    };
    if state.config.server.metrics_token.is_some() {
        // Without a token the path is not routed at all (404, like any unknown path).
        routes = routes.route("/metrics", get(super::metrics::guarded));
    }
    if !api {
        return routes
            .fallback(|| async { ApiError::RouteNotFound })
            .with_state(state);
    }
    routes
        .merge(
            crate::http::web::routes().route_layer(axum::middleware::from_fn_with_state(
                state.clone(),
                dashboard_host,
            )),
        )
        .fallback(|| async { ApiError::RouteNotFound })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .with_state(state)
}

/// Middleware for the dashboard's routes: 421 for a request that names a host other than the
/// dashboard's own (`super::hosts`).
async fn dashboard_host(
    axum::extract::State(state): axum::extract::State<AppState>,
    req: Request<Body>,
    next: axum::middleware::Next,
) -> Response<Body> {
    let allowed =
        super::hosts::authority(req.uri(), req.headers()).is_some_and(|a| state.hosts.allows(&a));
    if !allowed {
        return (
            axum::http::StatusCode::MISDIRECTED_REQUEST,
            "This host name is not one this dashboard is served under.\n",
        )
            .into_response();
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::held_open;

    #[test]
    fn the_event_streams_paths_are_held_open_and_no_other() {
        for path in [
            "/api/v1/events",
            "/api/v1/tasks/0b6c4a52-6b0e-4b1e-9d7e-3f1f5f2b9a11/events",
            "/tasks/events",
            "/tasks/0b6c4a52-6b0e-4b1e-9d7e-3f1f5f2b9a11/events",
        ] {
            assert!(held_open(path), "{path}");
        }
        for path in [
            "/",
            "/events",
            "/api/v1/tasks",
            "/api/v1/tasks/events",
            "/api/v1/tasks//events",
            "/api/v1/tasks/a/b/events",
            "/api/v1/tasks/x/events/",
            "/api/v1/eventsx",
            "/tasks/x/eventsy",
            "/api/v2/events",
        ] {
            assert!(!held_open(path), "{path}");
        }
    }
}
