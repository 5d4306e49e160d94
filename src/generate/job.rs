//! What a generation is: the job a generator runs, its progress and stop signal, what it hands
//! back, how it fails, and the [`Generator`] trait every backend (and the pool) implements.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;

pub use super::progress::Progress;
use crate::images::inputs::Reservation;
use crate::images::stored::StoredImage;
use crate::images::{compose_grid, dimensions, RgbaImage};

use crate::domain::{AspectRatio, Extras, OpKind, Operation};

/// What to do: the operation with its parameters, and the inputs the worker resolved for it.
#[derive(Clone, Debug)]
pub struct Job {
    pub operation: Operation,
    /// The prompt to draw from; empty when the task has none.
    pub prompt: String,
    pub seed: u64,
    pub aspect: AspectRatio,
    /// The long side of a new image (`image_size`).
    pub image_size: u32,
    /// The images the operation reads, decoded, in `Operation::inputs` order. Shared, so that a
    /// generator that clones the job to move it onto a thread does not copy the pixels the
    /// decode budget counted once.
    pub inputs: Arc<[RgbaImage]>,
    /// The prompt's reference images (`--sref`, `--cref`, `--oref`), decoded, in the order of
    /// `extras.references`.
    pub references: Arc<[RgbaImage]>,
    /// Inpaint's mask, decoded, the size of `inputs[0]`; shared for the same reason.
    pub mask: Option<Arc<RgbaImage>>,
    /// The share of the node's decode budget that `inputs` and `mask` hold. It goes with the
    /// last clone of the job, when the pixels do: a generator's thread may outlive the worker's
    /// wait for it (a stopped job answers at once).
    pub reservation: Option<Arc<Reservation>>,
    /// What the caller asked for beyond the operation (the settings and prompt parameters that
    /// shape the generation).
    pub extras: Extras,
}

impl Job {
    /// The size of a new image: the aspect ratio at `image_size` on the long side.
    pub fn new_image_size(&self) -> (u32, u32) {
        dimensions(self.aspect.width, self.aspect.height, self.image_size)
    }

    /// Input image `i` (in `Operation::inputs` order), or the error of a job without it.
    pub fn input(&self, i: usize) -> Result<&RgbaImage, GenerateError> {
        self.inputs
            .get(i)
            .ok_or_else(|| GenerateError::Failed(format!("input image {} is missing", i + 1)))
    }

    /// Inpaint's mask, or the error of a job without one.
    pub fn mask(&self) -> Result<&Arc<RgbaImage>, GenerateError> {
        self.mask
            .as_ref()
            .ok_or_else(|| GenerateError::Failed("the mask is missing".into()))
    }

    /// The job the unit tests start from: square, 64 pixels, no inputs and no extras.
    #[cfg(test)]
    pub(crate) fn for_tests(operation: Operation, prompt: &str, seed: u64) -> Job {
        Job {
            operation,
            prompt: prompt.into(),
            seed,
            aspect: AspectRatio::SQUARE,
            image_size: 64,
            inputs: Vec::new().into(),
            mask: None,
            references: Vec::<RgbaImage>::new().into(),
            reservation: None,
            extras: Extras::default(),
        }
    }
}

/// Why a generation did not produce its result.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    /// The backend refused the prompt (for example its own content filter): the task fails.
    #[error("content policy violation: {0}")]
    Refused(String),
    /// The backend rejected the job or answered something unusable: the task fails.
    #[error("generation failed: {0}")]
    Failed(String),
    /// The backend could not run it now (connection refused or reset, 429, 5xx, a timeout): the
    /// job may be tried again, here after `retry_after` if the backend said so, or elsewhere.
    #[error("backend unavailable: {message}")]
    Transient {
        message: String,
        retry_after: Option<std::time::Duration>,
    },
    /// The job was stopped ([`Progress::stop`]) and taken off the backend; nobody wants its result.
    #[error("generation stopped: the task was canceled or is no longer this worker's")]
    Canceled,
}

impl GenerateError {
    pub fn transient(message: impl Into<String>) -> GenerateError {
        GenerateError::Transient {
            message: message.into(),
            retry_after: None,
        }
    }
}

