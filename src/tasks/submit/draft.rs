//! A submit's body, checked field by field, each error naming its field and rule.

use base64::Engine;
use serde_json::Value;
use uuid::Uuid;

use super::super::body::{task_id, JsonObject};
use super::super::Tasks;
use crate::domain::operation::{AltKind, Dimension, PanDirection};
use crate::domain::{AspectRatio, OpKind, ProcessMode, Prompt, Shape};
use crate::error::ApiError;
use crate::generate::ops::mask_redraws;
use crate::generate::raster::decode_png;
use crate::webhooks::ssrf::validate_webhook_url;

/// Most characters of a `webhook_secret`.
pub const WEBHOOK_SECRET_MAX_CHARS: usize = 256;
/// Longest side of an image that the operations working on a parent's pixels accept (and of
/// `upscale-highres`'s input, as the contract says): it bounds their memory.
pub const FOLLOW_UP_MAX_SIDE: u32 = 2048;
/// How many images `blend` takes.
pub const BLEND_INPUTS: std::ops::RangeInclusive<usize> = 2..=5;

/// `index` as clients send it: an integer or a string, a number 1..=4 or a strength.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Index {
    Image(u8),
    Strong,
    Subtle,
}

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
    /// The mask's PNG file as base64, and its size.
    pub(super) mask: Option<(String, u32, u32)>,
    pub(super) image_url: Option<String>,
    pub(super) image_urls: Vec<String>,
    pub(super) dimension: Dimension,
}

impl Draft {
    pub(super) fn parse(kind: OpKind, tasks: &Tasks, body: &JsonObject) -> Result<Draft, ApiError> {
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
        };
        let prompt = |required: bool| -> Result<Option<Prompt>, ApiError> {
            let raw = if required {
                Some(body.req_str("prompt")?)
            } else {
                body.opt_str("prompt")?.filter(|s| !s.trim().is_empty())
            };
            raw.map(|raw| {
                Prompt::parse(raw).map_err(|e| ApiError::field("prompt", "invalid_value", e))
            })
            .transpose()
        };
        let parent = |field: &'static str| -> Result<Option<(&'static str, Uuid)>, ApiError> {
            Ok(Some((field, task_id(field, body.req_str(field)?)?)))
        };
        match kind {
            OpKind::Imagine => {
                d.prompt = prompt(true)?;
                d.aspect = aspect(body, d.prompt.as_ref())?;
            }
            OpKind::Shorten => d.prompt = prompt(true)?,
            OpKind::Upscale1x => {
                d.parent = parent("parent_task_id")?;
                d.index = Some(index(body, true)?.ok_or_else(index_required)?);
            }
            OpKind::UpscaleAlt => {
                d.parent = parent("parent_task_id")?;
                d.alt = Some(parse_field(body, "type", true)?.expect("required"));
            }
            OpKind::UpscaleHighres => {
                d.factor = Some(match body.req_str("type")? {
                    "2x" => 2,
                    "4x" => 4,
                    _ => {
                        return Err(ApiError::field(
                            "type",
                            "invalid_value",
                            "must be one of \"2x\", \"4x\"",
                        ))
                    }
                });
                d.image_url = image_url(tasks, body, "image_url", false)?;
                let given = body.opt_str("parent_task_id")?.is_some();
                match (given, d.image_url.is_some()) {
                    (true, false) => {
                        d.parent = parent("parent_task_id")?;
                        d.index = index(body, true)?;
                    }
                    (false, true) => {}
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
                d.parent = parent("parent_task_id")?;
                d.index = Some(index(body, false)?.ok_or_else(index_required)?);
                d.prompt = prompt(false)?;
                d.aspect = aspect(body, d.prompt.as_ref())?;
            }
            OpKind::Reroll => {
                d.parent = parent("parent_task_id")?;
                d.prompt = prompt(false)?;
                d.aspect = aspect(body, d.prompt.as_ref())?;
            }
            OpKind::Pan => {
                d.parent = parent("parent_task_id")?;
                d.direction = parse_field(body, "direction", true)?;
                d.prompt = prompt(false)?;
            }
            OpKind::Outpaint => {
                d.parent = parent("parent_task_id")?;
                d.zoom_ratio = Some(zoom_ratio(body)?);
                d.prompt = prompt(false)?;
                d.aspect = aspect(body, d.prompt.as_ref())?;
            }
            OpKind::Inpaint => {
                d.parent = parent("parent_task_id")?;
                d.mask = Some(mask(body)?);
                d.prompt = prompt(false)?;
            }
            OpKind::Blend => {
                let items = body.req_array("image_urls")?;
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
                d.dimension = parse_field(body, "dimension", false)?.unwrap_or(Dimension::Square);
            }
            OpKind::Describe => d.image_url = image_url(tasks, body, "image_url", true)?,
            OpKind::Seed => d.parent = parent("task_id")?,
            OpKind::Faceswap => {
                image_url(tasks, body, "target_image_url", true)?;
                image_url(tasks, body, "swap_image_url", true)?;
            }
        }
        if kind.shape() != Shape::Text && kind != OpKind::Seed {
            d.mode = match body.opt_str("process_mode")? {
                None => ProcessMode::Fast,
                Some(raw) => raw
                    .parse::<ProcessMode>()
                    .map_err(|e| ApiError::field("process_mode", "invalid_value", e))?,
            };
        }
        d.seed = seed(body, d.prompt.as_ref())?;
        d.webhook_url = match body.opt_str("webhook_url")?.filter(|s| !s.is_empty()) {
            None => None,
            Some(raw) => Some(
                validate_webhook_url(raw, &tasks.destinations)
                    .map_err(|e| ApiError::field("webhook_url", "invalid_value", e))?
                    .to_string(),
            ),
        };
        d.webhook_secret = webhook_secret(body)?;
        Ok(d)
    }
}

