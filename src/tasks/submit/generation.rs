//! The model a task runs on and the settings its backend is sent, resolved at submit: the
//! request's values checked against the model's limits, else the prompt's parameters, else the
//! model's defaults. The task's record shows what was resolved here.

use super::super::Tasks;
use super::request::{fields, CfgScale, Generation, Steps, Text};
use crate::auth::{look_up, PresentedKey};
use crate::config::models::NEGATIVE_PROMPT_MAX_CHARS;
use crate::config::Model;
use crate::domain::{OpKind, Parameters, Settings, Shape};
use crate::refusal::ApiError;
use crate::store::Task;

/// What the request asked for, each field's type checked; empty strings count as absent, as
/// some clients send every optional field.
#[derive(Default)]
pub(super) struct Asked {
    model: Option<String>,
    negative_prompt: Option<String>,
    steps: Option<i64>,
    cfg_scale: Option<f64>,
    sampler: Option<String>,
}

/// Whether operation `kind` runs on a model: those that make images do; the text operations and
/// `seed` run on any backend that can, and take no settings.
pub(super) fn on_model(kind: OpKind) -> bool {
    matches!(kind.shape(), Shape::Grid | Shape::Single)
}

/// The settings fields of `body`, for an operation that runs on a model.
pub(super) fn asked(
    kind: OpKind,
    body: &serde_json::Map<String, serde_json::Value>,
) -> Result<Asked, ApiError> {
    if !on_model(kind) {
        return Ok(Asked::default());
    }
    let g: Generation = fields(body)?;
    let text = |t: Option<Text>| t.map(|Text(s)| s).filter(|s| !s.is_empty());
    let negative_prompt = text(g.negative_prompt);
    if let Some(negative) = &negative_prompt {
        check_negative(negative)?;
    }
    Ok(Asked {
        model: text(g.model),
        negative_prompt,
        steps: g.steps.map(|Steps(n)| n),
        cfg_scale: g.cfg_scale.map(|CfgScale(c)| c),
        sampler: text(g.sampler),
    })
}

fn check_negative(negative: &str) -> Result<(), ApiError> {
    let bad = |rule: String| ApiError::field("negative_prompt", "invalid_value", rule);
    let count = negative.chars().count();
    if count > NEGATIVE_PROMPT_MAX_CHARS {
        return Err(bad(format!(
            "must be at most {NEGATIVE_PROMPT_MAX_CHARS} characters (got {count})"
        )));
    }
    crate::domain::check_text(negative).map_err(bad)
}

/// The settings of a task of `kind`: its model (the one asked for, else its parent's while that
/// is still configured, else the default) and the values its backend is sent. Refused, with the
/// field and the rule, when the model is unknown or not the caller's plan's, cannot run the
/// operation, or a value is outside the model's limits.
pub(super) async fn settle(
    tasks: &Tasks,
    key: &PresentedKey,
    kind: OpKind,
    asked: Asked,
    parameters: &Parameters,
    parent: Option<&Task>,
) -> Result<Settings, ApiError> {
    if !on_model(kind) {
        return Ok(Settings::default());
    }
    let catalogue = tasks.pool.catalogue();
    let model = match &asked.model {
        Some(name) => catalogue.get(name).ok_or_else(|| {
            ApiError::field(
                "model",
                "invalid_value",
                format!(
                    "there is no model {name:?}; the models are {} (GET /api/v1/models)",
                    catalogue.names()
                ),
            )
        })?,
        None => {
            let inherited = parent
                .and_then(|p| p.extras.settings.model.as_deref())
                .and_then(|name| catalogue.get(name));
            match inherited.or_else(|| catalogue.default_model()) {
                Some(model) => model,
                None => {
                    // No `[[models]]`: any backend that can run it, as without models.
                    let anywhere = catalogue
                        .anywhere
                        .as_ref()
                        .ok_or_else(|| ApiError::Internal(anyhow::anyhow!("no default model")))?;
                    let mut settings = resolve(anywhere, asked, parameters)?;
                    settings.model = None;
                    return Ok(settings);
                }
            }
        }
    };
    if model.plans.is_some() {
        // Only a restricted model costs the lookup of the caller's plan.
        let owner = look_up(tasks.store.as_ref(), &key.0).await?;
        if !model.allows(tasks.plans.get().resolve(&owner.account.plan)) {
            return Err(ApiError::field(
                "model",
                "invalid_value",
                format!(
                    "the model {} is not available on the account's plan ({})",
                    model.name, owner.account.plan
                ),
            ));
        }
    }
    if !tasks.pool.supports_on(kind, Some(&model.name)) {
        return Err(ApiError::BadRequest {
            code: "unsupported_operation",
            msg: format!(
                "{kind}: no backend of the model {} can run this operation",
                model.name
            ),
        });
    }
    resolve(model, asked, parameters)
}

