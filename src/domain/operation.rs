//! What a task does: its operation, with typed parameters, and the shape of what it produces.
//!
//! An [`Operation`] is stored as JSON beside the task (`params`), so that adding one means a
//! variant here, its validation in the API and its drawing in the generators, and no change to
//! either store's schema. Everything a worker needs from a parent (which of its images, their
//! size) is resolved at submit and kept in the operation: a parent is final, so it cannot change
//! under the task.

use serde::{Deserialize, Serialize};

use super::names::{named_enum, one_of};
use super::AspectRatio;

/// Longest side of an image that the operations working on a parent's pixels accept (and of
/// `upscale-highres`'s input, as the contract says): it bounds their memory.
pub const FOLLOW_UP_MAX_SIDE: u32 = 2048;

named_enum! {
    /// The operations, by their public names (the `task_type` of a record, the path of a submit).
    pub enum OpKind(serialize_all = "kebab-case", parse_err_fn = unknown_kind) {
        Imagine,
        #[strum(serialize = "upscale-1x")]
        Upscale1x,
        UpscaleAlt,
        UpscaleHighres,
        Variations,
        Reroll,
        Pan,
        Outpaint,
        Inpaint,
        Blend,
        Describe,
        Shorten,
        Seed,
        Faceswap,
    }
}

fn unknown_kind(s: &str) -> String {
    format!("unknown task type `{s}`")
}

/// What a finished task holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Four images and their 2x2 grid.
    Grid,
    /// One image.
    Single,
    /// Strings (`content`).
    Text,
    /// A number (`seed`).
    Seed,
}

impl OpKind {
    pub fn shape(self) -> Shape {
        match self {
            OpKind::Imagine
            | OpKind::Variations
            | OpKind::Reroll
            | OpKind::Pan
            | OpKind::Outpaint
            | OpKind::Inpaint
            | OpKind::Blend => Shape::Grid,
            OpKind::Upscale1x | OpKind::UpscaleAlt | OpKind::UpscaleHighres | OpKind::Faceswap => {
                Shape::Single
            }
            OpKind::Describe | OpKind::Shorten => Shape::Text,
            OpKind::Seed => Shape::Seed,
        }
    }

    /// Whether its tasks are single images: the parents upscale-alt, pan, outpaint and inpaint
    /// need.
    pub fn is_upscale(self) -> bool {
        matches!(
            self,
            OpKind::Upscale1x | OpKind::UpscaleAlt | OpKind::UpscaleHighres
        )
    }
}

/// One image a task reads: one of easel's own (a parent's, or an easel URL given by the caller),
/// read from the blob store, or a caller's URL, fetched when the task runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "from", rename_all = "snake_case")]
pub enum ImageInput {
    Stored(StoredImage),
    Url { url: String },
}

/// An image in easel's blob store, with its size when known (images stored before sizes were
/// recorded have 0 x 0).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredImage {
    pub key: String,
    pub width: u32,
    pub height: u32,
}

named_enum! {
    /// `upscale-alt`'s `type`.
    #[derive(Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum AltKind(serialize_all = "snake_case", parse_err_fn = one_of::<AltKind>) {
        Subtle,
        Creative,
    }
}

/// What `variations` varies: an image of a grid parent (1..=4), or an upscale at a strength.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VariationOf {
    Index(u8),
    Strong,
    Subtle,
}

named_enum! {
    /// `pan`'s `direction`.
    #[derive(Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum PanDirection(serialize_all = "snake_case", parse_err_fn = one_of::<PanDirection>) {
        Up,
        Down,
        Left,
        Right,
    }
}

named_enum! {
    /// `blend`'s `dimension`: the aspect ratio of its images.
    #[derive(Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum Dimension(serialize_all = "snake_case", parse_err_fn = one_of::<Dimension>) {
        Square,
        Portrait,
        Landscape,
    }
}

impl Dimension {
    pub fn aspect_ratio(self) -> AspectRatio {
        let (width, height) = match self {
            Dimension::Square => (1, 1),
            Dimension::Portrait => (2, 3),
            Dimension::Landscape => (3, 2),
        };
        AspectRatio { width, height }
    }
}

