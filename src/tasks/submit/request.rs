//! The body of each operation as a typed struct, deserialized with serde through
//! `serde_path_to_error`, so that a bad field is named by its path (`image_urls[2]`) and refused
//! with the contract's code: `missing_field` (absent, or null where a value is required),
//! `invalid_type` (a JSON type the field never takes) or `invalid_value` (the right type, out of
//! the field's rules). Fields the operation does not take are ignored, as clients send extras.
//!
//! What depends on more than one field (a `--ar` in the prompt, `parent_task_id` or `image_url`)
//! is checked after, in `draft`.

use std::fmt::Display;
use std::str::FromStr;

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::domain::operation::{AltKind, Dimension, PanDirection};
use crate::domain::{AspectRatio, Metadata, ProcessMode, WebhookEvent, WebhookEvents};
use crate::refusal::ApiError;

/// A field's refusal before its name is known: the contract's code and the rule broken.
#[derive(Debug)]
pub struct Refusal {
    code: &'static str,
    rule: String,
}

impl Refusal {
    fn new(code: &'static str, rule: impl Into<String>) -> Refusal {
        Refusal {
            code,
            rule: rule.into(),
        }
    }
}

/// Carried through serde's error as text; [`CODE_MARK`] keeps it apart from serde's own
/// messages.
impl Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{CODE_MARK}{}{CODE_MARK}{}", self.code, self.rule)
    }
}

const CODE_MARK: char = '\u{1f}';

/// `T` from the body, or the first refusal with its field named.
pub fn fields<T: DeserializeOwned>(body: &Map<String, Value>) -> Result<T, ApiError> {
    // A borrowed map deserializes without copying the body; `T`'s fields copy what they keep.
    // Tracking the path costs a submit more than the rest of its parse, and only a refusal
    // needs it: a body that fails is deserialized again, with the path, to name its field.
    if let Ok(fields) = T::deserialize(MapRef(body)) {
        return Ok(fields);
    }
    serde_path_to_error::deserialize(MapRef(body)).map_err(|e| {
        let field = e.path().to_string();
        let message = e.into_inner().to_string();
        if let Some(rest) = message.strip_prefix(CODE_MARK) {
            let (code, rule) = rest
                .split_once(CODE_MARK)
                .unwrap_or(("invalid_value", rest));
            let code = CODES
                .iter()
                .find(|c| **c == code)
                .unwrap_or(&"invalid_value");
            return ApiError::field(&field, code, rule);
        }
        // serde's own words for a required field that is absent: "missing field `name`".
        if let Some(name) = message
            .strip_prefix("missing field `")
            .and_then(|m| m.strip_suffix('`'))
        {
            return ApiError::field(name, "missing_field", "is required");
        }
        ApiError::field(&field, "invalid_value", message)
    })
}

const CODES: [&str; 3] = ["missing_field", "invalid_type", "invalid_value"];

/// A body map as a serde deserializer, by reference.
struct MapRef<'a>(&'a Map<String, Value>);

impl<'de> serde::Deserializer<'de> for MapRef<'de> {
    type Error = serde_json::Error;

    fn deserialize_any<V: serde::de::Visitor<'de>>(
        self,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        serde::Deserializer::deserialize_any(
            serde::de::value::MapDeserializer::new(self.0.iter().map(|(k, v)| (k.as_str(), v))),
            visitor,
        )
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map struct enum identifier
        ignored_any
    }
}

/// A value as given, for the field types below to check.
fn given<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
    Value::deserialize(d)
}

macro_rules! field_type {
    ($(#[$doc:meta])* $name:ident($inner:ty), $check:expr) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub struct $name(pub $inner);

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let check: fn(Value) -> Result<$inner, Refusal> = $check;
                check(given(d)?).map($name).map_err(serde::de::Error::custom)
            }
        }
    };
}

fn required(v: &Value) -> Result<(), Refusal> {
    match v {
        Value::Null => Err(Refusal::new("missing_field", "is required")),
        _ => Ok(()),
    }
}

