use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use crate::http::state::AppState;
use crate::refusal::ApiError;

/// Liveness: the process answers.
pub async fn alive() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// Readiness: the store answers, the process is not shutting down and, on a worker node, images
/// can be written (see `blobs::StorageHealth`).
pub async fn ready(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
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
    if !state.config.backends.is_empty() && state.config.runs(crate::config::Role::Worker) {
        // A worker node with configured backends is ready while one of them is; the answer
        // names each backend and its state either way.
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
        // Each model, and whether any backend serving it is up.
        let models: Vec<Value> = state
            .pool
            .catalogue()
            .models
            .iter()
            .map(|m| json!({"name": m.name, "up": state.pool.model_up(&m.name)}))
            .collect();
        return Ok(Json(
            json!({"status": "ready", "backends": backends, "models": models}),
        ));
    }
    Ok(Json(json!({"status": "ready"})))
}
