//! `GET /metrics`: on the main listener behind `metrics_token`, or unauthenticated on the
//! `metrics_listen` address (docs/metrics.md).

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use super::state::AppState;
use crate::metrics::{self, BackendGauges};
use crate::refusal::ApiError;

async fn exposition(state: &AppState) -> Response {
    let queue = match state.store.queue_by_status_and_mode().await {
        Ok(queue) => queue,
        // The conversion counts the store error.
        Err(e) => return ApiError::from(e).into_response(),
    };
    let plans = match state.store.load_by_plan().await {
        Ok(plans) => plans,
        Err(e) => return ApiError::from(e).into_response(),
    };
    let backends = state.pool.health().into_iter().map(|b| BackendGauges {
        name: b.name,
        up: b.up,
        in_flight: b.in_flight,
    });
    let pool = &state.pool;
    let models: Vec<(String, bool)> = pool
        .catalogue()
        .models
        .iter()
        .map(|m| (m.name.clone(), pool.model_up(&m.name)))
        .collect();
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static(metrics::CONTENT_TYPE),
        )],
        metrics::render(&queue, &plans, backends, models),
    )
        .into_response()
}

/// `GET /metrics` on the main listener: only with `Authorization: Bearer <metrics_token>`.
pub async fn guarded(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let Some(token) = state.config.server.metrics_token.as_deref() else {
        return ApiError::RouteNotFound.into_response();
    };
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    // Constant time, so that the comparison does not tell how much of a guess was right.
    if !bool::from(presented.as_bytes().ct_eq(token.as_bytes())) {
        return ApiError::Unauthorized.into_response();
    }
    exposition(&state).await
}

/// `GET /metrics` on the separate `metrics_listen` address: no credentials.
async fn open(State(state): State<AppState>) -> Response {
    exposition(&state).await
}

/// The router of the `metrics_listen` address: `/metrics` and nothing else.
pub fn router(state: AppState) -> axum::Router {
    axum::Router::new()
        .route("/metrics", axum::routing::get(open))
        .fallback(|| async { ApiError::RouteNotFound })
        .with_state(state)
}
