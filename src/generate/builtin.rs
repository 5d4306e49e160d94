//! The built-in generator: every operation, drawn procedurally and deterministically, so that each
//! can be seen and tested without a model server. New pictures come from [`procedural::render`];
//! follow-ups work on their parent's pixels with the operations in [`ops`].

use std::time::{Duration, Instant};

use super::job::{GenerateError, Generation, Generator, Job, Product, Progress};
use super::ops::{self, Detail, Direction, Strength};
use super::procedural;
use crate::domain::image_prompts::IMAGE_WEIGHT_DEFAULT;
use crate::domain::operation::{AltKind, VariationOf};
use crate::domain::{OpKind, Operation};
use crate::images::preview::PreviewImage;
use crate::images::stored::{Format, StoredImage};
use crate::images::{dimensions, RgbaImage};

/// The built-in generator: abstract pictures drawn from the prompt's words (see [`procedural`]).
#[derive(Clone, Debug)]
pub struct Procedural {
    /// Its name in the pool (`procedural` unless configured otherwise).
    pub name: String,
    /// Least time one generation takes (models a real backend's latency; zero by default).
    pub min_duration: Duration,
    /// The backend's `operations`, when it names some: it runs only those.
    pub only: Option<Vec<OpKind>>,
}

impl Procedural {
    pub fn new(min_duration: Duration) -> Procedural {
        Procedural {
            name: "procedural".into(),
            min_duration,
            only: None,
        }
    }
}

impl Generator for Procedural {
    fn name(&self) -> &str {
        &self.name
    }

    /// Everything but faceswap, which needs a model of faces (or what its `operations` name).
    fn supports(&self, kind: OpKind) -> bool {
        kind != OpKind::Faceswap && self.only.as_ref().is_none_or(|only| only.contains(&kind))
    }

    fn run<'a>(&'a self, job: &'a Job, progress: &'a Progress) -> Generation<'a> {
        Box::pin(async move {
            // Drawing and encoding run as one job on one blocking thread: each hand-off between
            // the runtime and the blocking pool can leave a core idle.
            let (job, on_thread, min_duration) = (job.clone(), progress.clone(), self.min_duration);
            let drawing = tokio::task::spawn_blocking(move || {
                let pace = Pace {
                    started: Instant::now(),
                    min_duration,
                    progress: &on_thread,
                };
                draw(&job, &pace)
            });
            // A stopped job answers at once; its thread skips the rest of its pacing and its
            // result is dropped.
            tokio::select! {
                drawn = drawing => {
                    drawn.map_err(|e| GenerateError::Failed(format!("renderer crashed: {e}")))?
                }
                _ = progress.stopped() => Err(GenerateError::Canceled),
            }
        })
    }
}

/// The longest sleep of the pacing between looks at whether the job was stopped.
const PACE_STEP: Duration = Duration::from_millis(50);

/// Reports progress as the parts of a result are drawn, spreading any configured latency over
/// them.
struct Pace<'a> {
    started: Instant,
    min_duration: Duration,
    progress: &'a Progress,
}

impl Pace<'_> {
    /// Part `done` of `parts` is drawn.
    fn part(&self, done: u32, parts: u32) {
        let due = self
            .min_duration
            .mul_f64(f64::from(done) / f64::from(parts.max(1)));
        // In short steps, so that a stopped job frees its thread soon.
        while let Some(wait) = due.checked_sub(self.started.elapsed()) {
            if self.progress.is_stopped() {
                break;
            }
            std::thread::sleep(wait.min(PACE_STEP));
        }
        self.progress
            .report(i64::from(done) * 80 / i64::from(parts.max(1)));
    }

    /// Four images, drawn one by one by `draw(k)`, and their grid. Each image is the preview
    /// once drawn: a copy of its pixels, no encode nor composite here (the worker shrinks the
    /// latest one, at most once a second).
    fn grid(&self, draw: impl Fn(u32) -> RgbaImage) -> Product {
        let images = [0u32, 1, 2, 3].map(|k| {
            let image = draw(k);
            // The picture drawn so far is the task's preview (the worker stores it at most once
            // a second); the last one is the result itself.
            if k < 3 {
                self.progress.preview(PreviewImage::Pixels(image.clone()));
            }
            self.part(k + 1, 4);
            image
        });
        Product::grid(&images)
    }
}

