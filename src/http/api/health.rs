//! `GET /healthz` and `GET /readyz`: the health checks, served by every node whatever its roles.

use axum::extract::State;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::doc::Retry;
use crate::generate::pool::BackendHealth;
use crate::http::state::AppState;
use crate::refusal::ApiError;

/// The answer of both checks.
#[derive(Serialize, ToSchema)]
pub struct Health {
    /// `ok` (alive) or `ready`.
    status: &'static str,
    /// `/readyz` on a worker node with configured backends: each backend's state and the models
    /// it serves.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    backends: Option<Vec<BackendHealth>>,
    /// `/readyz` on a worker node with configured backends: each model, and whether any backend
    /// serving it is up.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    models: Option<Vec<ModelHealth>>,
}

/// A model, and whether any backend serving it is up.
#[derive(Serialize, ToSchema)]
pub struct ModelHealth {
    name: String,
    up: bool,
}

/// The health checks, documented and routed together.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(alive))
        .routes(routes!(ready))
}

/// Liveness
///
/// The process answers.
#[utoipa::path(
    get,
    path = "/healthz",
    operation_id = "healthz",
    security(()),
    responses((status = 200, description = "Alive", body = Health))
)]
pub async fn alive() -> Json<Health> {
    Json(Health {
        status: "ok",
        backends: None,
        models: None,
    })
}

/// Readiness: the store answers, the server is not shutting down and its workers are not paused
/// by failing image storage
///
/// On a worker node with configured backends, also that one of them is up; the answer names each
/// backend and its state either way.
#[utoipa::path(
    get,
    path = "/readyz",
    operation_id = "readyz",
    security(()),
    responses(
        (status = 200, description = "Ready", body = Health),
        (status = 503, response = Retry)
    )
)]
pub async fn ready(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
    if state.shutdown.is_cancelled() {
        return Err(ApiError::Unavailable {
            msg: "shutting down".into(),
            retry_after_secs: 5,
        });
    }
    state.store.ping().await?;
    if state.config.runs(crate::config::Role::Worker) {
        if let Some(cause) = state.blobs.health().paused() {
            return Err(ApiError::Unavailable {
                msg: format!("workers are paused: {cause}"),
                retry_after_secs: 5,
            });
        }
    }
    let mut ready = Health {
        status: "ready",
        backends: None,
        models: None,
    };
    if !state.config.backends.is_empty() && state.config.runs(crate::config::Role::Worker) {
        let backends = state.pool.health();
        if !backends.iter().any(|b| b.up) {
            let names: Vec<String> = backends
                .iter()
                .map(|b| match &b.last_error {
                    Some(e) => format!("{} ({e})", b.name),
                    None => b.name.clone(),
                })
                .collect();
            return Err(ApiError::Unavailable {
                msg: format!("no image backend answers: {}", names.join(", ")),
                retry_after_secs: 5,
            });
        }
        ready.models = Some(
            state
                .pool
                .catalogue()
                .models
                .iter()
                .map(|m| ModelHealth {
                    name: m.name.clone(),
                    up: state.pool.model_up(&m.name),
                })
                .collect(),
        );
        ready.backends = Some(backends);
    }
    Ok(Json(ready))
}
