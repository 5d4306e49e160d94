//! AUTOMATIC1111's stable-diffusion-webui API (`/sdapi/v1`), which Forge, SD.Next and
//! stable-diffusion.cpp's server answer too. New pictures come from `txt2img`; variations, pan,
//! outpaint and inpaint are `img2img` on the parent (with a mask where part of it is redrawn);
//! upscales are `extra-single-image`; describe is `interrogate`. The WebUI reports progress at
//! `progress`, polled while a job runs, and stops a job at `interrupt`, called when one runs past
//! the backend's timeout or is stopped (its task canceled).

mod answer;
mod plan;
#[cfg(test)]
mod tests;

use std::convert::Infallible;
use std::time::Duration;

use futures::future::BoxFuture;
use reqwest::header::{HeaderMap, CONTENT_TYPE};
use reqwest::{Method, RequestBuilder, StatusCode};
use serde_json::Value;

use super::answers::blocking;
use super::http::{http_client, successful, transport_error};
use super::tls::Trust;
use super::{checkpoint_of, until_cut, BackendConfig, Checkpoints};
use crate::domain::OpKind;
use crate::generate::{GenerateError, Generation, Generator, Job, Product, Progress};
use crate::images::preview::{PreviewImage, PREVIEW_MAX_BYTES};
use answer::{current_image, preview_bytes};
use answer::{describe_product, images_product, progress_percent, upscale_product};
use plan::{plan, Call};
pub use plan::{CHAOS_SUBSEED_MOST, EXTRA, IMG2IMG, INTERROGATE, STRONG, SUBTLE, TXT2IMG};

const PROGRESS: &str = "/sdapi/v1/progress?skip_current_image=false";
const INTERRUPT: &str = "/sdapi/v1/interrupt";
/// Largest answer read: four large base64 PNGs fit well under it; a server streaming without
/// end does not exhaust memory.
const MAX_ANSWER: usize = 256 << 20;
/// Largest progress answer read: the base64 of the largest preview decoded, and room for the
/// rest (the state, the text info). A larger one is no report this time.
const MAX_PROGRESS_ANSWER: usize = PREVIEW_MAX_BYTES as usize / 3 * 4 + (64 << 10);

/// A stable-diffusion-webui server.
pub struct SdWebUi {
    config: BackendConfig,
    /// The base URL without its trailing `/`.
    base: String,
    client: reqwest::Client,
    password: Option<String>,
    /// The checkpoints of the models it serves.
    checkpoints: Checkpoints,
    /// How often progress is polled while a job runs (once a second; tests poll faster).
    pub poll: Duration,
}