/// What a generation hands to the worker, in the shape of its operation.
#[derive(Clone, Debug)]
pub enum Product {
    /// Four encoded images of `width` x `height` and their 2x2 grid (the same size): made with
    /// them (the built-in generator, which holds their pixels), or `None` when it is to be made
    /// from the four files ([`crate::images::grid`]), after the task is recorded where easel
    /// serves its images.
    Grid {
        images: [StoredImage; 4],
        grid: Option<StoredImage>,
        width: u32,
        height: u32,
    },
    /// One encoded image.
    Single {
        image: StoredImage,
        width: u32,
        height: u32,
    },
    Text(Vec<String>),
    Seed(i64),
}

/// An image a backend made: the file to store ([`crate::images::stored`]) and its size, read
/// from its header.
#[derive(Clone, Debug)]
pub struct Answered {
    pub stored: StoredImage,
    pub width: u32,
    pub height: u32,
}

impl Answered {
    pub fn size(&self) -> (u32, u32) {
        (self.width, self.height)
    }
}

impl Product {
    /// Compose the grid of `images` (all the same size) and encode all five as PNG, side by
    /// side. CPU work: run it where the images were made (a blocking thread), not on the async
    /// runtime.
    pub fn grid(images: &[RgbaImage; 4]) -> Product {
        let (width, height) = (images[0].width, images[0].height);
        let (grid, images) = std::thread::scope(|scope| {
            let grid = scope.spawn(move || StoredImage::png(&compose_grid(images)));
            let encoded = images
                .each_ref()
                .map(|image| scope.spawn(move || StoredImage::png(image)));
            let encoded = encoded.map(|handle| {
                handle
                    .join()
                    .unwrap_or_else(|e| std::panic::resume_unwind(e))
            });
            (
                grid.join().unwrap_or_else(|e| std::panic::resume_unwind(e)),
                encoded,
            )
        });
        Product::Grid {
            images,
            grid: Some(grid),
            width,
            height,
        }
    }

    /// One image, encoded as PNG.
    pub fn single(image: &RgbaImage) -> Product {
        Product::Single {
            image: StoredImage::png(image),
            width: image.width,
            height: image.height,
        }
    }

    /// The four images a backend made (all the same size), kept as they were stored; their
    /// grid is made from the files ([`Product::Grid`]).
    pub fn from_answers(answers: [Answered; 4]) -> Product {
        let (width, height) = answers[0].size();
        Product::Grid {
            images: answers.map(|a| a.stored),
            grid: None,
            width,
            height,
        }
    }

    /// One image a backend made, kept as it was stored.
    pub fn from_answer(answer: Answered) -> Product {
        Product::Single {
            width: answer.width,
            height: answer.height,
            image: answer.stored,
        }
    }
}

/// What a generator's backends can take soon: the jobs that could start now, those that could
/// start within some time (a slot expected to free by then), and the first later moment at which
/// one more is expected to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Openings {
    pub now: usize,
    pub soon: usize,
    pub next: Option<Instant>,
}

impl Openings {
    /// The jobs that could start now or soon.
    pub fn count(&self) -> usize {
        self.now.saturating_add(self.soon)
    }
}

/// What running a job comes to: a product or the error it ended with.
pub type Generation<'a> = BoxFuture<'a, Result<Product, GenerateError>>;

/// An image backend.
pub trait Generator: Send + Sync + 'static {
    /// Its name in logs and `/readyz` (a configured backend's `name`).
    fn name(&self) -> &str;
    /// Whether it can run operation `kind` at all.
    fn supports(&self, kind: OpKind) -> bool;
    /// Run `job`, reporting progress as it goes. A job that runs past the backend's `timeout` is
    /// cancelled on the backend and answered as [`GenerateError::Transient`].
    fn run<'a>(&'a self, job: &'a Job, progress: &'a Progress) -> Generation<'a>;
    /// How many more jobs could start on a backend now or within `within`, where the generator
    /// knows (the pool); `None` where it does not.
    fn openings(&self, within: Duration) -> Option<Openings> {
        let _ = within;
        None
    }

    /// Whether the backend answers now (a cheap request, such as listing its models); `Err`
    /// says why not. The pool calls it to take a failing backend out and to bring it back.
    fn probe(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async { Ok(()) })
    }
}
