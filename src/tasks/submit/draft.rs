//! A submit's body: the operation's typed fields (`request`), then the rules across fields,
//! gathered into the one shape (`Draft`) that `resolve` checks against the parent.

use std::sync::Arc;

use base64::Engine;
use uuid::Uuid;

use super::super::body::{task_id, JsonObject};
use super::super::upload::inline::{decode_data_url, is_data_url};
use super::super::Tasks;
use super::generation;
use super::request::{
    self, fields, Aspect, Choice, Delivery, Index, Mode, OptionalIndex, Prompted, Reprompt, Seed,
    TaskId, Text,
};
use crate::domain::image_prompts::{split_image_prompts, IMAGE_PROMPTS_MAX};
use crate::domain::operation::{AltKind, Dimension, PanDirection};
use crate::domain::{AspectRatio, Extras, OpKind, Parameters, ProcessMode, Prompt, Shape};
use crate::generate::ops::png_marks_any;
use crate::net::validate_webhook_url;
use crate::refusal::ApiError;

/// Most characters of a `webhook_secret`.
pub use crate::domain::account_webhook::SECRET_MAX_CHARS as WEBHOOK_SECRET_MAX_CHARS;
pub use crate::domain::operation::FOLLOW_UP_MAX_SIDE;
/// How many images `blend` takes.
pub const BLEND_INPUTS: std::ops::RangeInclusive<usize> = 2..=5;

