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
        if !value.is_object() {
            return Err("must be a JSON object".into());
        }
        let mut text = Vec::new();
        write_compact(&mut text, &value);
        let size = text.len();
        if size > METADATA_MAX_BYTES {
            return Err(format!(
                "must be at most {METADATA_MAX_BYTES} bytes as JSON (got {size})"
            ));
        }
        let text = String::from_utf8(text).map_err(|e| e.to_string())?;
        RawValue::from_string(text)
            .map(Metadata)
            .map_err(|e| e.to_string())
    }

    /// Its compact JSON text.
    pub fn as_json(&self) -> &str {
        self.0.get()
    }
}

/// `value` as compact JSON, byte for byte as `serde_json::to_vec` writes it, but with each string
/// that needs no escaping copied whole: serde_json looks every byte of a string up in its table
/// of escapes, which was most of what a submit's 4 KiB of metadata cost its handler.
fn write_compact(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_compact(out, item);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            out.push(b'{');
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_string(out, key);
                out.push(b':');
                write_compact(out, item);
            }
            out.push(b'}');
        }
        scalar => serde_json::to_writer(&mut *out, scalar).expect("a JSON scalar serializes"),
    }
}

fn write_string(out: &mut Vec<u8>, s: &str) {
    // What JSON requires escaped: the quote, the backslash and the control characters. Checked
    // in blocks without an early exit, which the compiler turns into vector instructions.
    let plain = s.as_bytes().chunks(64).all(|block| {
        block
            .iter()
            .fold(true, |ok, &b| ok & (b >= 0x20) & (b != b'"') & (b != b'\\'))
    });
    if plain {
        out.reserve(s.len() + 2);
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        serde_json::to_writer(&mut *out, s).expect("a string serializes");
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
    fn metadata_is_written_as_serde_json_writes_it() {
        let tricky = [
            json!({}),
            json!({"a": []}),
            json!({"quote\"": "back\\slash", "nl": "a\nb\tc\u{1}\u{1f}", "del": "\u{7f}"}),
            json!({"é": "日本語 ✓ 🎨", "n": [0, -1, 1.5, 1e300, -0.0, 18446744073709551615u64]}),
            json!({"deep": {"er": [{"x": [null, true, false, "x".repeat(200)]}]}}),
            json!({"long": format!("{}\"{}", "y".repeat(100), "z".repeat(100))}),
        ];
        for value in tricky {
            let ours = Metadata::parse(value.clone()).unwrap();
            assert_eq!(ours.as_json(), serde_json::to_string(&value).unwrap());
        }
    }

    proptest::proptest! {
        #[test]
        fn any_strings_and_keys_are_written_as_serde_json_writes_them(
            pairs in proptest::collection::vec((".{0,12}", "\\PC{0,80}|[\\x00-\\x7f]{0,80}"), 0..6),
            n in proptest::num::f64::ANY,
        ) {
            let mut map = serde_json::Map::new();
            for (key, text) in &pairs {
                map.insert(key.clone(), json!([text, {"k": text}]));
            }
            map.insert("n".into(), json!(n));
            let value = Value::Object(map);
            let ours = Metadata::parse(value.clone()).unwrap();
            proptest::prop_assert_eq!(ours.as_json(), serde_json::to_string(&value).unwrap());
        }
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
