//! A submit's parent checked against the operation's rules, and what the worker will need from
//! it (the source image, its size, the seed) resolved into the task to store.

use base64::Engine;
use uuid::Uuid;

use super::super::Tasks;
use super::draft::{invalid_parent, Draft, FOLLOW_UP_MAX_SIDE};
use super::generation;
use super::request::Index;
use crate::auth::PresentedKey;
use crate::domain::extras::Reference;
use crate::domain::image_prompts::ImagePrompt;
use crate::domain::operation::{ImageInput, StoredImage, VariationOf};
use crate::domain::{AspectRatio, OpKind, Operation, Parameters, Shape};
use crate::generate::ops::important_words;
use crate::refusal::ApiError;
use crate::store::{NewTask, Task};

impl Draft {
    /// The task to store, with its parent checked against the operation's rules and what the
    /// worker needs from it resolved.
    pub(super) async fn resolve(
        mut self,
        tasks: &Tasks,
        key: &PresentedKey,
        parent: Option<(&'static str, Task)>,
    ) -> Result<NewTask, ApiError> {
        let kind = self.kind;
        let mut prompt = self.prompt.as_ref().map(|p| p.as_str().to_string());
        let mut extras = std::mem::take(&mut self.extras);
        let mut aspect = self.aspect;
        let mut seed = self.seed.map(i64::from);
        let mut parent_seq = None;
        let mut inherited = Vec::new();
        let operation = match &parent {
            None => match kind {
                OpKind::Imagine => Operation::Imagine,
                OpKind::Shorten => Operation::Shorten,
                OpKind::Blend => {
                    aspect = Some(self.dimension.aspect_ratio());
                    let mut inputs = Vec::with_capacity(self.image_urls.len());
                    for url in &self.image_urls {
                        inputs.push(input_of(tasks, url));
                    }
                    Operation::Blend {
                        dimension: self.dimension,
                        input_image_urls: self.image_urls.clone(),
                        inputs,
                    }
                }
                OpKind::Describe => {
                    let url = self.image_url.clone().expect("describe requires image_url");
                    let input = input_of(tasks, &url);
                    let scene_words = match &input {
                        ImageInput::Stored(image) => scene_words(tasks, key, &image.key).await?,
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
                        source: input_of(tasks, &url),
                        image_url: Some(url),
                    }
                }
                _ => unreachable!("every other operation has a parent"),
            },
            Some((field, p)) => {
                let field = *field;
                let parent_kind = Some(p.task_type);
                let shape = parent_kind.map(OpKind::shape);
                if !p.is_finished() {
                    return Err(invalid_parent(
                        field,
                        format!("the task is {}, not finished", p.status),
                    ));
                }
                parent_seq = Some(p.seq);
                if prompt.is_none() {
                    let (text, parameters) = inherited_prompt(p);
                    prompt = Some(text);
                    extras.parameters = parameters;
                }
                aspect = aspect.or(Some(p.aspect_ratio));
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
                            source: source(tasks, field, p, Some(i), None).await?,
                        }
                    }
                    OpKind::UpscaleAlt => {
                        need(parent_kind == Some(OpKind::Upscale1x), "an upscale-1x task")?;
                        Operation::UpscaleAlt {
                            kind: self.alt.expect("checked in parse"),
                            source: source(tasks, field, p, None, None).await?,
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
                            source(tasks, field, p, index, Some(FOLLOW_UP_MAX_SIDE)).await?;
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
                            source: source(tasks, field, p, index, Some(FOLLOW_UP_MAX_SIDE))
                                .await?,
                        }
                    }
                    OpKind::Reroll => {
                        need(shape == Some(Shape::Grid), grid)?;
                        // The same prompt again: its image prompts too.
                        inherited = p.extras.image_prompts.clone();
                        Operation::Reroll
                    }
                    OpKind::Pan | OpKind::Outpaint | OpKind::Inpaint => {
                        need(parent_kind.is_some_and(OpKind::is_upscale), upscale)?;
                        let image = source(tasks, field, p, None, Some(FOLLOW_UP_MAX_SIDE)).await?;
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
                                    mask: base64::engine::general_purpose::STANDARD.encode(png),
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
        let parent_task = parent.as_ref().map(|(_, p)| p);
        extras.settings = match generation::settle(
            tasks,
            key,
            kind,
            self.asked,
            &extras.parameters,
            parent_task,
        )
        .await
        {
            Ok(settings) => settings,
            Err(e) => {
                // Only a live key learns what was wrong with its request.
                key.confirm(&tasks.store).await?;
                return Err(e);
            }
        };
        extras.references = extras
            .parameters
            .references()
            .into_iter()
            .map(|(param, url)| Reference {
                param: param.to_string(),
                url: url.to_string(),
                input: input_of(tasks, url),
            })
            .collect();
        extras.image_prompts = if self.image_prompts.is_empty() {
            inherited
        } else {
            self.image_prompts
                .iter()
                .map(|url| ImagePrompt {
                    url: url.clone(),
                    input: input_of(tasks, url),
                })
                .collect()
        };
        let seed = seed.unwrap_or_else(|| i64::from(rand::random::<u32>()));
        Ok(NewTask {
            operation,
            prompt: prompt.unwrap_or_default(),
            aspect_ratio: aspect.unwrap_or(AspectRatio::SQUARE),
            process_mode: self.mode,
            priority: self.mode.priority(),
            seed,
            parent_seq,
            webhook_url: self.webhook_url,
            webhook_secret: self.webhook_secret,
            cost: tasks.config.cost(kind),
            idempotency: None,
            extras,
        })
    }
}

/// The prompt and parameters a follow-up that gives no prompt of its own takes from its parent.
/// A parent stored before prompts were parsed apart has its parameters in its prompt; they are
/// parsed out here, or the prompt is kept whole when they do not parse.
fn inherited_prompt(parent: &Task) -> (String, Parameters) {
    if !parent.extras.parameters.is_empty() {
        return (parent.prompt.clone(), parent.extras.parameters.inherited());
    }
    match Parameters::parse(&parent.prompt) {
        Ok((text, parameters)) => (text.to_string(), parameters.inherited()),
        Err(_) => (parent.prompt.clone(), Parameters::default()),
    }
}

/// The important words of the prompt that made one of the caller's own easel images, when the
/// image is theirs: describe leads with them. Another account's image is described from its
/// pixels alone, so that describe never reveals someone else's prompt.
async fn scene_words(
    tasks: &Tasks,
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
    let found = tasks.store.task_for_key(&key.0, &task).await?;
    let (_, task) = found.ok_or(ApiError::Unauthorized)?;
    Ok(task
        .filter(|t| !t.prompt.is_empty())
        .map(|t| important_words(&t.prompt)))
}

/// The image of `parent` an operation reads (image `index` of a grid, or a single's image), with
/// its size; refused when its long side is over `max_side`, or when retention has removed it.
async fn source(
    tasks: &Tasks,
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
        (image.width, image.height) = stored_size(tasks, &image.key).await?;
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
async fn stored_size(tasks: &Tasks, key: &str) -> Result<(u32, u32), ApiError> {
    let bytes = tasks
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

/// Where an input comes from: easel's own storage for its own URLs (size unknown until read),
/// else the caller's URL.
fn input_of(tasks: &Tasks, url: &str) -> ImageInput {
    match tasks.blobs.key_of_url(url) {
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
