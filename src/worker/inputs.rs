//! A task's input images and inpaint mask: read from storage or fetched, then decoded together
//! under the node's decode memory budget.

use base64::Engine;

use crate::blobs::{BlobError, Blobs};
use crate::domain::operation::ImageInput;
use crate::domain::{Extras, Operation};
use crate::images::inputs::{DecodeBudget, ImageFetcher, InputLimits, Reservation};
use crate::images::RgbaImage;

/// Callers' input images: the client that fetches them, the limits on each, and the node's
/// memory budget for decoding them.
#[derive(Clone)]
pub struct Inputs {
    pub fetcher: ImageFetcher,
    pub limits: InputLimits,
    pub budget: DecodeBudget,
}

/// Why an input could not be used.
pub(super) enum Refused {
    /// The task fails with this error.
    Task(String),
    /// The image store failed in a way that may pass.
    Storage(BlobError),
}

impl From<String> for Refused {
    fn from(error: String) -> Refused {
        Refused::Task(error)
    }
}

/// The decoded images in `Operation::inputs` order then the image prompts' and the references', the mask, and the share of the decode budget
/// they hold (none when there are none).
type Resolved = (Vec<RgbaImage>, Option<RgbaImage>, Option<Reservation>);

impl Inputs {
    /// The operation's input images (easel's own read from `blobs`), then the image prompts and the
    /// reference images of `extras`, and the mask, decoded; or the
    /// error that fails the task, naming the input. The files are all read first, then decoded
    /// as one set: a task waits here while other tasks' images hold the node's decode budget,
    /// and fails when its own set alone needs more than the whole budget.
    pub(super) async fn resolve(
        &self,
        blobs: &Blobs,
        operation: &Operation,
        extras: &Extras,
    ) -> Result<Resolved, Refused> {
        let prompts = extras
            .image_prompts
            .iter()
            .enumerate()
            .map(|(i, p)| (format!("image_prompts[{i}]"), p.input.clone()));
        let references = extras
            .references
            .iter()
            .map(|r| (format!("--{}", r.param), r.input.clone()));
        let reads = operation
            .inputs()
            .into_iter()
            .chain(prompts)
            .chain(references)
            .map(|(name, input)| async move {
                let bytes = match &input {
                    ImageInput::Stored(image) => match crate::images::grid::follow::get(blobs, &image.key).await {
                        Ok(Some(bytes)) => bytes,
                        Ok(None) => {
                            return Err(format!("{name}: the image is no longer stored").into())
                        }
                        Err(e) if e.is_transient() => return Err(Refused::Storage(e)),
                        Err(e) => {
                            tracing::error!(error = %e, key = image.key, "could not read an input");
                            return Err(format!(
                                "{name}: internal error: could not read the image"
                            )
                            .into());
                        }
                    },
                    ImageInput::Url { url } => self
                        .fetcher
                        .fetch(url)
                        .await
                        .map_err(|e| format!("{name}: {e}"))?,
                };
                Ok::<_, Refused>((name, bytes))
            });
        let mut files = futures::future::try_join_all(reads).await?;
        let inputs = files.len();
        // The mask (checked to be a PNG of the parent's size at submit) counts against the
        // budget like the images it goes with.
        if let Operation::Inpaint { mask, .. } = operation {
            let png = base64::engine::general_purpose::STANDARD
                .decode(mask)
                .map_err(|e| Refused::Task(format!("mask: {e}")))?;
            files.push(("mask".to_owned(), png.into()));
        }
        // Most tasks have none: they go on without a trip through the blocking threads.
        if files.is_empty() {
            return Ok((Vec::new(), None, None));
        }
        let mut decoded = self.budget.decode_all(files, self.limits).await?;
        let mask = if decoded.images.len() > inputs {
            decoded.images.pop()
        } else {
            None
        };
        Ok((decoded.images, mask, Some(decoded.reservation)))
    }
}
