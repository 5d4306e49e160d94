//! The models callers may pick (`[[models]]` tables): which backends serve each, the checkpoint
//! (or workflow's checkpoint, or OpenAI model) it names, its defaults and limits (which plans may use it is the
//! plans' `models`, [`super::plans`]). Without `[[models]]`, each backend is its own model under its own name with
//! its kind's defaults ([`kind_defaults`]), so no adapter needs a step count of its own.
//!
//! The settings are checked here once at start and turned into a [`Catalogue`], which submits,
//! the pool and `GET /api/v1/models` read.

use std::fmt::Display;

use serde::{Deserialize, Serialize};

use super::backends::{BackendConfig, BackendKind, Dialect};
use super::samplers::{kind_knows, known_to, sampler};
use crate::domain::parameters::known::{self, Backend, ModelControls};
use crate::domain::parameters::REFERENCES;

/// Most characters of a `negative_prompt`, a caller's or a model's default.
pub const NEGATIVE_PROMPT_MAX_CHARS: usize = 4000;
/// The widest `limits.steps` an operator may set: past 500 no sampler improves.
pub const STEPS_BOUNDS: [u32; 2] = [1, 500];
/// The widest `limits.cfg_scale` an operator may set.
pub const CFG_SCALE_BOUNDS: [f64; 2] = [0.0, 100.0];

/// One `[[models]]` table as written.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// What callers send as `model`: lower-case letters, digits, `-`, `_` and `.`.
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// The `[[backends]]` that serve it, by name.
    pub backends: Vec<String>,
    /// sdwebui: the checkpoint to switch to; comfyui: the CheckpointLoaderSimple's `ckpt_name`;
    /// openai: the model. Unset: the backend's own `model` (or the workflow's checkpoint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<String>,
    #[serde(default)]
    pub defaults: ModelDefaults,
    #[serde(default)]
    pub limits: ModelLimits,
    /// The model used when a request names none; at most one model has it. When none has it,
    /// the first model is the default.
    #[serde(default)]
    pub default: bool,
}

/// A model's defaults; each unset one is its backends' kind's.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelDefaults {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cfg_scale: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampler: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub negative_prompt: Option<String>,
}

/// A model's limits, each `[least, most]`; each unset one is its backends' kind's.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelLimits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<[u32; 2]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cfg_scale: Option<[f64; 2]>,
}

/// What a kind of backend runs with when neither the request nor the model says. `None` where
/// the kind has no such control (OpenAI's images API and the procedural generator take no steps,
/// guidance or sampler): the record then shows none.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KindDefaults {
    pub steps: Option<u32>,
    pub cfg_scale: Option<f64>,
    pub sampler: Option<&'static str>,
    pub steps_range: [u32; 2],
    pub cfg_range: [f64; 2],
}

/// Every kind's defaults, in one place (docs/configuration.md has the same table). The WebUI's
/// 30 steps of Euler a and ComfyUI's 20 of Euler are each one's usual starting point; 7 is the
/// guidance most Stable Diffusion checkpoints are tuned for.
pub fn kind_defaults(kind: BackendKind) -> KindDefaults {
    let (steps, cfg_scale, sampler) = match kind {
        BackendKind::Sdwebui => (Some(30), Some(7.0), Some("euler_a")),
        BackendKind::Comfyui => (Some(20), Some(7.0), Some("euler")),
        BackendKind::Openai | BackendKind::Procedural => (None, None, None),
    };
    KindDefaults {
        steps,
        cfg_scale,
        sampler,
        steps_range: [1, 150],
        cfg_range: [1.0, 30.0],
    }
}

/// A model as callers and the pool see it: every default and limit filled in.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Model {
    pub name: String,
    pub description: String,
    /// The backends that serve it, by name, and their kinds.
    pub backends: Vec<String>,
    #[serde(skip)]
    pub kinds: Vec<BackendKind>,
    #[serde(skip)]
    pub checkpoint: Option<String>,
    pub steps: Option<u32>,
    pub cfg_scale: Option<f64>,
    pub sampler: Option<String>,
    pub negative_prompt: Option<String>,
    pub steps_range: [u32; 2],
    pub cfg_range: [f64; 2],
    pub default: bool,
    /// The plans that may use it (`models` of `[plans.NAME]`); None: every plan.
    #[serde(skip)]
    pub plans: Option<Vec<String>>,
    /// The prompt parameters that act on it whichever of its backends runs a task
    /// ([`known::acting`]); the others are recorded with no effect.
    #[serde(skip)]
    pub parameters: Vec<String>,
}

impl Model {
    /// Whether an account on `plan` may use it.
    pub fn allows(&self, plan: &str) -> bool {
        self.plans
            .as_ref()
            .is_none_or(|plans| plans.iter().any(|p| p == plan))
    }

    /// The samplers every one of its backends can use.
    pub fn samplers(&self) -> Vec<&'static str> {
        known_to(&self.kinds)
    }

    /// Whether one of its backends has the sampler, step and guidance controls (sdwebui,
    /// comfyui); on the others these are recorded without effect.
    pub fn has_controls(&self) -> bool {
        self.kinds
            .iter()
            .any(|k| matches!(k, BackendKind::Sdwebui | BackendKind::Comfyui))
    }
}

