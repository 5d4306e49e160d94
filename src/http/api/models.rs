//! `GET /api/v1/models`: the models the caller may pick, as the `[[models]]` tables (or the
//! backends, without them) and the backends' health say now.

use axum::extract::State;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::doc::Keyed;
use crate::auth::Caller;
use crate::domain::{OpKind, Shape};
use crate::http::state::AppState;

/// The models a caller may use.
#[derive(Serialize, ToSchema)]
pub struct ModelList {
    models: Vec<Model>,
}

/// A model: what it is, what it runs, its defaults and limits, and whether it is up.
#[derive(Serialize, ToSchema)]
pub struct Model {
    /// What a submit sends as `model`.
    name: String,
    description: String,
    /// The image operations its backends can run.
    #[schema(value_type = Vec<OpKind>)]
    operations: Vec<&'static str>,
    /// What a task runs with when the request does not say; null where the model's backends
    /// have no such control.
    defaults: Defaults,
    /// The least and most `steps` and `cfg_scale` a submit may ask for.
    limits: Limits,
    /// The samplers a submit may name for it.
    samplers: Vec<&'static str>,
    /// The prompt parameters that act on it, as a prompt writes them (`--stop`, `--sref`, `::`
    /// for multi-prompt weights), whichever of its backends runs a task; the others are recorded
    /// with no effect (docs/api.md, "Prompt parameters", has the table kind by kind).
    prompt_parameters: Vec<String>,
    /// Whether a submit that names no model runs on it.
    default: bool,
    /// Whether any of its backends is up now.
    up: bool,
}

/// A model's defaults.
#[derive(Serialize, ToSchema)]
pub struct Defaults {
    #[schema(required = true)]
    steps: Option<u32>,
    #[schema(required = true)]
    cfg_scale: Option<f64>,
    #[schema(required = true)]
    sampler: Option<String>,
    #[schema(required = true)]
    negative_prompt: Option<String>,
}

/// A model's limits, each `[least, most]`.
#[derive(Serialize, ToSchema)]
pub struct Limits {
    #[schema(min_items = 2, max_items = 2)]
    steps: [u32; 2],
    #[schema(min_items = 2, max_items = 2)]
    cfg_scale: [f64; 2],
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_models))
}

/// The models the caller may use
///
/// Each model the caller's plan may use: its name and description, the image operations its
/// backends run, its defaults and limits, the samplers it takes, the prompt parameters that act
/// on it, whether it is the default and whether any of its backends is up now.
#[utoipa::path(
    get,
    path = "/api/v1/models",
    operation_id = "models",
    responses(
        (status = 200, body = ModelList, description = "The models the account's plan may use, \
            with their defaults, limits and whether any of their backends is up"),
        Keyed
    )
)]
pub async fn list_models(
    State(state): State<AppState>,
    Caller(account): Caller,
) -> Json<ModelList> {
    let pool = &state.pool;
    let plans = state.plans.get();
    let models = pool
        .catalogue()
        .models
        .iter()
        .filter(|m| m.allows(plans.resolve(&account.plan)))
        .map(|m| Model {
            name: m.name.clone(),
            description: m.description.clone(),
            operations: OpKind::ALL
                .iter()
                .filter(|k| matches!(k.shape(), Shape::Grid | Shape::Single))
                .filter(|k| pool.supports_on(**k, Some(&m.name)))
                .map(|k| k.as_str())
                .collect(),
            defaults: Defaults {
                steps: m.steps,
                cfg_scale: m.cfg_scale,
                sampler: m.sampler.clone(),
                negative_prompt: m.negative_prompt.clone(),
            },
            limits: Limits {
                steps: m.steps_range,
                cfg_scale: m.cfg_range,
            },
            samplers: m.samplers(),
            prompt_parameters: m.parameters.clone(),
            default: m.default,
            up: pool.model_up(&m.name),
        })
        .collect();
    Json(ModelList { models })
}
