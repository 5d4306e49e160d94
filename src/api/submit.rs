//! Submitting tasks: `POST /api/v1/{operation}` for every operation. One handler reads the
//! operation from the route, checks the body field by field, checks the parent (same account,
//! finished, of a type the operation accepts) and resolves what the worker will need from it,
//! then stores the task durably and answers with its id.

use axum::extract::{MatchedPath, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine;
use serde_json::Value;
use uuid::Uuid;

use super::idempotency::{self, KeyHeader};
use super::json::{task_id, JsonObject};
use super::record::task_record;
use super::{access, wait, ApiError, AppState};
use crate::auth::PresentedKey;
use crate::domain::operation::{
    AltKind, Dimension, ImageInput, PanDirection, StoredImage, VariationOf,
};
use crate::domain::{AspectRatio, OpKind, Operation, ProcessMode, Prompt, Shape};
use crate::generate::ops::{important_words, mask_redraws};
use crate::generate::raster::decode_png;
use crate::generate::Generator;
use crate::net::validate_webhook_url;
use crate::store::{Idempotency, NewTask, Submitted, Task};

/// Most characters of a `webhook_secret`.
pub const WEBHOOK_SECRET_MAX_CHARS: usize = 256;
/// Longest side of an image that the operations working on a parent's pixels accept (and of
/// `upscale-highres`'s input, as the contract says): it bounds their memory.
pub const FOLLOW_UP_MAX_SIDE: u32 = 2048;
/// How many images `blend` takes.
pub const BLEND_INPUTS: std::ops::RangeInclusive<usize> = 2..=5;
/// The route of the operation whose bodies may carry a mask (`mask_body_limit`).
pub const MASK_ROUTE: &str = "/api/v1/inpaint";

/// The answer to a submit.
#[derive(serde::Serialize)]
pub struct Accepted {
    task_id: Uuid,
}

/// `POST /api/v1/{operation}`: validate, resolve the parent, store durably, answer with the id;
/// or, for a request whose `Idempotency-Key` has an answer stored, that answer again; with
/// `Prefer: wait`, answer the task's record once it has ended or the wait is over.
pub async fn submit(
    State(state): State<AppState>,
    path: MatchedPath,
    headers: HeaderMap,
    key: PresentedKey,
    idempotency: KeyHeader,
    body: Result<JsonObject, ApiError>,
) -> Result<Response, ApiError> {
    let kind = path
        .as_str()
        .strip_prefix("/api/v1/")
        .and_then(|name| name.parse::<OpKind>().ok())
        .expect("submit routes are made from the operations' names");
    let wait = match wait::preferred_wait(&headers) {
        Ok(wait) => wait.map(|asked| wait::served(&state, asked)),
        Err(e) => {
            key.confirm(&state).await?;
            return Err(e);
        }
    };
    // Held until the store has answered, and let go on every way out of this function.
    let held = match idempotency {
        KeyHeader::Absent => None,
        KeyHeader::Held(held) => Some(held),
        refused @ (KeyHeader::Invalid(_) | KeyHeader::InUse) => {
            // Only a live key learns what was wrong with its request.
            key.confirm(&state).await?;
            return Err(match refused {
                KeyHeader::Invalid(e) => e,
                _ => ApiError::IdempotencyKeyInUse,
            });
        }
    };
    let keyed = match (&held, &body) {
        (Some(held), Ok(body)) => Some(Idempotency {
            key: held.key().to_string(),
            fingerprint: idempotency::fingerprint(kind, &body.0),
            ttl_ms: state.config.limits.idempotency_ttl.as_millis() as i64,
        }),
        _ => None,
    };
    let answer = submit_keyed(&state, kind, &key, body, keyed).await;
    // The store has answered: a duplicate may come now, and will be replayed. A wait below
    // does not hold the key.
    drop(held);
    let (task_id, replayed) = match answer? {
        Answer::Accepted(task_id) => (task_id, None),
        Answer::Replayed {
            task_id,
            status,
            body,
        } => match (task_id, wait) {
            (Some(task_id), Some(_)) => (task_id, Some(())),
            _ => return Ok(idempotency::replay(status, body)),
        },
    };
    let accepted = || Json(Accepted { task_id }).into_response();
    let Some(secs) = wait else {
        return Ok(accepted());
    };
    // The task is stored: whatever happens to the reads, the caller learns its id.
    let task = match state.store.task_for_key(&key.0, &task_id).await {
        Ok(Some((_, Some(task)))) => task,
        _ => return Ok(accepted()),
    };
    let task = wait::until_ended(&state, &key, &task_id, task, secs).await;
    let mut response = (
        [wait::applied(secs)],
        Json(task_record(
            &task,
            &state.blobs,
            state.config.retention.keep,
        )),
    )
        .into_response();
    if replayed.is_some() {
        // A replay that waits answers the record as a first request would, marked as a replay.
        response.headers_mut().insert(
            idempotency::REPLAYED,
            axum::http::HeaderValue::from_static("true"),
        );
    }
    Ok(response)
}

/// What a submit of `kind` does with its body, for the API and the dashboard's playground
/// alike: validate, resolve the parent, store durably; the new task's id.
pub(crate) async fn submit_operation(
    state: &AppState,
    kind: OpKind,
    key: &PresentedKey,
    body: Result<JsonObject, ApiError>,
) -> Result<Uuid, ApiError> {
    match submit_keyed(state, kind, key, body, None).await? {
        Answer::Accepted(task_id) => Ok(task_id),
        Answer::Replayed { .. } => Err(ApiError::Internal(anyhow::anyhow!(
            "a submit without an idempotency key was answered with a replay"
        ))),
    }
}

/// How a submit was answered.
enum Answer {
    Accepted(Uuid),
    /// The stored first answer to the same request with the same idempotency key.
    Replayed {
        /// The task the first request made.
        task_id: Option<Uuid>,
        status: u16,
        body: String,
    },
}

/// [`submit_operation`], with the request's idempotency key if it has one.
async fn submit_keyed(
    state: &AppState,
    kind: OpKind,
    key: &PresentedKey,
    body: Result<JsonObject, ApiError>,
    idempotency: Option<Idempotency>,
) -> Result<Answer, ApiError> {
    let draft = body.and_then(|body| {
        if !state.pool.supports(kind) {
            return Err(ApiError::BadRequest {
                code: "unsupported_operation",
                msg: format!("{kind}: no configured backend can run this operation"),
            });
        }
        Draft::parse(kind, state, &body)
    });
    let draft = match draft {
        Ok(draft) => draft,
        Err(e) => {
            // Only a live key learns what was wrong with its request.
            key.confirm(state).await?;
            return Err(e);
        }
    };
    let parent = match draft.parent {
        None => None,
        Some((field, id)) => {
            let (live, parent) = state
                .store
                .task_for_key(&key.0, &id)
                .await?
                .ok_or(ApiError::Unauthorized)?;
            key.used(state, &live);
            Some((field, parent.ok_or(ApiError::TaskNotFound)?))
        }
    };
    let mut task = draft.resolve(state, key, parent).await?;
    task.idempotency = idempotency;
    accept(state, key, &task).await
}

/// Store `task` for `key`'s account and answer with its id, or with the stored answer of its
/// idempotency key.
async fn accept(state: &AppState, key: &PresentedKey, task: &NewTask) -> Result<Answer, ApiError> {
    if state.shutdown.is_cancelled() {
        return Err(ApiError::Unavailable {
            msg: "the server is shutting down; try again shortly".into(),
            retry_after_secs: 5,
        });
    }
    let limit = state.config.limits.max_pending_per_account;
    let id = match state.store.submit(task, &key.0, limit).await? {
        Submitted::Queued {
            account_id,
            task_id,
        } => {
            access::note_task(task_id);
            access::note_account(&account_id);
            task_id
        }
        Submitted::KeyNotLive => return Err(ApiError::Unauthorized),
        Submitted::InsufficientCredits => {
            return Err(ApiError::InsufficientCredits {
                msg: format!(
                    "{}: the account's credits do not cover this operation, which costs {}",
                    task.task_type(),
                    task.cost
                ),
            })
        }
        Submitted::QuotaFull => {
            return Err(ApiError::TooManyRequests {
                msg: format!(
                "the account already has {limit} tasks queued or running; wait for some to finish"
            ),
                retry_after_secs: 10,
            })
        }
        Submitted::Replayed {
            task_id,
            status,
            body,
        } => {
            let task_id = Uuid::try_parse(&task_id).ok();
            if let Some(id) = task_id {
                access::note_task(id);
            }
            return Ok(Answer::Replayed {
                task_id,
                status,
                body,
            });
        }
        Submitted::IdempotencyKeyReused => return Err(ApiError::IdempotencyKeyReused),
        Submitted::IdempotencyKeyInUse => return Err(ApiError::IdempotencyKeyInUse),
    };
    // The request's own line ("request done", with the task id) says it was accepted; a second
    // line per submit at `info` cost about as much as the first.
    tracing::debug!(mode = task.process_mode, "task accepted");
    Ok(Answer::Accepted(id))
}

/// `index` as clients send it: an integer or a string, a number 1..=4 or a strength.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Index {
    Image(u8),
    Strong,
    Subtle,
}

