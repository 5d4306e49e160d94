//! ComfyUI: the operator's own API-format workflows (exported with "Save (API Format)"), one per
//! operation, run on a ComfyUI server. easel finds where the prompt, seed, size and input images
//! go by following the graph from the sampler (or the `nodes` settings), uploads the inputs
//! (`POST /upload/image`), queues the graph (`POST /prompt`), polls `GET /history/{id}` until the
//! entry appears and fetches the images with `GET /view`.
//!
//! Progress comes from ComfyUI's WebSocket (`/ws?clientId=...`, opened before the job is queued
//! under the same client id): its `progress` events move the task's percentage, and `executing`
//! with no node says the job is done, so that the history is read at once. Polling goes on
//! beside it, so a socket that cannot be opened or drops only costs the fine-grained progress.

mod client;
mod inputs;
mod prompted;
#[cfg(test)]
mod tests;
mod workflow;

use std::collections::HashMap;
use std::sync::Mutex;

use futures::future::BoxFuture;

use super::answers::keep_outputs;
use super::edits::strength;
use super::{checkpoint_of, kind_can, until_cut, BackendConfig, Checkpoints};
use crate::domain::{OpKind, Shape};
use crate::generate::{Answered, GenerateError, Generation, Generator, Job, Product, Progress};
use crate::images::encode_png;
use client::{finished, output_files, Client};
use inputs::prepare_inputs;
use workflow::Workflow;

/// A ComfyUI server and the workflows it runs.
pub struct ComfyUi {
    client: Client,
    config: BackendConfig,
    workflows: HashMap<OpKind, Workflow>,
    /// The checkpoints of the models it serves.
    checkpoints: Checkpoints,
}

impl ComfyUi {
    pub fn new(config: &BackendConfig) -> Result<ComfyUi, String> {
        let name = &config.name;
        let at = |setting: &str, problem: &str| format!("backends.{name}.{setting}: {problem}");
        let client = Client::new(config)?;
        let mut workflows = HashMap::new();
        if let Some(path) = &config.workflow {
            let wf = Workflow::load(path, OpKind::Imagine, &config.nodes)
                .map_err(|e| at("workflow", &format!("{}: {e}", path.display())))?;
            workflows.insert(OpKind::Imagine, wf);
        }
        for (op, path) in &config.workflows {
            let setting = format!("workflows.{op}");
            let kind: OpKind = op.parse().map_err(|e: String| at(&setting, &e))?;
            if !kind_can(config.kind, kind) {
                return Err(at(&setting, "a comfyui backend cannot run this operation"));
            }
            if kind == OpKind::Imagine && config.workflow.is_some() {
                return Err(at(
                    &setting,
                    "imagine's workflow is already set by `workflow`",
                ));
            }
            let wf = Workflow::load(path, kind, &config.nodes)
                .map_err(|e| at(&setting, &format!("{}: {e}", path.display())))?;
            workflows.insert(kind, wf);
        }
        if workflows.is_empty() {
            return Err(at(
                "workflow",
                "a comfyui backend needs at least one workflow",
            ));
        }
        Ok(ComfyUi {
            client,
            config: config.clone(),
            workflows,
            checkpoints: Checkpoints::new(),
        })
    }

    /// The backend loading each model's checkpoint for that model's jobs.
    pub fn with_checkpoints(mut self, checkpoints: Checkpoints) -> ComfyUi {
        self.checkpoints = checkpoints;
        self
    }

    /// The workflow for `kind`: reroll runs imagine's unless it has its own.
    fn workflow(&self, kind: OpKind) -> Option<&Workflow> {
        self.workflows.get(&kind).or_else(|| match kind {
            OpKind::Reroll => self.workflows.get(&OpKind::Imagine),
            _ => None,
        })
    }

