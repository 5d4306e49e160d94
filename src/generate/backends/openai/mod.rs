//! The `openai` kind: OpenAI's images API, and the servers that speak it (LocalAI,
//! stable-diffusion.cpp's server). New images come from `POST /images/generations`; everything
//! made from a parent (variations, pan, outpaint, inpaint, blend) from `POST /images/edits`, with
//! a mask whose fully transparent pixels mark what to redraw. dall-e-2's variations use
//! `POST /images/variations`, because its edits need a mask or a transparent image.
//!
//! What each model accepts (sizes, `n`, `response_format`) is known for OpenAI's own models; any
//! other model is taken to be a local server's, asked for the job's own size.

mod canvas;
mod client;
mod family;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::time::Duration;

use super::answers::blocking;
use super::edits::strength;
use super::http::transport_error;
use super::{until_cut, BackendConfig, Checkpoints};
use crate::domain::{OpKind, Operation};
use crate::generate::ops::{self, Direction};
use crate::generate::{GenerateError, Generation, Generator, Job, Product, Progress};
use canvas::{edit_mask, grid, outpaint_canvas, pan_canvas};
use client::Client;
use family::Family;
use futures::future::{try_join_all, BoxFuture};

/// The prompt of a blend, which has none of its own.
pub const BLEND_PROMPT: &str = "a blend of these images";

/// A backend speaking OpenAI's images API.
pub struct OpenAi {
    config: BackendConfig,
    client: Client,
    /// A client per model served whose checkpoint (OpenAI model) differs from `model`: what a
    /// model accepts (sizes, edits) goes with its name.
    by_model: HashMap<String, Client>,
}

impl OpenAi {
    pub fn new(config: &BackendConfig) -> Result<OpenAi, String> {
        Ok(OpenAi {
            config: config.clone(),
            client: Client::new(config)?,
            by_model: HashMap::new(),
        })
    }

    /// The backend asking for each model's checkpoint as its OpenAI `model`.
    pub fn with_checkpoints(mut self, checkpoints: Checkpoints) -> Result<OpenAi, String> {
        for (model, checkpoint) in checkpoints {
            let mut config = self.config.clone();
            config.model = Some(checkpoint);
            self.by_model.insert(model, Client::new(&config)?);
        }
        Ok(self)
    }

    /// The client for the job's model.
    fn client(&self, job: &Job) -> &Client {
        job.extras
            .settings
            .model
            .as_ref()
            .and_then(|m| self.by_model.get(m))
            .unwrap_or(&self.client)
    }