/// A submit's body, checked field by field but not yet against its parent.
pub(super) struct Draft {
    pub(super) kind: OpKind,
    pub(super) prompt: Option<Prompt>,
    pub(super) aspect: Option<AspectRatio>,
    pub(super) mode: ProcessMode,
    pub(super) seed: Option<u32>,
    pub(super) webhook_url: Option<String>,
    pub(super) webhook_secret: Option<String>,
    /// The parent's field name and id.
    pub(super) parent: Option<(&'static str, Uuid)>,
    pub(super) index: Option<Index>,
    pub(super) alt: Option<AltKind>,
    pub(super) factor: Option<u8>,
    pub(super) direction: Option<PanDirection>,
    pub(super) zoom_ratio: Option<f64>,
    /// The mask's PNG file, and its size.
    pub(super) mask: Option<(Arc<[u8]>, u32, u32)>,
    pub(super) image_url: Option<String>,
    pub(super) image_urls: Vec<String>,
    pub(super) dimension: Dimension,
    /// Imagine's image prompts, as given (URLs checked, `data:` URLs decoded but not yet kept).
    pub(super) image_prompts: Vec<String>,
    /// What the caller asked for beyond the operation.
    pub(super) extras: Extras,
    /// The model and settings asked for, resolved against the model in `resolve`.
    pub(super) asked: generation::Asked,
}

impl Draft {
    pub(super) fn parse(kind: OpKind, tasks: &Tasks, body: &JsonObject) -> Result<Draft, ApiError> {
        let body = &body.0;
        let mut d = Draft {
            kind,
            prompt: None,
            aspect: None,
            mode: ProcessMode::Fast,
            seed: None,
            webhook_url: None,
            webhook_secret: None,
            parent: None,
            index: None,
            alt: None,
            factor: None,
            direction: None,
            zoom_ratio: None,
            mask: None,
            image_url: None,
            image_urls: Vec::new(),
            dimension: Dimension::Square,
            image_prompts: Vec::new(),
            extras: Extras::default(),
            asked: generation::Asked::default(),
        };
        // The prompt's text and its parameters, stored apart: the task's `prompt` is the text.
        let prompt = |raw: Option<Text>| -> Result<Option<(Prompt, Parameters)>, ApiError> {
            raw.map(|Text(raw)| {
                let invalid = |e: String| ApiError::field("prompt", "invalid_value", e);
                let whole = Prompt::parse(&raw).map_err(invalid)?;
                let (text, mut parameters) = Parameters::parse(whole.as_str())
                    .map_err(|e| ApiError::field("prompt", e.code, e.message))?;
                parameters.pick_random_codes(rand::random::<u32>);
                for (field, url) in parameters.references_mut() {
                    *url = check_url(tasks, &field, url)?;
                }
                Ok((Prompt::parse(text).map_err(invalid)?, parameters))
            })
            .transpose()
        };
        // A follow-up's prompt may be left empty: the parent's is used.
        let reprompt = || -> Result<Option<(Prompt, Parameters)>, ApiError> {
            let Reprompt { prompt: raw } = fields(body)?;
            prompt(raw.filter(|Text(s)| !s.trim().is_empty()))
        };
        let aspect = |parameters: &Parameters| -> Result<Option<AspectRatio>, ApiError> {
            let Aspect { aspect_ratio } = fields(body)?;
            Ok(aspect(aspect_ratio.map(|Choice(a)| a), parameters))
        };
        let parent = |TaskId(id)| Some(("parent_task_id", id));
        match kind {
            OpKind::Imagine | OpKind::Shorten => {
                let Prompted { prompt: raw } = fields(body)?;
                let raw = match kind {
                    // Image prompts come off first: a data: URL may be longer than a prompt.
                    OpKind::Imagine => Text(image_prompts(tasks, &raw.0, &mut d.image_prompts)?),
                    _ => raw,
                };
                d.set_prompt(prompt(Some(raw))?);
            }
            OpKind::Upscale1x => {
                let r: request::Upscale1x = fields(body)?;
                d.parent = parent(r.parent_task_id);
                d.index = Some(r.index.0);
            }
            OpKind::UpscaleAlt => {
                let r: request::UpscaleAlt = fields(body)?;
                d.parent = parent(r.parent_task_id);
                d.alt = Some(r.kind.0);
            }
            OpKind::UpscaleHighres => {
                let r: request::UpscaleHighres = fields(body)?;
                d.factor = Some(r.factor.0);
                let image = r.image_url.map(|Text(s)| s).filter(|s| !s.is_empty());
                d.image_url = image
                    .map(|raw| check_url(tasks, "image_url", &raw))
                    .transpose()?;
                match (r.parent_task_id, d.image_url.is_some()) {
                    (Some(Text(raw)), false) => {
                        d.parent = Some(("parent_task_id", task_id("parent_task_id", &raw)?));
                        let OptionalIndex { index } = fields(body)?;
                        d.index = index.map(|i| i.0);
                    }
                    (None, true) => {}
                    _ => {
                        return Err(ApiError::field(
                            "parent_task_id",
                            "invalid_value",
                            "give either parent_task_id or image_url, not both or neither",
                        ))
                    }
                }
            }
            OpKind::Variations => {
                let r: request::Variations = fields(body)?;
                d.parent = parent(r.parent_task_id);
                d.index = Some(r.index.0);
            }
            OpKind::Reroll => {
                let r: request::Parent = fields(body)?;
                d.parent = parent(r.parent_task_id);
            }
            OpKind::Pan => {
                let r: request::Pan = fields(body)?;
                d.parent = parent(r.parent_task_id);
                d.direction = Some(r.direction.0);
            }
            OpKind::Outpaint => {
                let r: request::Outpaint = fields(body)?;
                d.parent = parent(r.parent_task_id);
                d.zoom_ratio = Some(r.zoom_ratio.0);
            }
            OpKind::Inpaint => {
                let r: request::Inpaint = fields(body)?;
                d.parent = parent(r.parent_task_id);
                d.mask = Some(mask(&r.mask.0)?);
            }
            OpKind::Blend => {
                let r: request::Blend = fields(body)?;
                let items = r.image_urls.0;
                if !BLEND_INPUTS.contains(&items.len()) {
                    return Err(ApiError::field(
                        "image_urls",
                        "invalid_value",
                        format!(
                            "must hold {} to {} URLs (got {})",
                            BLEND_INPUTS.start(),
                            BLEND_INPUTS.end(),
                            items.len()
                        ),
                    ));
                }
                for (i, item) in items.iter().enumerate() {
                    let field = format!("image_urls[{i}]");
                    let raw = item.as_str().ok_or_else(|| {
                        ApiError::field(&field, "invalid_type", "must be a string")
                    })?;
                    d.image_urls.push(check_url(tasks, &field, raw)?);
                }
                d.dimension = r.dimension.map_or(Dimension::Square, |Choice(d)| d);
            }
            OpKind::Describe => {
                let r: request::Describe = fields(body)?;
                d.image_url = Some(check_url(tasks, "image_url", &r.image_url.0)?);
            }
            OpKind::Seed => {
                let r: request::SeedOf = fields(body)?;
                d.parent = Some(("task_id", r.task_id.0));
            }
            OpKind::Faceswap => {
                let r: request::Faceswap = fields(body)?;
                check_url(tasks, "target_image_url", &r.target_image_url.0)?;
                check_url(tasks, "swap_image_url", &r.swap_image_url.0)?;
            }
        }
        // The follow-ups that draw again may be given a new prompt; those that may change the
        // shape of their images, an aspect ratio (else the prompt's `--ar`, so after the prompt).
        use OpKind::{Imagine, Inpaint, Outpaint, Pan, Reroll, Variations};
        if matches!(kind, Variations | Reroll | Pan | Outpaint | Inpaint) {
            d.set_prompt(reprompt()?);
        }
        if matches!(kind, Imagine | Variations | Reroll | Outpaint) {
            d.aspect = aspect(&d.extras.parameters)?;
        }
        if takes_mode(kind) {
            let Mode { process_mode } = fields(body)?;
            // The body's `process_mode` wins over the prompt's `--fast`, `--relax`, `--turbo`.
            let asked = d.extras.parameters.process_mode.as_deref();
            let prompted = asked.and_then(|m| m.parse().ok());
            d.mode = process_mode
                .map(|Choice(m)| m)
                .or(prompted)
                .unwrap_or(ProcessMode::Fast);
        }
        let delivery: Delivery = fields(body)?;
        // The body's `seed` wins over the prompt's `--seed`.
        d.seed = delivery
            .seed
            .map(|Seed(seed)| seed)
            .or(d.extras.parameters.seed);
        d.webhook_url = match delivery.webhook_url.filter(|Text(s)| !s.is_empty()) {
            None => None,
            Some(Text(raw)) => Some(
                validate_webhook_url(&raw, &tasks.destinations)
                    .map_err(|e| ApiError::field("webhook_url", "invalid_value", e))?
                    .to_string(),
            ),
        };
        d.webhook_secret = webhook_secret(delivery.webhook_secret)?;
        d.extras.metadata = delivery.metadata.map(|m| m.0);
        // Kept without `webhook_url` too: harmless, and shown in the record as asked.
        d.extras.webhook_events = delivery.webhook_events.and_then(|e| e.0.stored());
        d.asked = generation::asked(kind, body)?;
        Ok(d)
    }
}

impl Draft {
    /// A prompt given in the body: its text is the task's prompt, its parameters go with it.
    fn set_prompt(&mut self, given: Option<(Prompt, Parameters)>) {
        if let Some((prompt, parameters)) = given {
            self.prompt = Some(prompt);
            self.extras.parameters = parameters;
        }
    }
}

/// Whether operation `kind` takes `process_mode`: those that make images do; the text
/// operations and `seed` always run as `fast`.
pub(super) fn takes_mode(kind: OpKind) -> bool {
    kind.shape() != Shape::Text && kind != OpKind::Seed
}

pub(super) fn invalid_parent(field: &str, problem: impl std::fmt::Display) -> ApiError {
    ApiError::field(field, "invalid_parent", problem)
}

/// `aspect_ratio` as given, or else the prompt's `--ar W:H` (`--aspect`), as Midjourney reads it.
fn aspect(given: Option<AspectRatio>, parameters: &Parameters) -> Option<AspectRatio> {
    given.or_else(|| {
        // Checked as an aspect ratio when the prompt was parsed.
        parameters.aspect.as_deref().and_then(|a| a.parse().ok())
    })
}

fn webhook_secret(given: Option<Text>) -> Result<Option<String>, ApiError> {
    let Some(Text(secret)) = given.filter(|Text(s)| !s.is_empty()) else {
        return Ok(None);
    };
    crate::domain::account_webhook::secret_rules(&secret)
        .map_err(|e| ApiError::field("webhook_secret", "invalid_value", e))?;
    Ok(Some(secret))
}

/// The image URLs an imagine's prompt starts with, checked as every image field is (into
/// `urls`), and the rest of the prompt.
fn image_prompts(tasks: &Tasks, raw: &str, urls: &mut Vec<String>) -> Result<String, ApiError> {
    let (given, text) = split_image_prompts(raw);
    if given.len() > IMAGE_PROMPTS_MAX {
        return Err(ApiError::field(
            "prompt",
            "invalid_value",
            format!(
                "may start with at most {IMAGE_PROMPTS_MAX} image URLs (got {})",
                given.len()
            ),
        ));
    }
    for (i, url) in given.into_iter().enumerate() {
        urls.push(check_url(tasks, &format!("image_prompts[{i}]"), url)?);
    }
    Ok(text.to_string())
}

/// An input image's URL, checked without network access: one of easel's own image URLs, a
/// `data:` URL of an image (its base64 decoded here, its content checked once the key is known),
/// or one the input fetch policy allows.
fn check_url(tasks: &Tasks, field: &str, raw: &str) -> Result<String, ApiError> {
    if is_data_url(raw) {
        decode_data_url(field, raw)?;
        return Ok(raw.to_string());
    }
    if tasks.blobs.key_of_url(raw).is_some() {
        return Ok(raw.to_string());
    }
    tasks
        .fetcher
        .validate(raw)
        .map(|url| url.to_string())
        .map_err(|e| ApiError::field(field, "invalid_value", e))
}

/// `mask`: a `data:image/png;base64,` URL of a PNG that marks at least one pixel to redraw.
/// The base64 and the image's size, from its header; its pixels are checked by
/// [`Draft::check_mask`], its size against the parent's later.
fn mask(raw: &str) -> Result<(Arc<[u8]>, u32, u32), ApiError> {
    let bad = |problem: String| ApiError::field("mask", "invalid_value", problem);
    let data = raw
        .strip_prefix("data:image/png;base64,")
        .ok_or_else(|| bad("must be a data URL of a PNG (data:image/png;base64,...)".into()))?;
    let png = base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(|e| bad(format!("is not valid base64 ({e})")))?;
    // The header first: a small file may claim a huge image, and no parent is over this size.
    let (w, h) = png::Decoder::new(std::io::Cursor::new(&png))
        .read_info()
        .map(|r| (r.info().width, r.info().height))
        .map_err(|e| bad(format!("is not a valid PNG ({e})")))?;
    if w.max(h) > FOLLOW_UP_MAX_SIDE {
        return Err(bad(format!(
            "is {w}x{h}; it must be the parent image's size (at most {FOLLOW_UP_MAX_SIDE} px on \
             the long side)"
        )));
    }
    Ok((png.into(), w, h))
}

impl Draft {
    /// For `inpaint`: that the mask decodes and marks at least one pixel to redraw. Its rows are
    /// read one at a time, on a blocking thread: a 2048 x 2048 mask takes milliseconds that the
    /// request threads owe to other connections.
    pub(super) async fn check_mask(&self) -> Result<(), ApiError> {
        let Some((png, _, _)) = self.mask.clone() else {
            return Ok(());
        };
        let bad = |problem: String| ApiError::field("mask", "invalid_value", problem);
        let checked = tokio::task::spawn_blocking(move || png_marks_any(&png))
            .await
            .map_err(|e| ApiError::Internal(anyhow::anyhow!("mask check: {e}")))?;
        match checked {
            Ok(true) => Ok(()),
            Ok(false) => Err(bad(
                "marks no pixel to redraw (opaque and light: alpha >= 128, luminance >= 128)"
                    .into(),
            )),
            Err(problem) => Err(bad(problem)),
        }
    }
}