/// An operation and its parameters, as validated at submit. Fields the caller gave appear in the
/// task's record (see [`Operation::public_fields`]); what was resolved (`source`, `inputs`, the
/// mask) does not.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op")]
pub enum Operation {
    #[serde(rename = "imagine")]
    Imagine,
    #[serde(rename = "reroll")]
    Reroll,
    /// Image `index` (1..=4) of a grid parent, as it is.
    #[serde(rename = "upscale-1x")]
    Upscale1x { index: u8, source: StoredImage },
    /// An `upscale-1x` image at twice its size.
    #[serde(rename = "upscale-alt")]
    UpscaleAlt { kind: AltKind, source: StoredImage },
    /// An image at 2 or 4 times its size: a parent's (`index` for a grid parent) or a caller's.
    #[serde(rename = "upscale-highres")]
    UpscaleHighres {
        factor: u8,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        index: Option<u8>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        image_url: Option<String>,
        source: ImageInput,
    },
    #[serde(rename = "variations")]
    Variations {
        of: VariationOf,
        source: StoredImage,
    },
    #[serde(rename = "pan")]
    Pan {
        direction: PanDirection,
        source: StoredImage,
    },
    #[serde(rename = "outpaint")]
    Outpaint {
        zoom_ratio: f64,
        source: StoredImage,
    },
    /// `mask` is the PNG file (base64), checked at submit to have the source's size.
    #[serde(rename = "inpaint")]
    Inpaint { source: StoredImage, mask: String },
    #[serde(rename = "blend")]
    Blend {
        dimension: Dimension,
        input_image_urls: Vec<String>,
        inputs: Vec<ImageInput>,
    },
    /// `scene_words`: the important words of the prompt that made the image, when it is one of
    /// the caller's own easel images.
    #[serde(rename = "describe")]
    Describe {
        image_url: String,
        input: ImageInput,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        scene_words: Option<Vec<String>>,
    },
    #[serde(rename = "shorten")]
    Shorten,
    /// The parent's seed, read at submit (the task's own `seed` is set to it).
    #[serde(rename = "seed")]
    Seed,
}

impl Operation {
    pub fn kind(&self) -> OpKind {
        match self {
            Operation::Imagine => OpKind::Imagine,
            Operation::Reroll => OpKind::Reroll,
            Operation::Upscale1x { .. } => OpKind::Upscale1x,
            Operation::UpscaleAlt { .. } => OpKind::UpscaleAlt,
            Operation::UpscaleHighres { .. } => OpKind::UpscaleHighres,
            Operation::Variations { .. } => OpKind::Variations,
            Operation::Pan { .. } => OpKind::Pan,
            Operation::Outpaint { .. } => OpKind::Outpaint,
            Operation::Inpaint { .. } => OpKind::Inpaint,
            Operation::Blend { .. } => OpKind::Blend,
            Operation::Describe { .. } => OpKind::Describe,
            Operation::Shorten => OpKind::Shorten,
            Operation::Seed => OpKind::Seed,
        }
    }

    /// The images it reads, in the order generators receive them: the parent's image, or the
    /// caller's inputs.
    pub fn inputs(&self) -> Vec<(String, ImageInput)> {
        let parent = |source: &StoredImage| {
            vec![(
                "parent_task_id".to_string(),
                ImageInput::Stored(source.clone()),
            )]
        };
        match self {
            Operation::Imagine | Operation::Reroll | Operation::Shorten | Operation::Seed => {
                vec![]
            }
            Operation::Upscale1x { source, .. }
            | Operation::UpscaleAlt { source, .. }
            | Operation::Variations { source, .. }
            | Operation::Pan { source, .. }
            | Operation::Outpaint { source, .. }
            | Operation::Inpaint { source, .. } => parent(source),
            Operation::UpscaleHighres {
                source, image_url, ..
            } => {
                let name = if image_url.is_some() {
                    "image_url"
                } else {
                    "parent_task_id"
                };
                vec![(name.to_string(), source.clone())]
            }
            Operation::Blend { inputs, .. } => inputs
                .iter()
                .enumerate()
                .map(|(i, input)| (format!("image_urls[{i}]"), input.clone()))
                .collect(),
            Operation::Describe { input, .. } => vec![("image_url".to_string(), input.clone())],
        }
    }