/// Every model, in the order configured (or of the backends). With `[[models]]` exactly one is
/// the default; without, none is: a request that names no model runs on any backend that can
/// run it (as before models existed, so that identical backends share the work), with the
/// defaults and limits of `anywhere`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Catalogue {
    pub models: Vec<Model>,
    /// Without `[[models]]`: the settings of a task that names no model, from the first
    /// backend's kind that has each (its name is empty; the record shows no model).
    pub anywhere: Option<Model>,
}

impl Catalogue {
    /// The models of `configured` (or one per backend when there are none) over `backends` (or
    /// the one built-in procedural backend when there are none); a message naming the model and
    /// the setting when one is broken.
    pub fn build(
        configured: &[ModelConfig],
        backends: &[BackendConfig],
    ) -> Result<Catalogue, String> {
        let described = described(backends);
        let builtin;
        let backends: Vec<(&str, BackendKind, Option<&str>)> = if backends.is_empty() {
            builtin = [("procedural", BackendKind::Procedural, None)];
            builtin.to_vec()
        } else {
            backends
                .iter()
                .map(|b| (b.name.as_str(), b.kind, b.model.as_deref()))
                .collect()
        };
        if configured.is_empty() {
            let models = backends
                .iter()
                .map(|(name, kind, model)| {
                    let config = ModelConfig {
                        name: name.to_string(),
                        description: format!("the {} backend {name}", kind.as_str()),
                        backends: vec![name.to_string()],
                        // ComfyUI's workflow names its own checkpoint.
                        checkpoint: model
                            .filter(|_| *kind != BackendKind::Comfyui)
                            .map(Into::into),
                        ..ModelConfig::default()
                    };
                    fill(&config, vec![*kind], &described)
                })
                .collect::<Result<_, _>>()?;
            let anywhere = ModelConfig {
                backends: backends.iter().map(|b| b.0.to_string()).collect(),
                ..ModelConfig::default()
            };
            let kinds = backends.iter().map(|b| b.1).collect();
            return Ok(Catalogue {
                models,
                anywhere: Some(fill(&anywhere, kinds, &described)?),
            });
        }
        let mut models: Vec<Model> = Vec::new();
        for config in configured {
            let at = |setting: &str| format!("models.{}.{setting}", config.name);
            check_name(&config.name)?;
            if models.iter().any(|m| m.name == config.name) {
                return Err(format!("models: the name {:?} is used twice", config.name));
            }
            if config.backends.is_empty() {
                return Err(format!(
                    "{}: must name at least one backend",
                    at("backends")
                ));
            }
            let mut kinds = Vec::new();
            for name in &config.backends {
                let Some((_, kind, _)) = backends.iter().find(|(b, _, _)| b == name) else {
                    return Err(format!(
                        "{}: no backend is named {name:?} (the backends are {})",
                        at("backends"),
                        names(backends.iter().map(|b| b.0))
                    ));
                };
                kinds.push(*kind);
            }
            models.push(fill(config, kinds, &described)?);
        }
        match models.iter().filter(|m| m.default).count() {
            0 => models[0].default = true,
            1 => {}
            _ => {
                return Err(format!(
                    "models: only one model may be the default; {} are",
                    names(models.iter().filter(|m| m.default).map(|m| m.name.as_str()))
                ))
            }
        }
        if let Some((unused, _, _)) = backends
            .iter()
            .find(|(b, _, _)| !models.iter().any(|m| m.backends.iter().any(|n| n == b)))
        {
            return Err(format!(
                "backends.{unused}: serves no model; name it in a [[models]] table's backends, \
                 or remove it"
            ));
        }
        Ok(Catalogue {
            models,
            anywhere: None,
        })
    }

    pub fn get(&self, name: &str) -> Option<&Model> {
        self.models.iter().find(|m| m.name == name)
    }

    /// The model a request that names none runs on.
    pub fn default_model(&self) -> Option<&Model> {
        self.models.iter().find(|m| m.default)
    }

    /// The names of the models `backend` serves.
    pub fn served_by(&self, backend: &str) -> Vec<String> {
        self.models
            .iter()
            .filter(|m| m.backends.iter().any(|b| b == backend))
            .map(|m| m.name.clone())
            .collect()
    }

    /// The checkpoint of `model`, where it names one.
    pub fn checkpoint(&self, model: &str) -> Option<&str> {
        self.get(model).and_then(|m| m.checkpoint.as_deref())
    }

    /// Every model's name, for messages.
    pub fn names(&self) -> String {
        names(self.models.iter().map(|m| m.name.as_str()))
    }
}

fn names<'a>(all: impl Iterator<Item = &'a str>) -> String {
    all.collect::<Vec<_>>().join(", ")
}

fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_' | b'.')
        });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "models: name {name:?} must be 1 to 64 lower-case letters, digits, '-', '_' and '.'"
        ))
    }
}