/// The values used, from what was asked, the prompt's parameters and the model's defaults.
fn resolve(model: &Model, asked: Asked, parameters: &Parameters) -> Result<Settings, ApiError> {
    let of_model = |what: String| format!("{what} for the model {}", model.name);
    let steps = match asked.steps {
        Some(n) => {
            let [lo, hi] = model.steps_range;
            if n < i64::from(lo) || n > i64::from(hi) {
                return Err(ApiError::field(
                    "steps",
                    "invalid_value",
                    of_model(format!("must be from {lo} to {hi}")),
                ));
            }
            Some(n as u32)
        }
        // `--draft`: half the model's default steps (the body's `steps` wins over it).
        None if parameters.draft => model.steps.map(|s| (s / 2).max(1)),
        None => model.steps,
    };
    // `--stop N`: the image as it was at N% of the steps, so that share of them (at least one).
    let steps = match parameters.stop {
        Some(stop) => steps.map(|s| (s * stop.min(100)).div_ceil(100).max(1)),
        None => steps,
    };
    let cfg_scale = match asked.cfg_scale {
        Some(c) => {
            let [lo, hi] = model.cfg_range;
            if !(lo..=hi).contains(&c) {
                return Err(ApiError::field(
                    "cfg_scale",
                    "invalid_value",
                    of_model(format!("must be from {lo} to {hi}")),
                ));
            }
            Some(c)
        }
        None => match (parameters.stylize, model.cfg_scale) {
            (Some(stylize), Some(default)) => {
                Some(stylize_to_cfg(stylize, default, model.cfg_range))
            }
            _ => model.cfg_scale,
        },
    };
    let sampler = match asked.sampler {
        Some(name) => {
            let known = model.samplers();
            if !known.contains(&name.as_str()) {
                return Err(ApiError::field(
                    "sampler",
                    "invalid_value",
                    of_model(format!(
                        "{name:?} is not a sampler its backends know; they know {}",
                        known.join(", ")
                    )),
                ));
            }
            Some(name)
        }
        None => model.sampler.clone(),
    };
    let negative_prompt = asked
        .negative_prompt
        .or_else(|| parameters.no.clone().filter(|n| !n.is_empty()))
        .or_else(|| model.negative_prompt.clone());
    if let Some(negative) = &negative_prompt {
        // `--no` words come from the prompt, which has its own limit; the sum still must fit.
        check_negative(negative)?;
    }
    Ok(Settings {
        model: Some(model.name.clone()),
        negative_prompt,
        steps,
        cfg_scale,
        sampler,
    })
}

