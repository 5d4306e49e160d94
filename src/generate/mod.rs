//! Image generators. A generator turns a prompt into four images; the worker composes the grid,
//! encodes and stores them. The built-in procedural generator needs nothing installed.

pub mod procedural;
pub mod raster;

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;

use raster::RgbaImage;

/// What to generate.
#[derive(Clone, Debug)]
pub struct GenerateJob {
    pub prompt: String,
    pub seed: u64,
    pub width: u32,
    pub height: u32,
}

/// Progress of one generation, 0..=100, written by the generator and read by the worker's heartbeat.
#[derive(Clone, Debug, Default)]
pub struct Progress(Arc<AtomicI64>);

impl Progress {
    pub fn report(&self, percent: i64) {
        self.0.fetch_max(percent.clamp(0, 100), Ordering::Relaxed);
    }

    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Why a generation did not produce images. Both end the task as `failed` with the message.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    /// The backend refused the prompt (for example its own content filter).
    #[error("content policy violation: {0}")]
    Refused(String),
    /// The backend failed.
    #[error("generation failed: {0}")]
    Failed(String),
}

/// An image backend.
pub trait Generator: Send + Sync + 'static {
    fn name(&self) -> &'static str;
    /// Produce the four images of `job`, reporting progress as it goes.
    fn generate<'a>(
        &'a self,
        job: &'a GenerateJob,
        progress: &'a Progress,
    ) -> BoxFuture<'a, Result<[RgbaImage; 4], GenerateError>>;
}

/// The built-in generator: abstract pictures drawn from the prompt's words (see [`procedural`]).
#[derive(Clone, Debug, Default)]
pub struct Procedural {
    /// Least time one generation takes (models a real backend's latency; zero by default).
    pub min_duration: Duration,
}

impl Generator for Procedural {
    fn name(&self) -> &'static str {
        "procedural"
    }

    fn generate<'a>(
        &'a self,
        job: &'a GenerateJob,
        progress: &'a Progress,
    ) -> BoxFuture<'a, Result<[RgbaImage; 4], GenerateError>> {
        Box::pin(async move {
            let started = Instant::now();
            let mut images = Vec::with_capacity(4);
            for variant in 0..4u32 {
                let job = job.clone();
                let image = tokio::task::spawn_blocking(move || {
                    procedural::render(&job.prompt, job.seed, variant, job.width, job.height)
                })
                .await
                .map_err(|e| GenerateError::Failed(format!("renderer crashed: {e}")))?;
                images.push(image);
                // Spread any configured latency evenly over the four images.
                let due = self.min_duration.mul_f64(f64::from(variant + 1) / 4.0);
                if let Some(wait) = due.checked_sub(started.elapsed()) {
                    tokio::time::sleep(wait).await;
                }
                progress.report(i64::from(variant + 1) * 20);
            }
            Ok(images.try_into().expect("four images"))
        })
    }
}