fn string(v: Value) -> Result<String, Refusal> {
    required(&v)?;
    match v {
        Value::String(s) => Ok(s),
        _ => Err(Refusal::new("invalid_type", "must be a string")),
    }
}

field_type!(
    /// A string.
    Text(String),
    string
);

field_type!(
    /// A task id: a string holding a UUID.
    TaskId(Uuid),
    |v| {
        let s = string(v)?;
        Uuid::try_parse(&s).map_err(|_| Refusal::new("invalid_value", "must be a UUID"))
    }
);

field_type!(
    /// A list of strings (`image_urls`): each item's refusal names its place.
    Texts(Vec<Value>),
    |v| {
        required(&v)?;
        match v {
            Value::Array(items) => Ok(items),
            _ => Err(Refusal::new("invalid_type", "must be an array")),
        }
    }
);

/// A string that names one of a type's values, parsed with its `FromStr`.
#[derive(Debug)]
pub struct Choice<T>(pub T);

impl<'de, T> Deserialize<'de> for Choice<T>
where
    T: FromStr,
    T::Err: Display,
{
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = string(given(d)?).map_err(serde::de::Error::custom)?;
        s.parse::<T>()
            .map(Choice)
            .map_err(|e| serde::de::Error::custom(Refusal::new("invalid_value", e.to_string())))
    }
}

/// `index` as clients send it: an integer or a string, a number 1..=4 or a strength.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Index {
    Image(u8),
    Strong,
    Subtle,
}

fn index(v: Value, images_only: bool) -> Result<Index, Refusal> {
    let rule = if images_only {
        "must be 1, 2, 3 or 4"
    } else {
        "must be 1, 2, 3 or 4, or \"strong\" or \"subtle\""
    };
    let bad = || Refusal::new("invalid_value", rule);
    required(&v)?;
    let n = match &v {
        Value::Number(n) => n.as_u64().ok_or_else(bad)?,
        Value::String(s) => match (s.as_str(), images_only) {
            ("strong", false) => return Ok(Index::Strong),
            ("subtle", false) => return Ok(Index::Subtle),
            _ => s.parse::<u64>().map_err(|_| bad())?,
        },
        _ => {
            return Err(Refusal::new(
                "invalid_type",
                "must be an integer or a string",
            ))
        }
    };
    match n {
        1..=4 => Ok(Index::Image(n as u8)),
        _ => Err(bad()),
    }
}

field_type!(
    /// `index` of an image of a grid: 1..=4.
    ImageIndex(Index),
    |v| index(v, true)
);

field_type!(
    /// `index` of variations: 1..=4 of a grid, or `"strong"`/`"subtle"` of an upscale.
    AnyIndex(Index),
    |v| index(v, false)
);

field_type!(
    /// `zoom_ratio`: a number from 1 to 2 (some clients send numbers as strings, as they do
    /// `index`).
    ZoomRatio(f64),
    |v| {
        let bad = || Refusal::new("invalid_value", "must be a number from 1 to 2");
        required(&v)?;
        let z = match &v {
            Value::Number(n) => n.as_f64().ok_or_else(bad)?,
            Value::String(s) => s.trim().parse::<f64>().map_err(|_| bad())?,
            _ => return Err(Refusal::new("invalid_type", "must be a number")),
        };
        if (1.0..=2.0).contains(&z) {
            Ok(z)
        } else {
            Err(bad())
        }
    }
);

/// The rule of `seed`, also applied to a `--seed` in the prompt.
pub const SEED_RULE: &str = "must be an integer from 0 to 4294967295";

field_type!(
    /// `seed` (an easel extension): 0 to 2^32 - 1.
    Seed(u32),
    |v| match &v {
        Value::Number(n) => n
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| Refusal::new("invalid_value", SEED_RULE)),
        _ => Err(Refusal::new("invalid_type", SEED_RULE)),
    }
);

field_type!(
    /// `type` of upscale-highres: `"2x"` or `"4x"`, as the factor.
    Factor(u8),
    |v| match string(v)?.as_str() {
        "2x" => Ok(2),
        "4x" => Ok(4),
        _ => Err(Refusal::new("invalid_value", "must be one of \"2x\", \"4x\"")),
    }
);

