use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use super::{ApiError, AppState};

/// Liveness: the process answers.
pub async fn alive() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// Readiness: the store answers and the process is not shutting down.
pub async fn ready(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    if state.shutdown.is_cancelled() {
        return Err(ApiError::Unavailable {
            msg: "shutting down".into(),
            retry_after_secs: 5,
        });
    }
    state.store.ping().await?;
    Ok(Json(json!({"status": "ready"})))
}