/// Midjourney's `--stylize` (0..=1000, 100 by default: how freely the image departs from the
/// prompt) as guidance, which works the other way (higher keeps closer to the prompt): 100 is the
/// model's default guidance, 0 its most, 1000 its least, linear in between; rounded to 0.1.
pub fn stylize_to_cfg(stylize: u32, default: f64, [lo, hi]: [f64; 2]) -> f64 {
    let s = f64::from(stylize.min(1000));
    let cfg = if s <= 100.0 {
        default + (100.0 - s) / 100.0 * (hi - default)
    } else {
        default - (s - 100.0) / 900.0 * (default - lo)
    };
    ((cfg * 10.0).round() / 10.0).clamp(lo, hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> Model {
        let config = crate::config::ModelConfig {
            name: "sd15".into(),
            backends: vec!["gpu".into()],
            defaults: crate::config::models::ModelDefaults {
                negative_prompt: Some("blurry".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let backends: Vec<crate::config::BackendConfig> = serde_json::from_value(
            serde_json::json!([{"name": "gpu", "kind": "sdwebui", "url": "http://h"}]),
        )
        .unwrap();
        crate::config::Catalogue::build(&[config], &backends)
            .unwrap()
            .models
            .remove(0)
    }

    #[test]
    fn the_body_wins_over_the_prompts_parameters_which_win_over_the_models_defaults() {
        let model = model();
        let none = Parameters::default();
        let settings = resolve(&model, Asked::default(), &none).unwrap();
        assert_eq!(
            settings,
            Settings {
                model: Some("sd15".into()),
                negative_prompt: Some("blurry".into()),
                steps: Some(30),
                cfg_scale: Some(7.0),
                sampler: Some("euler_a".into()),
            }
        );
        let prompt = Parameters {
            no: Some("trees".into()),
            stylize: Some(1000),
            ..Parameters::default()
        };
        let settings = resolve(&model, Asked::default(), &prompt).unwrap();
        assert_eq!(settings.negative_prompt.as_deref(), Some("trees"));
        assert_eq!(settings.cfg_scale, Some(1.0), "the least guidance");
        let asked = Asked {
            negative_prompt: Some("fog".into()),
            cfg_scale: Some(12.0),
            ..Asked::default()
        };
        let settings = resolve(&model, asked, &prompt).unwrap();
        assert_eq!(settings.negative_prompt.as_deref(), Some("fog"));
        assert_eq!(settings.cfg_scale, Some(12.0));
    }

    #[test]
    fn draft_halves_the_default_steps_and_stop_keeps_its_share_of_them() {
        let model = model();
        let steps = |p: Parameters, asked: Option<i64>| {
            let asked = Asked {
                steps: asked,
                ..Asked::default()
            };
            resolve(&model, asked, &p).unwrap().steps
        };
        let draft = Parameters {
            draft: true,
            ..Parameters::default()
        };
        assert_eq!(steps(draft.clone(), None), Some(15));
        assert_eq!(steps(draft, Some(20)), Some(20), "the body's steps win");
        let stop = |n| Parameters {
            stop: Some(n),
            ..Parameters::default()
        };
        assert_eq!(steps(stop(80), None), Some(24));
        assert_eq!(steps(stop(10), Some(1)), Some(1), "at least one");
        assert_eq!(steps(stop(100), None), Some(30));
        let both = Parameters {
            draft: true,
            stop: Some(50),
            ..Parameters::default()
        };
        assert_eq!(steps(both, None), Some(8));
    }

    #[test]
    fn stylize_maps_onto_the_models_guidance_range_around_its_default() {
        let range = [1.0, 20.0];
        assert_eq!(stylize_to_cfg(100, 7.0, range), 7.0);
        assert_eq!(stylize_to_cfg(0, 7.0, range), 20.0);
        assert_eq!(stylize_to_cfg(1000, 7.0, range), 1.0);
        assert_eq!(stylize_to_cfg(50, 7.0, range), 13.5);
        assert_eq!(stylize_to_cfg(550, 7.0, range), 4.0);
        // Higher stylize never means more guidance.
        let mut last = f64::MAX;
        for s in (0..=1000).step_by(50) {
            let cfg = stylize_to_cfg(s, 7.0, range);
            assert!(cfg <= last && (1.0..=20.0).contains(&cfg), "{s}: {cfg}");
            last = cfg;
        }
    }
}
