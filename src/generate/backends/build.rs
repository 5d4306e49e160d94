//! Building the pool from the `[[backends]]` settings.

use std::sync::Arc;

use super::{comfyui, openai, sdwebui, BackendKind};
use crate::config::Config;
use crate::generate::pool::Pool;
use crate::generate::{Generator, Procedural};

/// The pool of the configured backends; without any, one `procedural` backend that runs as many
/// jobs at once as there are workers. An error naming the backend and the setting when one
/// cannot work (an unset key variable, a missing workflow file).
pub fn build(config: &Config) -> anyhow::Result<Pool> {
    let mut members: Vec<(Arc<dyn Generator>, usize)> = Vec::new();
    if config.backends.is_empty() {
        let procedural = Procedural::new(config.worker.procedural_min_duration);
        members.push((Arc::new(procedural), config.worker.workers.max(1)));
    }
    for backend in &config.backends {
        let fail = |e: String| anyhow::anyhow!("configuration: {e}");
        let generator: Arc<dyn Generator> = match backend.kind {
            BackendKind::Procedural => Arc::new(Procedural {
                name: backend.name.clone(),
                min_duration: config.worker.procedural_min_duration,
            }),
            BackendKind::Openai => Arc::new(openai::OpenAi::new(backend).map_err(fail)?),
            BackendKind::Sdwebui => Arc::new(sdwebui::SdWebUi::new(backend).map_err(fail)?),
            BackendKind::Comfyui => Arc::new(comfyui::ComfyUi::new(backend).map_err(fail)?),
        };
        members.push((generator, backend.concurrency));
    }
    Ok(Pool::new(members, config.worker.generation_budget))
}
