//! `GET /v1/models`: the models the account's plan may use, in OpenAI's list shape.

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use super::auth::OpenAiCaller;
use super::doc::ModelList;
use super::error::{Body, OpenAiError};
use crate::http::state::AppState;

/// List the models (OpenAI's shape)
///
/// Each model of `GET /api/v1/models` that the account's plan may use, as OpenAI's `model`
/// objects (`owned_by` is `easel`; `created` the node's start, in Unix seconds).
#[utoipa::path(
    get,
    path = "/v1/models",
    operation_id = "openaiModels",
    tag = "OpenAI Images API",
    responses(
        (status = 200, description = "The models", body = ModelList),
        (status = 401, description = "No easel API key, or not a live one", body = Body),
        (status = 429, description = "A rate limit", body = Body),
    )
)]
pub async fn list_models(
    State(state): State<AppState>,
    caller: OpenAiCaller,
) -> Result<Json<Value>, OpenAiError> {
    let plans = state.plans.get();
    let plan = plans.resolve(&caller.account.plan);
    let created = *STARTED;
    let data: Vec<Value> = state
        .pool
        .catalogue()
        .models
        .iter()
        .filter(|m| m.allows(plan))
        .map(|m| json!({"id": m.name, "object": "model", "created": created, "owned_by": "easel"}))
        .collect();
    Ok(Json(json!({"object": "list", "data": data})))
}

/// When this process first listed its models: the models are the configuration's, made at start.
static STARTED: std::sync::LazyLock<u64> = std::sync::LazyLock::new(super::run::unix_now);