field_type!(
    /// `metadata`: the caller's own JSON object, kept unread.
    MetadataField(Metadata),
    |v| Metadata::parse(v).map_err(|rule| Refusal::new("invalid_value", rule))
);

field_type!(
    /// `webhook_events`: the deliveries the caller asks for.
    WebhookEventsField(WebhookEvents),
    |v| WebhookEvents::parse(&v).map_err(|(code, rule)| Refusal::new(code, rule))
);

field_type!(
    /// `steps`: an integer, checked against the model's limits once the model is known.
    Steps(i64),
    |v| match &v {
        Value::Number(n) => n
            .as_i64()
            .ok_or_else(|| Refusal::new("invalid_value", "must be a whole number of steps")),
        _ => Err(Refusal::new("invalid_type", "must be an integer")),
    }
);

field_type!(
    /// `cfg_scale`: a number, checked against the model's limits once the model is known.
    CfgScale(f64),
    |v| match &v {
        Value::Number(n) => n
            .as_f64()
            .ok_or_else(|| Refusal::new("invalid_value", "must be a number")),
        _ => Err(Refusal::new("invalid_type", "must be a number")),
    }
);

/// An input image's URL, in the image fields (its schema: every image field takes the same).
pub struct ImageUrl;

impl utoipa::PartialSchema for ImageUrl {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::schema::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .description(Some(
                "A public https URL (the webhook destination policy), or one of easel's own \
                 image URLs, read from its storage. Fetched when the task runs: 30 s, 20 MiB, \
                 25 megapixels, PNG, JPEG, WebP or GIF, at most 3 redirects. Or an upload's \
                 `url` (POST /api/v1/upload; the caller's own, while it is kept), or a \
                 `data:image/png|jpeg|webp|gif;base64,...` URL, checked at submit under the \
                 same limits and kept as an upload (the record shows its easel URL).",
            ))
            .into()
    }
}

impl ToSchema for ImageUrl {}

/// The model and generation settings, on the operations that make images.
#[derive(Deserialize, ToSchema)]
pub struct Generation {
    /// An easel extension: the model to run on (`GET /api/v1/models`). Default: the parent's
    /// model for a follow-up, else the default model. An unknown model, or one the account's
    /// plan may not use, is 400. Null or empty counts as absent.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub model: Option<Text>,
    /// An easel extension: what must not be drawn, at most 4000 characters, no control
    /// characters but newline and tab. Wins over the prompt's `--no`; default: the model's. Null
    /// or empty counts as absent.
    #[serde(default)]
    #[schema(value_type = Option<String>, max_length = 4000)]
    pub negative_prompt: Option<Text>,
    /// An easel extension: sampling steps, within the model's `limits.steps`; default: the
    /// model's.
    #[serde(default)]
    #[schema(value_type = Option<i64>)]
    pub steps: Option<Steps>,
    /// An easel extension: guidance, within the model's `limits.cfg_scale`; default: from the
    /// prompt's `--stylize`, else the model's.
    #[serde(default)]
    #[schema(value_type = Option<f64>)]
    pub cfg_scale: Option<CfgScale>,
    /// An easel extension: a sampler the model's backends know (its `samplers` in
    /// `GET /api/v1/models`); default: the model's. Null or empty counts as absent.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub sampler: Option<Text>,
}

