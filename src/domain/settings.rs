//! The generation settings a task runs with: the model, and the values sent to its backend,
//! resolved at submit from the request, its prompt parameters and the model's defaults, so that
//! the record shows the values used.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The settings used, each `None` where the model or its kind has no such control.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Settings {
    /// The model the task ran (or runs) on (`[[models]]`, or a backend's own name without
    /// them); absent for the operations that run on no model (describe, shorten, seed) and for
    /// tasks stored before models existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub model: Option<String>,
    /// The negative prompt sent to the backend, where there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub negative_prompt: Option<String>,
    /// The sampling steps sent, where the model's backends take steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub steps: Option<u32>,
    /// The guidance sent, where the model's backends take guidance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub cfg_scale: Option<f64>,
    /// The sampler sent, where the model's backends take one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub sampler: Option<String>,
}

impl Settings {
    pub fn is_empty(&self) -> bool {
        self == &Settings::default()
    }
}
