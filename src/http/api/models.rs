//! `GET /api/v1/models`: the models the caller may pick, as the `[[models]]` tables (or the
//! backends, without them) and the backends' health say now.

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use crate::auth::Caller;
use crate::domain::{OpKind, Shape};
use crate::http::state::AppState;

/// Each model the caller's plan may use: its name and description, the image operations its
/// backends run, its defaults and limits, the samplers it takes, whether it is the default and
/// whether any of its backends is up now.
pub async fn list_models(State(state): State<AppState>, Caller(account): Caller) -> Json<Value> {
    let pool = &state.pool;
    let models: Vec<Value> = pool
        .catalogue()
        .models
        .iter()
        .filter(|m| m.allows(&account.plan))
        .map(|m| {
            let operations: Vec<&str> = OpKind::ALL
                .iter()
                .filter(|k| matches!(k.shape(), Shape::Grid | Shape::Single))
                .filter(|k| pool.supports_on(**k, Some(&m.name)))
                .map(|k| k.as_str())
                .collect();
            json!({
                "name": m.name,
                "description": m.description,
                "operations": operations,
                "defaults": {
                    "steps": m.steps,
                    "cfg_scale": m.cfg_scale,
                    "sampler": m.sampler,
                    "negative_prompt": m.negative_prompt,
                },
                "limits": {
                    "steps": m.steps_range,
                    "cfg_scale": m.cfg_range,
                },
                "samplers": m.samplers(),
                "default": m.default,
                "up": pool.model_up(&m.name),
            })
        })
        .collect();
    Json(json!({ "models": models }))
}