/// `config` with what it leaves unset taken from the first of `kinds` that has it, checked.
/// A model's limits `[least, most]` for a setting (at `at`), within what easel allows (`bounds`).
/// A NaN or infinite end is outside them.
fn check_limits<T: PartialOrd + Display>(
    range: [T; 2],
    bounds: [T; 2],
    at: &str,
) -> Result<(), String> {
    let [lo, hi] = &range;
    if lo <= hi && *lo >= bounds[0] && *hi <= bounds[1] {
        return Ok(());
    }
    let [least, most] = &bounds;
    Err(format!(
        "{at}: must be [least, most] with {least} <= least <= most <= {most}"
    ))
}

/// A model's default for setting `name` (at `at`), when it has one, within its limits.
fn check_default<T: PartialOrd + Display>(
    value: Option<T>,
    range: [T; 2],
    at: &str,
    name: &str,
) -> Result<(), String> {
    let [lo, hi] = &range;
    match value {
        Some(v) if !(*lo <= v && v <= *hi) => {
            Err(format!("{at}: {v} is outside limits.{name} [{lo}, {hi}]"))
        }
        _ => Ok(()),
    }
}

/// Each backend as the prompt's parameters see it, by name: its kind, dialect and the reference
/// placeholders its workflows declare (every workflow of a ComfyUI backend has the nodes that
/// `nodes` names, or the backend is refused at start). Without backends, the built-in one.
fn described(backends: &[BackendConfig]) -> Vec<(String, Backend)> {
    if backends.is_empty() {
        let builtin = Backend {
            kind: BackendKind::Procedural,
            sd_cpp: false,
            placeholders: Vec::new(),
        };
        return vec![("procedural".into(), builtin)];
    }
    backends
        .iter()
        .map(|b| {
            let placeholders = REFERENCES
                .into_iter()
                .filter(|r| b.kind == BackendKind::Comfyui && b.nodes.contains_key(*r))
                .collect();
            let backend = Backend {
                kind: b.kind,
                sd_cpp: b.kind == BackendKind::Openai && b.dialect == Some(Dialect::SdCpp),
                placeholders,
            };
            (b.name.clone(), backend)
        })
        .collect()
}

fn fill(
    config: &ModelConfig,
    kinds: Vec<BackendKind>,
    described: &[(String, Backend)],
) -> Result<Model, String> {
    let at = |setting: &str| format!("models.{}.{setting}", config.name);
    let first = |pick: &dyn Fn(KindDefaults) -> bool| {
        kinds
            .iter()
            .map(|k| kind_defaults(*k))
            .find(|d| pick(*d))
            .unwrap_or_else(|| kind_defaults(kinds[0]))
    };
    let steps_range = config
        .limits
        .steps
        .unwrap_or(first(&|d| d.steps.is_some()).steps_range);
    let cfg_range = config
        .limits
        .cfg_scale
        .unwrap_or(first(&|d| d.cfg_scale.is_some()).cfg_range);
    check_limits(steps_range, STEPS_BOUNDS, &at("limits.steps"))?;
    check_limits(cfg_range, CFG_SCALE_BOUNDS, &at("limits.cfg_scale"))?;
    let steps = config
        .defaults
        .steps
        .or_else(|| first(&|d| d.steps.is_some()).steps);
    let cfg_scale = config
        .defaults
        .cfg_scale
        .or_else(|| first(&|d| d.cfg_scale.is_some()).cfg_scale);
    let sampler_name = config
        .defaults
        .sampler
        .clone()
        .or_else(|| first(&|d| d.sampler.is_some()).sampler.map(Into::into));
    check_default(steps, steps_range, &at("defaults.steps"), "steps")?;
    check_default(cfg_scale, cfg_range, &at("defaults.cfg_scale"), "cfg_scale")?;
    if let Some(name) = &sampler_name {
        if sampler(name).is_none() || !kinds.iter().all(|k| kind_knows(*k, name)) {
            return Err(format!(
                "{}: {name:?} is not a sampler all of its backends know (they know {})",
                at("defaults.sampler"),
                known_to(&kinds).join(", ")
            ));
        }
    }
    let negative_prompt = config
        .defaults
        .negative_prompt
        .clone()
        .filter(|n| !n.is_empty());
    if negative_prompt
        .as_ref()
        .is_some_and(|n| n.chars().count() > NEGATIVE_PROMPT_MAX_CHARS)
    {
        return Err(format!(
            "{}: must be at most {NEGATIVE_PROMPT_MAX_CHARS} characters",
            at("defaults.negative_prompt")
        ));
    }
    let serving: Vec<Backend> = described
        .iter()
        .filter(|(name, _)| config.backends.contains(name))
        .map(|(_, b)| b.clone())
        .collect();
    let controls = ModelControls {
        steps: steps.is_some(),
        guidance: cfg_scale.is_some(),
    };
    Ok(Model {
        parameters: known::acting(&serving, controls),
        name: config.name.clone(),
        description: config.description.clone(),
        backends: config.backends.clone(),
        kinds,
        checkpoint: config.checkpoint.clone().filter(|c| !c.is_empty()),
        steps,
        cfg_scale,
        sampler: sampler_name,
        negative_prompt,
        steps_range,
        cfg_range,
        default: config.default,
        plans: None,
    })
}
