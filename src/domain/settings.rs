//! The generation settings a task runs with: the model, and the values sent to its backend,
//! resolved at submit from the request, its prompt parameters and the model's defaults, so that
//! the record shows the values used.

use serde::{Deserialize, Serialize};

/// The settings used, each `None` where the model or its kind has no such control.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// The model's name (`[[models]]`, or a backend's own name without them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub negative_prompt: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cfg_scale: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampler: Option<String>,
}

impl Settings {
    pub fn is_empty(&self) -> bool {
        self == &Settings::default()
    }
}