/// A submit's body, checked field by field but not yet against its parent.
struct Draft {
    kind: OpKind,
    prompt: Option<Prompt>,
    aspect: Option<AspectRatio>,
    mode: ProcessMode,
    seed: Option<u32>,
    webhook_url: Option<String>,
    webhook_secret: Option<String>,
    /// The parent's field name and id.
    parent: Option<(&'static str, Uuid)>,
    index: Option<Index>,
    alt: Option<AltKind>,
    factor: Option<u8>,
    direction: Option<PanDirection>,
    zoom_ratio: Option<f64>,
    /// The mask's PNG file as base64, and its size.
    mask: Option<(String, u32, u32)>,
    image_url: Option<String>,
    image_urls: Vec<String>,
    dimension: Dimension,
}

impl Draft {
    fn parse(kind: OpKind, state: &AppState, body: &JsonObject) -> Result<Draft, ApiError> {
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
                d.image_url = image_url(state, body, "image_url", false)?;
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
                    d.image_urls.push(check_url(state, &field, raw)?);
                }
                d.dimension = parse_field(body, "dimension", false)?.unwrap_or(Dimension::Square);
            }
            OpKind::Describe => d.image_url = image_url(state, body, "image_url", true)?,
            OpKind::Seed => d.parent = parent("task_id")?,
            OpKind::Faceswap => {
                image_url(state, body, "target_image_url", true)?;
                image_url(state, body, "swap_image_url", true)?;
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
                validate_webhook_url(raw, &state.destinations)
                    .map_err(|e| ApiError::field("webhook_url", "invalid_value", e))?
                    .to_string(),
            ),
        };
        d.webhook_secret = webhook_secret(body)?;
        Ok(d)
    }

    /// The task to store, with its parent checked against the operation's rules and what the
    /// worker needs from it resolved.
    async fn resolve(
        self,
        state: &AppState,
        key: &PresentedKey,
        parent: Option<(&'static str, Task)>,
    ) -> Result<NewTask, ApiError> {
        let kind = self.kind;
        let mut prompt = self.prompt.as_ref().map(|p| p.as_str().to_string());
        let mut aspect = self.aspect.map(|a| a.to_string());
        let mut seed = self.seed.map(i64::from);
        let mut parent_seq = None;
        let operation = match &parent {
            None => match kind {
                OpKind::Imagine => Operation::Imagine,
                OpKind::Shorten => Operation::Shorten,
                OpKind::Blend => {
                    aspect = Some(self.dimension.aspect_ratio().to_string());
                    let mut inputs = Vec::with_capacity(self.image_urls.len());
                    for url in &self.image_urls {
                        inputs.push(input_of(state, url));
                    }
                    Operation::Blend {
                        dimension: self.dimension,
                        input_image_urls: self.image_urls.clone(),
                        inputs,
                    }
                }
                OpKind::Describe => {
                    let url = self.image_url.clone().expect("describe requires image_url");
                    let input = input_of(state, &url);
                    let scene_words = match &input {
                        ImageInput::Stored(image) => scene_words(state, key, &image.key).await?,
                        ImageInput::Url { .. } => None,
                    };
                    Operation::Describe {
                        image_url: url,
                        input,
                        scene_words,
                    }
                }
                OpKind::UpscaleHighres => {
                    let url = self.image_url.clone().expect("checked in parse");
                    Operation::UpscaleHighres {
                        factor: self.factor.expect("checked in parse"),
                        index: None,
                        source: input_of(state, &url),
                        image_url: Some(url),
                    }
                }
                _ => unreachable!("every other operation has a parent"),
            },
            Some((field, p)) => {
                let field = *field;
                let parent_kind = p.kind();
                let shape = parent_kind.map(OpKind::shape);
                if !p.is_finished() {
                    return Err(invalid_parent(
                        field,
                        format!("the task is {}, not finished", p.status),
                    ));
                }
                parent_seq = Some(p.seq);
                prompt = prompt.or_else(|| Some(p.prompt.clone()));
                aspect = aspect.or_else(|| Some(p.aspect_ratio.clone()));
                let need = |ok: bool, what: &str| {
                    if ok {
                        Ok(())
                    } else {
                        Err(invalid_parent(field, format!("must be {what}")))
                    }
                };
                let grid =
                    "a grid task (imagine, reroll, variations, pan, outpaint, inpaint or blend)";
                let upscale = "an upscale task (upscale-1x, upscale-alt or upscale-highres)";
                match kind {
                    OpKind::Upscale1x => {
                        need(shape == Some(Shape::Grid), grid)?;
                        let Some(Index::Image(i)) = self.index else {
                            unreachable!("checked in parse")
                        };
                        Operation::Upscale1x {
                            index: i,
                            source: source(state, field, p, Some(i), None).await?,
                        }
                    }
                    OpKind::UpscaleAlt => {
                        need(parent_kind == Some(OpKind::Upscale1x), "an upscale-1x task")?;
                        Operation::UpscaleAlt {
                            kind: self.alt.expect("checked in parse"),
                            source: source(state, field, p, None, None).await?,
                        }
                    }
                    OpKind::UpscaleHighres => {
                        let index = match (shape, self.index) {
                            (Some(Shape::Grid), Some(Index::Image(i))) => Some(i),
                            (Some(Shape::Grid), None) => {
                                return Err(ApiError::field(
                                    "index",
                                    "missing_field",
                                    "is required when the parent is a grid task",
                                ))
                            }
                            (Some(Shape::Single), _) => None,
                            _ => return Err(invalid_parent(field, "must be an image task")),
                        };
                        let image =
                            source(state, field, p, index, Some(FOLLOW_UP_MAX_SIDE)).await?;
                        Operation::UpscaleHighres {
                            factor: self.factor.expect("checked in parse"),
                            index,
                            image_url: None,
                            source: ImageInput::Stored(image),
                        }
                    }
                    OpKind::Variations => {
                        let upscaled = parent_kind.is_some_and(OpKind::is_upscale);
                        need(
                            shape == Some(Shape::Grid) || upscaled,
                            "a grid or upscale task",
                        )?;
                        let (of, index) = match (upscaled, self.index.expect("required")) {
                            (false, Index::Image(i)) => (VariationOf::Index(i), Some(i)),
                            (true, Index::Strong) => (VariationOf::Strong, None),
                            (true, Index::Subtle) => (VariationOf::Subtle, None),
                            (false, _) => {
                                return Err(ApiError::field(
                                    "index",
                                    "invalid_value",
                                    "must be 1 to 4 when the parent is a grid task",
                                ))
                            }
                            (true, Index::Image(_)) => {
                                return Err(ApiError::field(
                                    "index",
                                    "invalid_value",
                                    "must be \"strong\" or \"subtle\" when the parent is an \
                                     upscale task",
                                ))
                            }
                        };
                        Operation::Variations {
                            of,
                            source: source(state, field, p, index, Some(FOLLOW_UP_MAX_SIDE))
                                .await?,
                        }
                    }
                    OpKind::Reroll => {
                        need(shape == Some(Shape::Grid), grid)?;
                        Operation::Reroll
                    }
                    OpKind::Pan | OpKind::Outpaint | OpKind::Inpaint => {
                        need(parent_kind.is_some_and(OpKind::is_upscale), upscale)?;
                        let image = source(state, field, p, None, Some(FOLLOW_UP_MAX_SIDE)).await?;
                        match kind {
                            OpKind::Pan => Operation::Pan {
                                direction: self.direction.expect("required"),
                                source: image,
                            },
                            OpKind::Outpaint => Operation::Outpaint {
                                zoom_ratio: self.zoom_ratio.expect("required"),
                                source: image,
                            },
                            _ => {
                                let (png, w, h) = self.mask.clone().expect("required");
                                if (w, h) != (image.width, image.height) {
                                    return Err(ApiError::field(
                                        "mask",
                                        "invalid_value",
                                        format!(
                                            "is {w}x{h}; it must be the parent image's size, \
                                             {}x{}",
                                            image.width, image.height
                                        ),
                                    ));
                                }
                                Operation::Inpaint {
                                    source: image,
                                    mask: png,
                                }
                            }
                        }
                    }
                    OpKind::Seed => {
                        need(
                            matches!(shape, Some(Shape::Grid | Shape::Single)),
                            "an image task",
                        )?;
                        seed = Some(p.seed);
                        Operation::Seed
                    }
                    _ => unreachable!("no other operation has a parent"),
                }
            }
        };
        let seed = seed.unwrap_or_else(|| i64::from(rand::random::<u32>()));
        Ok(NewTask {
            operation,
            prompt: prompt.unwrap_or_default(),
            aspect_ratio: aspect.unwrap_or_else(|| AspectRatio::SQUARE.to_string()),
            process_mode: self.mode.as_str(),
            priority: self.mode.priority(),
            seed,
            parent_seq,
            webhook_url: self.webhook_url,
            webhook_secret: self.webhook_secret,
            cost: state.config.cost(kind),
            idempotency: None,
        })
    }
}