/// Seeds of the four images of one task: distinct, and the same for the same task seed.
fn image_seed(seed: u64, k: u32) -> u64 {
    seed ^ (u64::from(k) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// What the prompt's parameters ask of the procedural pictures: `--no` (or the body's
/// `negative_prompt`, which wins over it), `--chaos`, `--tile`, the style codes (`--sref CODE`,
/// `--p`), `--stop` and `--draft`; `--ar` is the job's aspect.
fn look(job: &Job) -> procedural::Look {
    let parameters = &job.extras.parameters;
    let negative = job.extras.settings.negative_prompt.as_ref();
    procedural::Look {
        without: negative
            .filter(|n| !n.trim().is_empty())
            .or(parameters.no.as_ref())
            .cloned()
            .unwrap_or_default(),
        chaos: parameters.chaos.unwrap_or(0),
        tile: parameters.tile,
        style: parameters.style_code(),
        // `--draft` is half the steps elsewhere: half the drawing here.
        stop: match (parameters.stop, parameters.draft) {
            (None, false) => None,
            (stop, draft) => Some(stop.unwrap_or(100) / if draft { 2 } else { 1 }),
        },
    }
}

fn draw(job: &Job, pace: &Pace<'_>) -> Result<Product, GenerateError> {
    let prompt = job.prompt.as_str();
    let look = look(job);
    // What continues a picture (pan, outpaint, inpaint) follows the prompt's parameters but
    // does not tile: it is part of an image that does not repeat.
    let part = procedural::Look {
        tile: false,
        ..look.clone()
    };
    // A continuation of the scene where the task has a prompt to draw it from.
    let fill = |k: u32, w: u32, h: u32| {
        (!prompt.is_empty()).then(|| procedural::render_look(prompt, job.seed, k, w, h, &part))
    };
    let product = match &job.operation {
        Operation::Imagine | Operation::Reroll => {
            let (w, h) = job.new_image_size();
            // Imagine's image prompts are its inputs, laid over the scene at `--iw`'s share.
            let share = ops::image_share(job.extras.parameters.iw.unwrap_or(IMAGE_WEIGHT_DEFAULT));
            pace.grid(|k| {
                let scene = procedural::render_look(prompt, job.seed, k, w, h, &look);
                ops::image_prompted(scene, &job.inputs, share, image_seed(job.seed, k), k)
            })
        }
        Operation::Upscale1x { .. } => {
            let image = job.input(0)?;
            pace.part(1, 1);
            Product::single(image)
        }
        Operation::UpscaleAlt { kind, .. } => {
            let detail = match kind {
                AltKind::Subtle => Detail::Subtle,
                AltKind::Creative => Detail::Creative,
            };
            upscale(job.input(0)?, 2, detail, job.seed, pace)?
        }
        Operation::UpscaleHighres { factor, .. } => upscale(
            job.input(0)?,
            u32::from(*factor),
            Detail::Subtle,
            job.seed,
            pace,
        )?,
        Operation::Variations { of, .. } => {
            // A grid's image varies strongly, as Midjourney's V buttons do.
            let strength = || match of {
                VariationOf::Subtle => Strength::Subtle,
                VariationOf::Index(_) | VariationOf::Strong => Strength::Strong,
            };
            let parent = job.input(0)?;
            pace.grid(|k| ops::variation(parent, strength(), job.seed, k))
        }
        Operation::Pan { direction, .. } => {
            let parent = job.input(0)?;
            let direction = || Direction::from(*direction);
            let (w, h) = ops::pan_size(parent.width, parent.height, direction());
            pace.grid(|k| {
                let fill = fill(k, w, h);
                ops::pan(
                    parent,
                    direction(),
                    fill.as_ref(),
                    image_seed(job.seed, k),
                    k,
                )
            })
        }
        Operation::Outpaint { zoom_ratio, .. } => {
            let parent = job.input(0)?;
            let long = parent.width.max(parent.height);
            let (w, h) = dimensions(job.aspect.width, job.aspect.height, long);
            pace.grid(|k| {
                let fill = fill(k, w, h);
                ops::outpaint(parent, w, h, *zoom_ratio, fill.as_ref(), job.seed, k)
            })
        }
        Operation::Inpaint { .. } => {
            let parent = job.input(0)?;
            let mask = job.mask()?;
            pace.grid(|k| {
                let fill = procedural::render_look(
                    prompt,
                    image_seed(job.seed, k),
                    k,
                    parent.width,
                    parent.height,
                    &part,
                );
                ops::inpaint(parent, mask, &fill)
            })
        }
        Operation::Blend { .. } => {
            let (w, h) = job.new_image_size();
            pace.grid(|k| ops::blend(&job.inputs, w, h, job.seed, k))
        }
        Operation::Describe { scene_words, .. } => {
            let content = ops::describe(job.input(0)?, scene_words.as_deref());
            pace.part(1, 1);
            Product::Text(content)
        }
        Operation::Shorten => {
            let content = ops::shorten(prompt);
            pace.part(1, 1);
            Product::Text(content)
        }
        Operation::Seed => {
            pace.part(1, 1);
            Product::Seed(job.seed as i64)
        }
    };
    Ok(product)
}

/// `src` at `factor` times its size, encoded as it is drawn.
fn upscale(
    src: &RgbaImage,
    factor: u32,
    detail: Detail,
    seed: u64,
    pace: &Pace<'_>,
) -> Result<Product, GenerateError> {
    let png = ops::upscale_png(src, factor, detail, seed);
    if png.is_empty() {
        return Err(GenerateError::Failed(format!(
            "a {}x{} image cannot be upscaled {factor}x",
            src.width, src.height
        )));
    }
    pace.part(1, 1);
    Ok(Product::Single {
        image: StoredImage {
            bytes: png,
            format: Format::Png,
        },
        width: src.width * factor,
        height: src.height * factor,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn imagine() -> Job {
        Job::for_tests(Operation::Imagine, "a lighthouse at dusk", 7)
    }

    /// A procedural backend whose `operations` name some runs only those (an operator gives it
    /// the crops of a model whose real backend makes no upscales, and no more).
    #[test]
    fn a_backend_with_operations_runs_only_those() {
        let mut crop = Procedural::new(Duration::ZERO);
        assert!(crop.supports(OpKind::Imagine));
        crop.only = Some(vec![OpKind::Upscale1x]);
        assert!(crop.supports(OpKind::Upscale1x));
        assert!(!crop.supports(OpKind::Imagine));
    }

    /// A paced job shows its first image before it ends: the preview is one of the grid's
    /// images, at the image's own size.
    #[tokio::test]
    async fn a_paced_job_gives_a_preview_of_its_drawing_before_it_ends() {
        let generator = Procedural::new(Duration::from_secs(2));
        let progress = Progress::default();
        let job = imagine();
        let run = generator.run(&job, &progress);
        tokio::pin!(run);
        let preview = tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                tokio::select! {
                    _ = &mut run => panic!("the job ended before any preview"),
                    () = progress.changed() => {
                        if let Some(preview) = progress.take_preview() {
                            break preview;
                        }
                    }
                }
            }
        })
        .await
        .expect("a preview within the job's run");
        let PreviewImage::Pixels(image) = preview else {
            panic!("the procedural generator's own pixels");
        };
        assert_eq!((image.width, image.height), (64, 64));
        let product = run.await.expect("the job ends well");
        let Product::Grid { width, height, .. } = product else {
            panic!("a grid");
        };
        assert_eq!((width, height), (64, 64));
    }
}