impl SdWebUi {
    pub fn new(config: &BackendConfig) -> Result<SdWebUi, String> {
        let name = &config.name;
        let url = config
            .url
            .as_deref()
            .ok_or_else(|| format!("backends.{name}.url: is required for an sdwebui backend"))?;
        match url::Url::parse(url) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {}
            _ => return Err(format!("backends.{name}.url: must be an http or https URL")),
        }
        let password = config.password()?;
        if password.is_some() && config.username.is_none() {
            return Err(format!(
                "backends.{name}.username: is required with a password"
            ));
        }
        let client = http_client(&config.name, config.timeout, &Trust::of(config)?)?;
        Ok(SdWebUi {
            config: config.clone(),
            base: url.trim_end_matches('/').to_string(),
            client,
            password,
            checkpoints: Checkpoints::new(),
            poll: Duration::from_secs(1),
        })
    }

    /// The backend switching to each model's checkpoint for that model's jobs.
    pub fn with_checkpoints(mut self, checkpoints: Checkpoints) -> SdWebUi {
        self.checkpoints = checkpoints;
        self
    }

    fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let request = self.client.request(method, format!("{}{path}", self.base));
        match &self.config.username {
            Some(user) => request.basic_auth(user, self.password.as_deref()),
            None => request,
        }
    }

    /// Send a request and read its whole answer, whatever its status.
    async fn fetch(
        &self,
        request: RequestBuilder,
    ) -> Result<(StatusCode, HeaderMap, Vec<u8>), GenerateError> {
        self.fetch_within(request, MAX_ANSWER).await
    }

    /// [`SdWebUi::fetch`], failing on an answer of more than `limit` bytes.
    async fn fetch_within(
        &self,
        request: RequestBuilder,
        limit: usize,
    ) -> Result<(StatusCode, HeaderMap, Vec<u8>), GenerateError> {
        let mut response = request.send().await.map_err(|e| transport_error(&e))?;
        let (status, headers) = (response.status(), response.headers().clone());
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| transport_error(&e))? {
            if body.len() + chunk.len() > limit {
                return Err(GenerateError::Failed(format!(
                    "the backend's answer is larger than {limit} bytes"
                )));
            }
            body.extend_from_slice(&chunk);
        }
        Ok((status, headers, body))
    }

    /// Send a request; an answer that is not a success is sorted into an error.
    async fn call(&self, request: RequestBuilder) -> Result<Vec<u8>, GenerateError> {
        let (status, headers, body) = self.fetch(request).await?;
        successful(status, &headers, body)
    }

    /// POST a job, reporting the WebUI's progress until it answers.
    async fn post_job(
        &self,
        path: &str,
        body: Vec<u8>,
        progress: &Progress,
    ) -> Result<Vec<u8>, GenerateError> {
        let request = self
            .request(Method::POST, path)
            .header(CONTENT_TYPE, "application/json")
            .body(body);
        let call = self.call(request);
        let watch = self.watch(progress);
        tokio::pin!(call, watch);
        tokio::select! {
            biased;
            answer = &mut call => answer,
            never = &mut watch => match never {},
        }
    }

    /// Poll the WebUI's progress for ever. It runs one job at a time, so its progress is ours
    /// once our job has started; a failed poll (sd-server answers 404, an answer too large or
    /// unreadable) only means no report this time. Its live preview (`current_image`) is handed
    /// on when it differs from the last one.
    async fn watch(&self, progress: &Progress) -> Infallible {
        let mut last_image = None;
        loop {
            tokio::time::sleep(self.poll).await;
            let request = self
                .request(Method::GET, PROGRESS)
                .timeout(self.poll.max(Duration::from_secs(5)));
            let Ok((status, _, body)) = self.fetch_within(request, MAX_PROGRESS_ANSWER).await
            else {
                continue;
            };
            if !status.is_success() {
                continue;
            }
            if let Some(percent) = progress_percent(&body) {
                progress.report(percent);
            }
            let image = current_image(&body);
            if image.is_some() && image != last_image {
                if let Some(bytes) = image.as_deref().and_then(preview_bytes) {
                    progress.preview(PreviewImage::Encoded(bytes));
                }
                last_image = image;
            }
        }
    }

    /// Stop the job the WebUI is running: a request that was given up on keeps running there.
    async fn interrupt(&self) {
        let request = self
            .request(Method::POST, INTERRUPT)
            .timeout(Duration::from_secs(10));
        if let Err(e) = self.call(request).await {
            tracing::warn!(backend = %self.config.name, "could not interrupt a job: {e}");
        }
    }

    async fn perform(&self, job: &Job, progress: &Progress) -> Result<Product, GenerateError> {
        let planned = {
            let model = checkpoint_of(job, &self.checkpoints, self.config.model.as_deref());
            let (job, model) = (job.clone(), model.map(str::to_string));
            blocking(move || plan(&job, model.as_deref())).await??
        };
        let name = self.config.name.clone();
        match planned {
            Call::Done(product) => Ok(product),
            Call::Images { path, body, size } => {
                let answer = self.post_job(path, body, progress).await?;
                progress.backend_done();
                blocking(move || images_product(&answer, size, &name)).await?
            }
            Call::Upscale { body } => {
                let answer = self.post_job(EXTRA, body, progress).await?;
                progress.backend_done();
                blocking(move || upscale_product(&answer)).await?
            }
            Call::Describe {
                body,
                width,
                height,
            } => {
                let answer = self.post_job(INTERROGATE, body, progress).await?;
                progress.backend_done();
                describe_product(&answer, width, height)
            }
        }
    }

    /// Whether `model` (when set) is among the checkpoints of a `sd-models` answer.
    fn check_models(&self, body: &[u8]) -> Result<(), String> {
        let models: Vec<Value> = serde_json::from_slice(body)
            .map_err(|_| "the answer to sd-models is not a list of models".to_string())?;
        let Some(model) = &self.config.model else {
            return Ok(());
        };
        let named = |m: &Value| {
            let field = |k: &str| m.get(k).and_then(Value::as_str);
            ["title", "model_name", "hash", "sha256", "filename"]
                .iter()
                .any(|k| field(k) == Some(model.as_str()))
                || field("title")
                    .and_then(|t| t.split(" [").next())
                    .is_some_and(|t| t == model)
        };
        if models.iter().any(named) {
            Ok(())
        } else {
            Err(format!(
                "the checkpoint {model:?} is not among the server's models"
            ))
        }
    }
}

impl Generator for SdWebUi {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn supports(&self, kind: OpKind) -> bool {
        self.config.runs(kind)
    }

    fn run<'a>(&'a self, job: &'a Job, progress: &'a Progress) -> Generation<'a> {
        Box::pin(async move {
            let work = self.perform(job, progress);
            let stopped = match until_cut(self.config.timeout, progress, work).await {
                Ok(result) => return result,
                Err(stopped) => stopped,
            };
            self.interrupt().await;
            Err(stopped)
        })
    }

    /// The list of checkpoints (servers without it answer `options`); a configured `model`
    /// must be among them.
    fn probe(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let timeout = Duration::from_secs(10);
            let request = self
                .request(Method::GET, "/sdapi/v1/sd-models")
                .timeout(timeout);
            let (status, headers, body) = self.fetch(request).await.map_err(|e| e.to_string())?;
            if status == StatusCode::NOT_FOUND {
                let request = self
                    .request(Method::GET, "/sdapi/v1/options")
                    .timeout(timeout);
                return self
                    .call(request)
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string());
            }
            let body = successful(status, &headers, body).map_err(|e| e.to_string())?;
            self.check_models(&body)
        })
    }
}