fn invalid_parent(field: &str, problem: impl std::fmt::Display) -> ApiError {
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
fn check_url(state: &AppState, field: &str, raw: &str) -> Result<String, ApiError> {
    if state.blobs.key_of_url(raw).is_some() {
        return Ok(raw.to_string());
    }
    state
        .fetcher
        .validate(raw)
        .map(|url| url.to_string())
        .map_err(|e| ApiError::field(field, "invalid_value", e))
}

fn image_url(
    state: &AppState,
    body: &JsonObject,
    field: &str,
    required: bool,
) -> Result<Option<String>, ApiError> {
    let raw = if required {
        Some(body.req_str(field)?)
    } else {
        body.opt_str(field)?.filter(|s| !s.is_empty())
    };
    raw.map(|raw| check_url(state, field, raw)).transpose()
}

/// Where an input comes from: easel's own storage for its own URLs (size unknown until read),
/// else the caller's URL.
fn input_of(state: &AppState, url: &str) -> ImageInput {
    match state.blobs.key_of_url(url) {
        Some(key) => ImageInput::Stored(StoredImage {
            key,
            width: 0,
            height: 0,
        }),
        None => ImageInput::Url {
            url: url.to_string(),
        },
    }
}

/// The important words of the prompt that made one of the caller's own easel images, when the
/// image is theirs: describe leads with them. Another account's image is described from its
/// pixels alone, so that describe never reveals someone else's prompt.
async fn scene_words(
    state: &AppState,
    key: &PresentedKey,
    blob_key: &str,
) -> Result<Option<Vec<String>>, ApiError> {
    let Some(task) = blob_key
        .split('/')
        .next()
        .and_then(|id| Uuid::try_parse(id).ok())
    else {
        return Ok(None);
    };
    let found = state.store.task_for_key(&key.0, &task).await?;
    let (_, task) = found.ok_or(ApiError::Unauthorized)?;
    Ok(task
        .filter(|t| !t.prompt.is_empty())
        .map(|t| important_words(&t.prompt)))
}

/// The image of `parent` an operation reads (image `index` of a grid, or a single's image), with
/// its size; refused when its long side is over `max_side`, or when retention has removed it.
async fn source(
    state: &AppState,
    field: &str,
    parent: &Task,
    index: Option<u8>,
    max_side: Option<u32>,
) -> Result<StoredImage, ApiError> {
    if parent.data_removed() {
        return Err(ApiError::field(
            field,
            "data_removed",
            "the task's images were removed (retention)",
        ));
    }
    let mut image = parent
        .output
        .as_ref()
        .and_then(|out| out.image(index))
        .ok_or_else(|| invalid_parent(field, "has no such image"))?;
    if image.width == 0 || image.height == 0 {
        // Stored before sizes were recorded: the PNG header says.
        (image.width, image.height) = stored_size(state, &image.key).await?;
    }
    if let Some(max) = max_side {
        if image.width.max(image.height) > max {
            return Err(invalid_parent(
                field,
                format!(
                    "its image is {}x{}; this operation takes images of at most {max} px on the \
                     long side",
                    image.width, image.height
                ),
            ));
        }
    }
    Ok(image)
}

/// The size of a stored PNG, from its header.
async fn stored_size(state: &AppState, key: &str) -> Result<(u32, u32), ApiError> {
    let bytes = state
        .blobs
        .get(key)
        .await
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("reading {key}: {e}")))?
        .ok_or_else(|| invalid_parent("parent_task_id", "its images are no longer stored"))?;
    let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
    let reader = decoder
        .read_info()
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("reading {key}: {e}")))?;
    let info = reader.info();
    Ok((info.width, info.height))
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