pub(super) fn invalid_parent(field: &str, problem: impl std::fmt::Display) -> ApiError {
    ApiError::field(field, "invalid_parent", problem)
}

fn index_required() -> ApiError {
    ApiError::field("index", "missing_field", "is required")
}

/// `index`: 1..=4 as an integer or a string, or (when `images_only` is false) `"strong"` or
/// `"subtle"`.
fn index(body: &JsonObject, images_only: bool) -> Result<Option<Index>, ApiError> {
    let rule = if images_only {
        "must be 1, 2, 3 or 4"
    } else {
        "must be 1, 2, 3 or 4, or \"strong\" or \"subtle\""
    };
    let bad = || ApiError::field("index", "invalid_value", rule);
    let n = match body.0.get("index") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Number(n)) => n.as_u64().ok_or_else(bad)?,
        Some(Value::String(s)) => match (s.as_str(), images_only) {
            ("strong", false) => return Ok(Some(Index::Strong)),
            ("subtle", false) => return Ok(Some(Index::Subtle)),
            _ => s.parse::<u64>().map_err(|_| bad())?,
        },
        Some(_) => {
            return Err(ApiError::field(
                "index",
                "invalid_type",
                "must be an integer or a string",
            ))
        }
    };
    match n {
        1..=4 => Ok(Some(Index::Image(n as u8))),
        _ => Err(bad()),
    }
}

/// A string field with a fixed set of values.
fn parse_field<T: std::str::FromStr<Err = String>>(
    body: &JsonObject,
    field: &str,
    required: bool,
) -> Result<Option<T>, ApiError> {
    let raw = if required {
        Some(body.req_str(field)?)
    } else {
        body.opt_str(field)?
    };
    raw.map(|raw| {
        raw.parse::<T>()
            .map_err(|e| ApiError::field(field, "invalid_value", e))
    })
    .transpose()
}

/// `aspect_ratio`, or else a `--ar W:H` (`--aspect`) in the prompt, as Midjourney reads it.
fn aspect(body: &JsonObject, prompt: Option<&Prompt>) -> Result<Option<AspectRatio>, ApiError> {
    if let Some(given) = parse_field(body, "aspect_ratio", false)? {
        return Ok(Some(given));
    }
    match prompt.and_then(|p| p.parameter(&["ar", "aspect"])) {
        None => Ok(None),
        Some(raw) => raw
            .parse::<AspectRatio>()
            .map(Some)
            .map_err(|e| ApiError::field("prompt", "invalid_value", format!("--ar {e}"))),
    }
}