    /// The stored form, `None` for imagine (whose rows predate operations and carry none).
    pub fn to_params(&self) -> Option<String> {
        match self {
            Operation::Imagine => None,
            op => Some(serde_json::to_string(op).expect("operations serialize")),
        }
    }

    /// Read the stored form back. A row's params are written only by [`Operation::to_params`];
    /// if one cannot be read (a newer version's operation), the error names it.
    pub fn from_params(task_type: &str, params: Option<&str>) -> Result<Operation, String> {
        match params {
            None => match task_type {
                "imagine" => Ok(Operation::Imagine),
                other => Err(format!("task type `{other}` stored without its parameters")),
            },
            Some(json) => serde_json::from_str(json)
                .map_err(|e| format!("parameters of a `{task_type}` task: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::names::assert_names;
    use super::*;

    #[test]
    fn every_operation_round_trips_through_its_stored_form() {
        let stored = StoredImage {
            key: "t/f/0.png".into(),
            width: 1024,
            height: 576,
        };
        let ops = [
            Operation::Imagine,
            Operation::Reroll,
            Operation::Upscale1x {
                index: 3,
                source: stored.clone(),
            },
            Operation::UpscaleAlt {
                kind: AltKind::Creative,
                source: stored.clone(),
            },
            Operation::UpscaleHighres {
                factor: 4,
                index: None,
                image_url: Some("https://example.com/a.png".into()),
                source: ImageInput::Url {
                    url: "https://example.com/a.png".into(),
                },
            },
            Operation::Variations {
                of: VariationOf::Strong,
                source: stored.clone(),
            },
            Operation::Pan {
                direction: PanDirection::Left,
                source: stored.clone(),
            },
            Operation::Outpaint {
                zoom_ratio: 1.5,
                source: stored.clone(),
            },
            Operation::Inpaint {
                source: stored.clone(),
                mask: "iVBORw0KGgo=".into(),
            },
            Operation::Blend {
                dimension: Dimension::Portrait,
                input_image_urls: vec!["https://a/1.png".into(), "https://a/2.png".into()],
                inputs: vec![
                    ImageInput::Stored(stored.clone()),
                    ImageInput::Url {
                        url: "https://a/2.png".into(),
                    },
                ],
            },
            Operation::Describe {
                image_url: "https://a/1.png".into(),
                input: ImageInput::Stored(stored),
                scene_words: Some(vec!["lighthouse".into()]),
            },
            Operation::Shorten,
            Operation::Seed,
        ];
        for op in ops {
            let kind = op.kind();
            let back = Operation::from_params(kind.as_str(), op.to_params().as_deref()).unwrap();
            assert_eq!(back, op, "{kind}");
            assert_eq!(kind.as_str().parse::<OpKind>().unwrap(), kind);
            let public = serde_json::to_string(&op.public_fields()).unwrap();
            assert!(!public.contains("t/f/0.png"), "{kind}: {public}");
            assert!(!public.contains("iVBOR"), "{kind}: {public}");
        }
        assert!(Operation::from_params("upscale-1x", None).is_err());
    }

    #[test]
    fn names_are_the_api_contract() {
        let kinds =
            "imagine upscale-1x upscale-alt upscale-highres variations reroll pan outpaint \
                     inpaint blend describe shorten seed faceswap";
        assert_names::<OpKind>(kinds, "upscale", "unknown task type `upscale`");
        let one_of = "must be one of \"subtle\", \"creative\"";
        assert_names::<AltKind>("subtle creative", "bold", one_of);
        let one_of = "must be one of \"up\", \"down\", \"left\", \"right\"";
        assert_names::<PanDirection>("up down left right", "north", one_of);
        let one_of = "must be one of \"square\", \"portrait\", \"landscape\"";
        assert_names::<Dimension>("square portrait landscape", "wide", one_of);
    }
}