/// What every operation may carry besides its own fields. Absent and null are the same; empty
/// strings count as absent where `draft` says so.
#[derive(Deserialize, ToSchema)]
pub struct Delivery {
    /// Public https URL. Null or an empty string counts as absent.
    #[serde(default)]
    #[schema(value_type = Option<String>, format = "uri", max_length = 2048)]
    pub webhook_url: Option<Text>,
    /// Printable ASCII; sent back as x-webhook-secret. Null or an empty string counts as absent.
    #[serde(default)]
    #[schema(value_type = Option<String>, max_length = 256)]
    pub webhook_secret: Option<Text>,
    /// An easel extension. The same seed and the same request give the same images, byte for
    /// byte. Without it (and without `--seed N` in the body's prompt) the seed is random. Null
    /// counts as absent. A seed task checks it, then ignores it: its seed is its parent's.
    #[serde(default)]
    #[schema(value_type = Option<u64>, maximum = 4294967295u64)]
    pub seed: Option<Seed>,
    /// The caller's own JSON object, at most 4096 bytes serialized; stored unread and returned
    /// unchanged in the task's record, every webhook payload and every event. Null counts as
    /// absent.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<MetadataField>,
    /// Which deliveries the task's webhook gets: `progress` (while it runs, at most one a
    /// second, one attempt; see the `progress` callback), `completed` (finished), `failed`,
    /// `canceled`. Default: every final event and no progress. A final event left out gets no
    /// delivery (the record's `webhook.status` says `skipped`). Empty, not a list, a non-string
    /// or an unknown name: 400 naming `webhook_events`. Kept (and shown in the record) without
    /// `webhook_url` too. Null counts as absent.
    #[serde(default)]
    #[schema(value_type = Option<Vec<WebhookEvent>>, min_items = 1)]
    pub webhook_events: Option<WebhookEventsField>,
}

/// `process_mode`, on the operations that make images.
#[derive(Deserialize, ToSchema)]
pub struct Mode {
    /// Null counts as absent.
    #[serde(default)]
    #[schema(value_type = Option<ProcessMode>, default = "fast")]
    pub process_mode: Option<Choice<ProcessMode>>,
}

/// `imagine` and `shorten`: a prompt.
#[derive(Deserialize, ToSchema)]
pub struct Prompted {
    /// Trimmed; no control characters but newline and tab. May end with Midjourney parameters
    /// (`--ar 16:9 --no trees --seed 42 --chaos 30 --tile`, see docs/api.md "Prompt
    /// parameters"): the record shows the text without them as `prompt` and them as
    /// `parameters`; an unknown or out-of-range one is 400 (shorten leaves them out of what it
    /// shortens). `aspect_ratio` and `seed` in the body win over `--ar` and `--seed`. imagine's
    /// may start with image prompts: up to 5 image URLs (https, easel's own, an upload's url, or
    /// a data: URL of an image), which the images start from, weighed by `--iw` (0 to 3, default
    /// 1); the text after them (1 to 4000 characters) is what is drawn, and the record's
    /// `prompt`.
    #[schema(value_type = String, min_length = 1)]
    pub prompt: Text,
}

/// The prompt of a follow-up, which may change its parent's.
#[derive(Deserialize, ToSchema)]
pub struct Reprompt {
    /// Default: the parent's prompt and its parameters (all but `--seed`). A given prompt may
    /// end with parameters, as imagine's. Trimmed; no control characters but newline and tab.
    /// Null, an empty or a blank string counts as absent.
    #[serde(default)]
    #[schema(value_type = Option<String>, max_length = 4000)]
    pub prompt: Option<Text>,
}

/// `aspect_ratio`, on the operations that may change the shape of their images.
#[derive(Deserialize, ToSchema)]
pub struct Aspect {
    /// W:H between 1:4 and 4:1. Default: imagine 1:1, a follow-up its parent's. Null counts as
    /// absent.
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = "^[0-9]{1,5}:[0-9]{1,5}$")]
    pub aspect_ratio: Option<Choice<AspectRatio>>,
}

/// A follow-up's parent, where it takes nothing else of its own (reroll).
#[derive(Deserialize, ToSchema)]
pub struct Parent {
    /// A finished task of the same account. Must be a grid task.
    #[schema(value_type = uuid::Uuid)]
    pub parent_task_id: TaskId,
}

#[derive(Deserialize, ToSchema)]
pub struct Upscale1x {
    /// A finished task of the same account. Must be a grid task. Its images must not have been removed by retention (else 400
    /// data_removed).
    #[schema(value_type = uuid::Uuid)]
    pub parent_task_id: TaskId,
    /// Which image of the grid parent, 1 to 4; an integer or a string.
    pub index: ImageIndex,
}