    async fn run_job(
        &self,
        job: &Job,
        progress: &Progress,
        queued: &Mutex<Option<String>>,
    ) -> Result<Product, GenerateError> {
        let kind = job.operation.kind();
        let wf = self.workflow(kind).ok_or_else(|| {
            GenerateError::Failed(format!(
                "backend {} has no workflow for {kind}",
                self.client.name
            ))
        })?;
        let count = match kind.shape() {
            Shape::Grid => 4,
            Shape::Single => 1,
            _ => {
                return Err(GenerateError::Failed(format!(
                    "a comfyui backend cannot run {kind}"
                )))
            }
        };
        let mut graph = wf.graph.clone();
        let prepared = {
            let job = job.clone();
            tokio::task::spawn_blocking(move || prepare_inputs(&job))
                .await
                .map_err(|e| GenerateError::Failed(format!("preparing the inputs failed: {e}")))??
        };
        // Uploads are named per job, so that jobs running side by side never read each other's.
        let tag = uuid::Uuid::new_v4().simple().to_string();
        let mut names = Vec::new();
        for (k, png) in prepared.images.iter().enumerate() {
            names.push(
                self.client
                    .upload(format!("easel-{tag}-{k}.png"), png)
                    .await?,
            );
        }
        let mask_name = match (&prepared.mask, &wf.mask) {
            (Some(png), Some(_)) => Some(
                self.client
                    .upload(format!("easel-{tag}-mask.png"), png)
                    .await?,
            ),
            _ => None,
        };
        wf.fill(
            &mut graph,
            job,
            count,
            &prepared,
            &names,
            mask_name.as_deref(),
        )?;
        // The prompt's reference images, into the placeholders the workflow declares for them.
        let mut references = Vec::new();
        for k in wf.references_taken(job) {
            let param = job.extras.references[k].param.as_str();
            let png = encode_png(&job.references[k]);
            let name = format!("easel-{tag}-{param}-{k}.png");
            references.push((param, self.client.upload(name, &png).await?));
        }
        wf.fill_references(&mut graph, &references);
        wf.settle(&mut graph, job, checkpoint_of(job, &self.checkpoints, None));
        if wf.takes_image_prompts(job) {
            let (Some(sampler), Some(image)) = (wf.sampler.as_deref(), names.first()) else {
                return Err(GenerateError::Failed(
                    "the imagine workflow has no sampler to start from the image prompt".into(),
                ));
            };
            prompted::start_from_image(
                &mut graph,
                sampler,
                image,
                count,
                strength::of_image_prompts(job),
            )?;
        }

        // ComfyUI takes the id the client proposes (newer versions), so that a job whose
        // submission hangs can still be cancelled by it.
        let proposed = uuid::Uuid::new_v4().to_string();
        // ComfyUI sends a job's events to the client that queued it: the socket is opened
        // first, under the client id the job is queued with, so that no event is missed.
        let client_id = uuid::Uuid::new_v4().to_string();
        let socket = self.client.open_socket(&client_id).await;
        *queued.lock().unwrap_or_else(|e| e.into_inner()) = Some(proposed.clone());
        let prompt_id = self.client.submit(&graph, &proposed, &client_id).await?;
        *queued.lock().unwrap_or_else(|e| e.into_inner()) = Some(prompt_id.clone());
        progress.report(5);

        let entry = match self.client.wait(&prompt_id, progress, socket).await {
            Ok(entry) => entry,
            Err(e) => {
                self.client.cancel(&prompt_id).await;
                return Err(e);
            }
        };
        *queued.lock().unwrap_or_else(|e| e.into_inner()) = None;
        finished(&entry)?;
        progress.report(80);

        let files = output_files(&entry, wf)?;
        if files.len() != count {
            return Err(GenerateError::Failed(format!(
                "the workflow made {} images; {kind} needs {count}",
                files.len()
            )));
        }
        let mut fetched = Vec::new();
        for (k, file) in files.iter().enumerate() {
            fetched.push(self.client.view(file).await?);
            progress.report(80 + 15 * (k as i64 + 1) / count as i64);
        }
        progress.backend_done();
        tokio::task::spawn_blocking(move || {
            let files: Vec<&[u8]> = fetched.iter().map(|f| f.as_ref()).collect();
            let images = keep_outputs(&files)?;
            match <[Answered; 4]>::try_from(images) {
                Ok(four) => {
                    let size = Answered::size;
                    if four.iter().any(|a| size(a) != size(&four[0])) {
                        return Err(GenerateError::Failed(
                            "the workflow's four images differ in size".into(),
                        ));
                    }
                    Ok(Product::from_answers(four))
                }
                Err(mut one) => match one.pop() {
                    Some(image) if one.is_empty() => Ok(Product::from_answer(image)),
                    _ => Err(GenerateError::Failed(
                        "the workflow made no image to keep".into(),
                    )),
                },
            }
        })
        .await
        .map_err(|e| GenerateError::Failed(format!("encoding the images failed: {e}")))?
    }
}

impl Generator for ComfyUi {
    fn name(&self) -> &str {
        &self.client.name
    }

    fn supports(&self, kind: OpKind) -> bool {
        self.config.runs(kind) && self.workflow(kind).is_some()
    }

    fn run<'a>(&'a self, job: &'a Job, progress: &'a Progress) -> Generation<'a> {
        Box::pin(async move {
            // The prompt id of a job that is on the backend, for taking it off past the timeout
            // or when the job is stopped.
            let queued = Mutex::new(None);
            let work = self.run_job(job, progress, &queued);
            let stopped = match until_cut(self.client.timeout, progress, work).await {
                Ok(result) => return result,
                Err(stopped) => stopped,
            };
            let id = queued.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(id) = id {
                self.client.cancel(&id).await;
            }
            Err(stopped)
        })
    }

    fn probe(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move { self.client.probe().await.map_err(|e| e.to_string()) })
    }
}
