//! Building the pool from the `[[backends]]` settings.

use std::sync::Arc;

use super::{comfyui, openai, sdwebui, BackendKind, Checkpoints};
use crate::config::Config;
use crate::generate::pool::Pool;
use crate::generate::{Generator, Procedural};

/// The pool of the configured backends; without any, one `procedural` backend that runs as many
/// jobs at once as there are workers. An error naming the backend and the setting when one
/// cannot work (an unset key variable, a missing workflow file). Each backend learns the
/// checkpoints of the models it serves; the pool, which models each serves.
pub fn build(config: &Config) -> anyhow::Result<Pool> {
    let catalogue = config.catalogue()?;
    let mut members: Vec<(Arc<dyn Generator>, usize)> = Vec::new();
    // What each backend is built from: a reload keeps the backends whose prints are the same.
    let mut prints: Vec<String> = Vec::new();
    if config.backends.is_empty() {
        let procedural = Procedural::new(config.worker.procedural_min_duration);
        members.push((Arc::new(procedural), config.worker.workers.max(1)));
        prints.push(format!(
            "builtin:{:?}",
            config.worker.procedural_min_duration
        ));
    }
    for backend in &config.backends {
        let fail = |e: String| anyhow::anyhow!("configuration: {e}");
        let checkpoints: Checkpoints = catalogue
            .served_by(&backend.name)
            .into_iter()
            .filter_map(|m| catalogue.checkpoint(&m).map(|c| (m.clone(), c.to_string())))
            .collect();
        let generator: Arc<dyn Generator> = match backend.kind {
            BackendKind::Procedural => Arc::new(Procedural {
                name: backend.name.clone(),
                min_duration: config.worker.procedural_min_duration,
                // Checked when the settings were read: every name parses.
                only: backend
                    .operations
                    .as_ref()
                    .map(|ops| ops.iter().filter_map(|op| op.parse().ok()).collect()),
            }),
            BackendKind::Openai => Arc::new(
                openai::OpenAi::new(backend)
                    .and_then(|b| b.with_checkpoints(checkpoints))
                    .map_err(fail)?,
            ),
            BackendKind::Sdwebui => Arc::new(
                sdwebui::SdWebUi::new(backend)
                    .map_err(fail)?
                    .with_checkpoints(checkpoints),
            ),
            BackendKind::Comfyui => Arc::new(
                comfyui::ComfyUi::new(backend)
                    .map_err(fail)?
                    .with_checkpoints(checkpoints),
            ),
        };
        members.push((generator, backend.concurrency));
        prints.push(
            serde_json::json!({
                "backend": backend,
                "checkpoints": checkpoints_print(&catalogue, &backend.name),
                "procedural_min_duration": format!("{:?}", config.worker.procedural_min_duration),
            })
            .to_string(),
        );
    }
    // `upscale-1x` is a crop of the parent's stored image: it needs no model, so a model whose
    // backends do not make it gets the built-in one.
    let crop = Procedural {
        name: "builtin-crop".into(),
        min_duration: std::time::Duration::ZERO,
        only: Some(vec![crate::domain::OpKind::Upscale1x]),
    };
    Ok(Pool::new(members, config.worker.generation_budget)
        .with_fingerprints(prints)
        .with_catalogue(catalogue)
        .with_crop(Arc::new(crop), config.worker.workers.max(1)))
}

/// The checkpoints of the models `backend` serves, in a stable order.
fn checkpoints_print(catalogue: &crate::config::Catalogue, backend: &str) -> Vec<(String, String)> {
    let mut prints: Vec<(String, String)> = catalogue
        .served_by(backend)
        .into_iter()
        .map(|m| {
            let checkpoint = catalogue.checkpoint(&m).unwrap_or_default().to_string();
            (m, checkpoint)
        })
        .collect();
    prints.sort();
    prints
}