#[derive(Deserialize, ToSchema)]
pub struct UpscaleAlt {
    /// A finished task of the same account. Must be an upscale-1x task. Its images must not have been removed by retention (else 400
    /// data_removed).
    #[schema(value_type = uuid::Uuid)]
    pub parent_task_id: TaskId,
    #[serde(rename = "type")]
    #[schema(value_type = AltKind)]
    pub kind: Choice<AltKind>,
}

#[derive(Deserialize, ToSchema)]
pub struct UpscaleHighres {
    #[serde(rename = "type")]
    pub factor: Factor,
    /// The image to upscale, instead of a parent.
    #[serde(default)]
    #[schema(value_type = Option<ImageUrl>)]
    pub image_url: Option<Text>,
    /// A finished task of the same account. Must be an image task (grid or single) whose image
    /// is at most 2048 px on the long side. Its images must not have been removed by retention
    /// (else 400 data_removed).
    #[serde(default)]
    #[schema(value_type = Option<uuid::Uuid>)]
    pub parent_task_id: Option<Text>,
}

#[derive(Deserialize, ToSchema)]
pub struct Variations {
    /// A finished task of the same account. Must be a grid or upscale task whose image is at most 2048 px on the long side. Its images must not have been removed by retention (else 400
    /// data_removed).
    #[schema(value_type = uuid::Uuid)]
    pub parent_task_id: TaskId,
    /// 1 to 4 (an integer or a string) when the parent is a grid task; "strong" or "subtle"
    /// when it is an upscale task.
    pub index: AnyIndex,
}

/// `index` where it is optional (upscale-highres of a grid's image).
#[derive(Deserialize, ToSchema)]
pub struct OptionalIndex {
    /// Which image of the parent, 1 to 4 (an integer or a string); required when the parent is
    /// a grid task, ignored otherwise.
    #[serde(default)]
    #[schema(value_type = Option<ImageIndex>)]
    pub index: Option<ImageIndex>,
}

#[derive(Deserialize, ToSchema)]
pub struct Pan {
    /// A finished task of the same account. Must be an upscale task whose image is at most 2048 px on the long side. Its images must not have been removed by retention (else 400
    /// data_removed).
    #[schema(value_type = uuid::Uuid)]
    pub parent_task_id: TaskId,
    #[schema(value_type = PanDirection)]
    pub direction: Choice<PanDirection>,
}

#[derive(Deserialize, ToSchema)]
pub struct Outpaint {
    /// A finished task of the same account. Must be an upscale task whose image is at most 2048 px on the long side. Its images must not have been removed by retention (else 400
    /// data_removed).
    #[schema(value_type = uuid::Uuid)]
    pub parent_task_id: TaskId,
    /// How far to zoom out; 1 makes the image square. A numeric string ("1.5") is accepted too.
    #[schema(value_type = f64, minimum = 1, maximum = 2)]
    pub zoom_ratio: ZoomRatio,
}

#[derive(Deserialize, ToSchema)]
pub struct Inpaint {
    /// A finished task of the same account. Must be an upscale task whose image is at most 2048 px on the long side. Its images must not have been removed by retention (else 400
    /// data_removed).
    #[schema(value_type = uuid::Uuid)]
    pub parent_task_id: TaskId,
    /// A PNG as a data URL, the size of the parent's image. A pixel is redrawn when it is
    /// opaque and light (alpha >= 128 and luminance >= 128); at least one must be. Bodies of
    /// inpaint may be up to `mask_body_limit` (8 MiB). Never shown in the record.
    #[schema(value_type = String, pattern = "^data:image/png;base64,")]
    pub mask: Text,
}

#[derive(Deserialize, ToSchema)]
pub struct Blend {
    /// The images to blend.
    #[schema(value_type = Vec<ImageUrl>, min_items = 2, max_items = 5)]
    pub image_urls: Texts,
    /// square 1:1, portrait 2:3, landscape 3:2. Null counts as absent.
    #[serde(default)]
    #[schema(value_type = Option<Dimension>, default = "square")]
    pub dimension: Option<Choice<Dimension>>,
}

