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
use uuid::Uuid;

use crate::domain::operation::{AltKind, Dimension, PanDirection};
use crate::domain::{AspectRatio, Metadata, ProcessMode, WebhookEvents};
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

/// The model and generation settings, on the operations that make images.
#[derive(Deserialize)]
pub struct Generation {
    #[serde(default)]
    pub model: Option<Text>,
    #[serde(default)]
    pub negative_prompt: Option<Text>,
    #[serde(default)]
    pub steps: Option<Steps>,
    #[serde(default)]
    pub cfg_scale: Option<CfgScale>,
    #[serde(default)]
    pub sampler: Option<Text>,
}

/// What every operation may carry besides its own fields. Absent and null are the same; empty
/// strings count as absent where `draft` says so.
#[derive(Deserialize)]
pub struct Delivery {
    #[serde(default)]
    pub webhook_url: Option<Text>,
    #[serde(default)]
    pub webhook_secret: Option<Text>,
    #[serde(default)]
    pub seed: Option<Seed>,
    #[serde(default)]
    pub metadata: Option<MetadataField>,
    #[serde(default)]
    pub webhook_events: Option<WebhookEventsField>,
}

/// `process_mode`, on the operations that make images.
#[derive(Deserialize)]
pub struct Mode {
    #[serde(default)]
    pub process_mode: Option<Choice<ProcessMode>>,
}

/// `imagine` and `shorten`: a prompt.
#[derive(Deserialize)]
pub struct Prompted {
    pub prompt: Text,
}

/// The prompt of a follow-up, which may change its parent's.
#[derive(Deserialize)]
pub struct Reprompt {
    #[serde(default)]
    pub prompt: Option<Text>,
}

/// `aspect_ratio`, on the operations that may change the shape of their images.
#[derive(Deserialize)]
pub struct Aspect {
    #[serde(default)]
    pub aspect_ratio: Option<Choice<AspectRatio>>,
}

/// A follow-up's parent, where it takes nothing else of its own (reroll).
#[derive(Deserialize)]
pub struct Parent {
    pub parent_task_id: TaskId,
}

#[derive(Deserialize)]
pub struct Upscale1x {
    pub parent_task_id: TaskId,
    pub index: ImageIndex,
}

#[derive(Deserialize)]
pub struct UpscaleAlt {
    pub parent_task_id: TaskId,
    #[serde(rename = "type")]
    pub kind: Choice<AltKind>,
}

#[derive(Deserialize)]
pub struct UpscaleHighres {
    #[serde(rename = "type")]
    pub factor: Factor,
    #[serde(default)]
    pub image_url: Option<Text>,
    #[serde(default)]
    pub parent_task_id: Option<Text>,
}

#[derive(Deserialize)]
pub struct Variations {
    pub parent_task_id: TaskId,
    pub index: AnyIndex,
}

/// `index` where it is optional (upscale-highres of a grid's image).
#[derive(Deserialize)]
pub struct OptionalIndex {
    #[serde(default)]
    pub index: Option<ImageIndex>,
}

#[derive(Deserialize)]
pub struct Pan {
    pub parent_task_id: TaskId,
    pub direction: Choice<PanDirection>,
}

#[derive(Deserialize)]
pub struct Outpaint {
    pub parent_task_id: TaskId,
    pub zoom_ratio: ZoomRatio,
}

#[derive(Deserialize)]
pub struct Inpaint {
    pub parent_task_id: TaskId,
    pub mask: Text,
}

#[derive(Deserialize)]
pub struct Blend {
    pub image_urls: Texts,
    #[serde(default)]
    pub dimension: Option<Choice<Dimension>>,
}

#[derive(Deserialize)]
pub struct Describe {
    pub image_url: Text,
}

#[derive(Deserialize)]
pub struct SeedOf {
    pub task_id: TaskId,
}

#[derive(Deserialize)]
pub struct Faceswap {
    pub target_image_url: Text,
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