fn zoom_ratio(body: &JsonObject) -> Result<f64, ApiError> {
    let bad = || {
        ApiError::field(
            "zoom_ratio",
            "invalid_value",
            "must be a number from 1 to 2",
        )
    };
    let z = match body.0.get("zoom_ratio") {
        None | Some(Value::Null) => {
            return Err(ApiError::field(
                "zoom_ratio",
                "missing_field",
                "is required",
            ))
        }
        Some(Value::Number(n)) => n.as_f64().ok_or_else(bad)?,
        // Some clients send numbers as strings, as they do `index`.
        Some(Value::String(s)) => s.trim().parse::<f64>().map_err(|_| bad())?,
        Some(_) => {
            return Err(ApiError::field(
                "zoom_ratio",
                "invalid_type",
                "must be a number",
            ))
        }
    };
    if (1.0..=2.0).contains(&z) {
        Ok(z)
    } else {
        Err(bad())
    }
}

/// The seed: the body's `seed` (an easel extension), else a `--seed N` in the prompt, as
/// Midjourney prompts give it; `None` for a fresh random one.
fn seed(body: &JsonObject, prompt: Option<&Prompt>) -> Result<Option<u32>, ApiError> {
    let rule = "must be an integer from 0 to 4294967295";
    match body.0.get("seed") {
        None | Some(Value::Null) => {}
        Some(Value::Number(n)) => {
            return n
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| ApiError::field("seed", "invalid_value", rule))
        }
        Some(_) => return Err(ApiError::field("seed", "invalid_type", rule)),
    }
    match prompt.and_then(|p| p.parameter(&["seed", "sameseed"])) {
        None => Ok(None),
        Some(value) => value
            .parse::<u32>()
            .map(Some)
            .map_err(|_| ApiError::field("prompt", "invalid_value", format!("--seed {rule}"))),
    }
}

fn webhook_secret(body: &JsonObject) -> Result<Option<String>, ApiError> {
    let Some(secret) = body.opt_str("webhook_secret")?.filter(|s| !s.is_empty()) else {
        return Ok(None);
    };
    if secret.chars().count() > WEBHOOK_SECRET_MAX_CHARS {
        return Err(ApiError::field(
            "webhook_secret",
            "invalid_value",
            format!("must be at most {WEBHOOK_SECRET_MAX_CHARS} characters"),
        ));
    }
    // It travels back as an HTTP header value.
    if secret.chars().any(|c| c.is_control() || !c.is_ascii()) {
        return Err(ApiError::field(
            "webhook_secret",
            "invalid_value",
            "must be printable ASCII",
        ));
    }
    Ok(Some(secret.to_string()))
}

/// An input image's URL, checked without network access: one of easel's own image URLs, or one
/// the input fetch policy allows.
fn check_url(tasks: &Tasks, field: &str, raw: &str) -> Result<String, ApiError> {
    if tasks.blobs.key_of_url(raw).is_some() {
        return Ok(raw.to_string());
    }
    tasks
        .fetcher
        .validate(raw)
        .map(|url| url.to_string())
        .map_err(|e| ApiError::field(field, "invalid_value", e))
}

fn image_url(
    tasks: &Tasks,
    body: &JsonObject,
    field: &str,
    required: bool,
) -> Result<Option<String>, ApiError> {
    let raw = if required {
        Some(body.req_str(field)?)
    } else {
        body.opt_str(field)?.filter(|s| !s.is_empty())
    };
    raw.map(|raw| check_url(tasks, field, raw)).transpose()
}

/// `mask`: a `data:image/png;base64,` URL of a PNG that marks at least one pixel to redraw.
/// The base64 and the image's size; its size is checked against the parent's later.
fn mask(body: &JsonObject) -> Result<(String, u32, u32), ApiError> {
    let raw = body.req_str("mask")?;
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
    let image = decode_png(&png).map_err(bad)?;
    let redrawn = image
        .data
        .chunks_exact(4)
        .any(|px| mask_redraws([px[0], px[1], px[2], px[3]]));
    if !redrawn {
        return Err(bad(
            "marks no pixel to redraw (opaque and light: alpha >= 128, luminance >= 128)".into(),
        ));
    }
    Ok((
        base64::engine::general_purpose::STANDARD.encode(&png),
        image.width,
        image.height,
    ))
}