#[derive(Deserialize, ToSchema)]
pub struct Describe {
    /// The image to describe.
    #[schema(value_type = ImageUrl)]
    pub image_url: Text,
}

#[derive(Deserialize, ToSchema)]
pub struct SeedOf {
    /// A finished task of the same account. Must be an image task (grid or single).
    #[schema(value_type = uuid::Uuid)]
    pub task_id: TaskId,
}

#[derive(Deserialize, ToSchema)]
pub struct Faceswap {
    /// The image whose face is replaced.
    #[schema(value_type = ImageUrl)]
    pub target_image_url: Text,
    /// The image whose face is used.
    #[schema(value_type = ImageUrl)]
    pub swap_image_url: Text,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::webhook_events::WEBHOOK_EVENTS_RULE;
    use serde_json::json;

    fn refused<T: DeserializeOwned>(body: Value) -> String {
        match fields::<T>(body.as_object().unwrap()) {
            Ok(_) => panic!("accepted {body}"),
            Err(e) => match e {
                ApiError::BadRequest { code, msg } => format!("{code} {msg}"),
                other => panic!("{other:?}"),
            },
        }
    }

    #[test]
    fn every_refusal_names_its_field_code_and_rule() {
        assert_eq!(
            refused::<Upscale1x>(json!({"index": 1})),
            "missing_field parent_task_id: is required"
        );
        assert_eq!(
            refused::<Upscale1x>(json!({"parent_task_id": null, "index": 1})),
            "missing_field parent_task_id: is required"
        );
        assert_eq!(
            refused::<Upscale1x>(json!({"parent_task_id": 7, "index": 1})),
            "invalid_type parent_task_id: must be a string"
        );
        assert_eq!(
            refused::<Upscale1x>(json!({"parent_task_id": "x", "index": 1})),
            "invalid_value parent_task_id: must be a UUID"
        );
        let id = Uuid::new_v4().to_string();
        assert_eq!(
            refused::<Upscale1x>(json!({"parent_task_id": id, "index": "5"})),
            "invalid_value index: must be 1, 2, 3 or 4"
        );
        assert_eq!(
            refused::<Upscale1x>(json!({"parent_task_id": id, "index": [1]})),
            "invalid_type index: must be an integer or a string"
        );
        assert_eq!(
            refused::<Outpaint>(json!({"parent_task_id": id, "zoom_ratio": 2.5})),
            "invalid_value zoom_ratio: must be a number from 1 to 2"
        );
        assert_eq!(
            refused::<Delivery>(json!({"seed": -1})),
            format!("invalid_value seed: {SEED_RULE}")
        );
        assert_eq!(
            refused::<Delivery>(json!({"seed": "1"})),
            format!("invalid_type seed: {SEED_RULE}")
        );
        assert_eq!(
            refused::<Delivery>(json!({"metadata": "x"})),
            "invalid_value metadata: must be a JSON object"
        );
        assert_eq!(
            refused::<Delivery>(json!({"webhook_events": ["progress", "started"]})),
            format!(
                "invalid_value webhook_events: {WEBHOOK_EVENTS_RULE} (unknown event \"started\")"
            )
        );
        assert_eq!(
            refused::<Delivery>(json!({"webhook_events": "failed"})),
            format!("invalid_type webhook_events: {WEBHOOK_EVENTS_RULE}")
        );
        assert_eq!(
            refused::<UpscaleHighres>(json!({"type": "3x"})),
            "invalid_value type: must be one of \"2x\", \"4x\""
        );
    }

    #[test]
    fn fields_the_operation_does_not_take_are_ignored_and_null_is_absent() {
        let id = Uuid::new_v4();
        let v: Variations = fields(
            json!({"parent_task_id": id.to_string(), "index": "strong", "extra": {"a": 1}})
                .as_object()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(v.parent_task_id.0, id);
        assert_eq!(v.index.0, Index::Strong);
        let d: Delivery = fields(json!({"webhook_url": null}).as_object().unwrap()).unwrap();
        assert!(d.webhook_url.is_none() && d.seed.is_none());
    }
}
