//! What a caller asked for beyond the operation itself: the settings and parameters that shape
//! the generation and the caller's own `metadata`. Stored as one JSON value in the task's
//! `extras` column (NULL when the caller asked for nothing beyond the operation), so that a new
//! kind of request adds a field here and no column to either store.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

use super::image_prompts::ImagePrompt;
use super::operation::ImageInput;
use super::parameters::Parameters;
use super::settings::Settings;
use super::webhook_events::WebhookEvents;

/// One reference image: the parameter it came from (`sref`, `cref`, `oref`), the URL the record
/// shows and where the worker reads it from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reference {
    pub param: String,
    pub url: String,
    pub input: ImageInput,
}

/// Most bytes of a task's `metadata`, serialized.
pub const METADATA_MAX_BYTES: usize = 4096;

/// The caller's additions to a task, as stored and as the worker reads them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Extras {
    /// The prompt's Midjourney parameters.
    #[serde(default, skip_serializing_if = "Parameters::is_empty")]
    pub parameters: Parameters,
    /// The model and the values its backend is sent.
    #[serde(default, skip_serializing_if = "Settings::is_empty")]
    pub settings: Settings,
    /// The caller's own object, kept and echoed unchanged; easel never reads it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Metadata>,
    /// Imagine's image prompts, in the prompt's order: inputs the worker reads after the
    /// operation's own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_prompts: Vec<ImagePrompt>,
    /// The prompt's reference images (`--sref`, `--cref`, `--oref` URLs), in the parameters'
    /// order: inputs the worker reads after the image prompts, for the backends that take them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub references: Vec<Reference>,
    /// The deliveries the caller asked for; None is the default (every final event).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_events: Option<WebhookEvents>,
}

impl Extras {
    /// The stored form: None when there is nothing beyond the operation.
    pub fn to_column(&self) -> Option<String> {
        (self != &Extras::default()).then(|| serde_json::to_string(self).expect("extras serialize"))
    }

    /// Read the stored form back; a value this version cannot read (a newer version's) is left
    /// out rather than failing the task's record.
    pub fn from_column(stored: Option<&str>) -> Extras {
        stored
            .and_then(|json| {
                serde_json::from_str(json)
                    .inspect_err(|e| tracing::warn!(error = %e, "unreadable task extras"))
                    .ok()
            })
            .unwrap_or_default()
    }
}

/// `metadata`: a JSON object of at most [`METADATA_MAX_BYTES`] serialized, in the caller's key
/// order. Kept as its compact JSON text, serialized once at submit: the record, the stored
/// column and every payload copy those bytes rather than escaping its strings again.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Metadata(Box<RawValue>);

impl Metadata {
    /// The caller's value, or the rule it breaks.
    pub fn parse(value: Value) -> Result<Metadata, String> {
        let Value::Object(map) = value else {
            return Err("must be a JSON object".into());
        };
        let raw = serde_json::value::to_raw_value(&map).map_err(|e| e.to_string())?;
        let size = raw.get().len();
        if size > METADATA_MAX_BYTES {
            return Err(format!(
                "must be at most {METADATA_MAX_BYTES} bytes as JSON (got {size})"
            ));
        }
        Ok(Metadata(raw))
    }

    /// Its compact JSON text.
    pub fn as_json(&self) -> &str {
        self.0.get()
    }
}

impl PartialEq for Metadata {
    fn eq(&self, other: &Metadata) -> bool {
        self.as_json() == other.as_json()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nothing_asked_is_stored_as_null_and_what_is_asked_round_trips_in_order() {
        assert_eq!(Extras::default().to_column(), None);
        let metadata = Metadata::parse(json!({"z": 1, "a": {"b": [true, null]}})).unwrap();
        let extras = Extras {
            metadata: Some(metadata),
            ..Extras::default()
        };
        let stored = extras.to_column().unwrap();
        assert_eq!(stored, r#"{"metadata":{"z":1,"a":{"b":[true,null]}}}"#);
        assert_eq!(Extras::from_column(Some(&stored)), extras);
        assert_eq!(Extras::from_column(Some("{not json")), Extras::default());
    }

    #[test]
    fn metadata_is_an_object_of_at_most_four_kib() {
        assert_eq!(
            Metadata::parse(json!([1])).unwrap_err(),
            "must be a JSON object"
        );
        let fits = json!({"k": "x".repeat(METADATA_MAX_BYTES - 8)});
        assert_eq!(serde_json::to_vec(&fits).unwrap().len(), METADATA_MAX_BYTES);
        assert!(Metadata::parse(fits).is_ok());
        let over = json!({"k": "x".repeat(METADATA_MAX_BYTES - 7)});
        assert!(Metadata::parse(over)
            .unwrap_err()
            .starts_with("must be at most 4096 bytes"));
    }
}