    /// The job, without the timeout.
    async fn generate(&self, job: &Job, progress: &Progress) -> Result<Product, GenerateError> {
        let kind = job.operation.kind();
        let client = self.client(job);
        if !self.runs(client, kind) {
            return Err(GenerateError::Failed(format!(
                "backend {} cannot run {kind}",
                self.config.name
            )));
        }
        let images = match &job.operation {
            // dall-e-3 has no edits: its image prompts are recorded but not used.
            Operation::Imagine | Operation::Reroll
                if job.inputs.is_empty() || !client.family.edits() =>
            {
                client.generations(job, progress).await?
            }
            // Image prompts: an edit of them (blended into one, as edits take one image).
            Operation::Imagine | Operation::Reroll => {
                let size = client
                    .family
                    .size(job.aspect.width, job.aspect.height, job.image_size);
                let (inputs, seed) = (job.inputs.clone(), job.seed);
                let image =
                    blocking(move || ops::image_prompt_canvas(&inputs, size.0, size.1, seed))
                        .await?;
                let prompt = client.prompt(job, &job.prompt, Some(strength::of_image_prompts(job)));
                client.edits(&image, None, &prompt, size, progress).await?
            }
            Operation::Variations { of, .. } => {
                let parent = job.input(0)?.clone();
                let size = self
                    .client
                    .family
                    .size(parent.width, parent.height, job.image_size);
                let image = blocking(move || ops::resize(&parent, size.0, size.1)).await?;
                if client.family == Family::DallE2 {
                    client.variations(&image, size, progress).await?
                } else {
                    let prompt = if job.prompt.is_empty() {
                        "a variation of this image"
                    } else {
                        &job.prompt
                    };
                    let prompt = client.prompt(job, prompt, Some(strength::of_variation(of)));
                    client.edits(&image, None, &prompt, size, progress).await?
                }
            }
            Operation::Pan { direction, .. } => {
                let parent = job.input(0)?.clone();
                let direction = Direction::from(*direction);
                let (cw, ch) = ops::pan_size(parent.width, parent.height, direction);
                let size = client.family.size(cw, ch, job.image_size);
                let (image, mask) = blocking(move || pan_canvas(&parent, direction, size)).await?;
                let prompt = client.prompt(job, &job.prompt, Some(strength::EXTEND));
                client
                    .edits(&image, Some(&mask), &prompt, size, progress)
                    .await?
            }
            Operation::Outpaint { zoom_ratio, .. } => {
                let parent = job.input(0)?.clone();
                let size = self
                    .client
                    .family
                    .size(parent.width, parent.height, job.image_size);
                let zoom = *zoom_ratio;
                let (image, mask) = blocking(move || outpaint_canvas(&parent, zoom, size)).await?;
                let prompt = client.prompt(job, &job.prompt, Some(strength::EXTEND));
                client
                    .edits(&image, Some(&mask), &prompt, size, progress)
                    .await?
            }
            Operation::Inpaint { .. } => {
                let parent = job.input(0)?.clone();
                let mask = job.mask()?.clone();
                let size = self
                    .client
                    .family
                    .size(parent.width, parent.height, job.image_size);
                let (image, mask) = blocking(move || {
                    (
                        ops::resize(&parent, size.0, size.1),
                        edit_mask(&mask, size.0, size.1),
                    )
                })
                .await?;
                let prompt = client.prompt(job, &job.prompt, Some(strength::INPAINT));
                client
                    .edits(&image, Some(&mask), &prompt, size, progress)
                    .await?
            }
            // The first image, redrawn toward a blend: one image is what every model's edits
            // take (dall-e-2 takes no more).
            Operation::Blend { .. } => {
                let first = job.input(0)?.clone();
                let size = client
                    .family
                    .size(job.aspect.width, job.aspect.height, job.image_size);
                let image = blocking(move || ops::resize(&first, size.0, size.1)).await?;
                let prompt = if job.prompt.is_empty() {
                    BLEND_PROMPT.to_string()
                } else {
                    format!("{BLEND_PROMPT}: {}", job.prompt)
                };
                let prompt = client.prompt(job, &prompt, Some(strength::STRONG));
                client.edits(&image, None, &prompt, size, progress).await?
            }
            _ => {
                return Err(GenerateError::Failed(format!(
                    "backend {} cannot run {kind}",
                    self.config.name
                )))
            }
        };
        progress.report(80);
        let files = try_join_all(images.into_iter().map(|a| client.image_file(a))).await?;
        progress.report(90);
        progress.backend_done();
        blocking(move || grid(&files)).await?
    }
}

impl OpenAi {
    /// Whether `client`'s model can run `kind` here.
    fn runs(&self, client: &Client, kind: OpKind) -> bool {
        let edit = matches!(
            kind,
            OpKind::Variations | OpKind::Pan | OpKind::Outpaint | OpKind::Inpaint | OpKind::Blend
        );
        self.config.runs(kind)
            && (matches!(kind, OpKind::Imagine | OpKind::Reroll) || edit && client.family.edits())
    }
}

impl Generator for OpenAi {
    fn name(&self) -> &str {
        &self.config.name
    }

    /// Whether any of its models can run `kind`; the job's own is checked when it runs.
    fn supports(&self, kind: OpKind) -> bool {
        std::iter::once(&self.client)
            .chain(self.by_model.values())
            .any(|client| self.runs(client, kind))
    }

    fn run<'a>(&'a self, job: &'a Job, progress: &'a Progress) -> Generation<'a> {
        Box::pin(async move {
            // The images API has no cancel endpoint: past the timeout the requests are dropped,
            // which closes their connections; that is all a client can do to stop the work.
            // A stopped job is dropped the same way.
            until_cut(self.config.timeout, progress, self.generate(job, progress))
                .await
                .and_then(|result| result)
        })
    }

    fn probe(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let request = self
                .client
                .models()
                .timeout(self.config.timeout.min(Duration::from_secs(10)));
            match request.send().await {
                Ok(response) if response.status().is_success() => Ok(()),
                Ok(response) => Err(format!(
                    "GET models answered HTTP {}",
                    response.status().as_u16()
                )),
                Err(e) => Err(match transport_error(&e) {
                    GenerateError::Transient { message, .. } => message,
                    other => other.to_string(),
                }),
            }
        })
    }
}
