//! Image generators. A generator turns a prompt into four images, composes their grid and encodes
//! all five as PNG ([`Rendered::encode`]); the worker stores them. The built-in procedural
//! generator needs nothing installed.

pub mod inputs;
pub mod procedural;
pub mod raster;

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;

use raster::{compose_grid, encode_png, RgbaImage};

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

/// What a generation hands to the worker: the four images and their 2x2 grid, as PNG files.
#[derive(Clone, Debug)]
pub struct Rendered {
    pub images: [Vec<u8>; 4],
    pub grid: Vec<u8>,
}

impl Rendered {
    /// Compose the grid of `images` and encode all five. CPU work: run it where the images were
    /// made (a blocking thread), not on the async runtime.
    pub fn encode(images: &[RgbaImage; 4]) -> Rendered {
        let grid = encode_png(&compose_grid(images));
        Rendered {
            images: images.each_ref().map(encode_png),
            grid,
        }
    }
}

/// An image backend.
pub trait Generator: Send + Sync + 'static {
    fn name(&self) -> &'static str;
    /// Produce the four images of `job` and their grid, reporting progress as it goes.
    fn generate<'a>(
        &'a self,
        job: &'a GenerateJob,
        progress: &'a Progress,
    ) -> BoxFuture<'a, Result<Rendered, GenerateError>>;
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
    ) -> BoxFuture<'a, Result<Rendered, GenerateError>> {
        Box::pin(async move {
            // Rendering, the grid and the encoding run as one job on one blocking thread. Each
            // hand-off between the runtime and the blocking pool can leave a core idle for
            // milliseconds (the woken thread often queues behind the other core's work): with
            // a job per image and one for the encoding, 2 cores were 12 to 20% idle under load.
            let (job, progress, min_duration) = (job.clone(), progress.clone(), self.min_duration);
            tokio::task::spawn_blocking(move || {
                let started = Instant::now();
                let images = [0u32, 1, 2, 3].map(|variant| {
                    let image =
                        procedural::render(&job.prompt, job.seed, variant, job.width, job.height);
                    // Spread any configured latency evenly over the four images.
                    let due = min_duration.mul_f64(f64::from(variant + 1) / 4.0);
                    if let Some(wait) = due.checked_sub(started.elapsed()) {
                        std::thread::sleep(wait);
                    }
                    progress.report(i64::from(variant + 1) * 20);
                    image
                });
                Rendered::encode(&images)
            })
            .await
            .map_err(|e| GenerateError::Failed(format!("renderer crashed: {e}")))
        })
    }
}
