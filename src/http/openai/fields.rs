//! The fields OpenAI's image routes share, read from a JSON body or a multipart form (whose
//! values are all text), each refused by name (`param`) when its type or range is wrong. Fields
//! easel does not know are ignored, as OpenAI's own API does for forward compatibility.

use serde_json::{json, Map, Value};

use super::error::{field, OpenAiError};
use super::run::{task_count, ResponseFormat, Shape};
use crate::images::convert::Format;
use crate::tasks::Tasks;

/// The most images one call may ask for (`n`), as OpenAI allows.
pub const N_MAX: u32 = 10;
/// The most partial images a stream may ask for (`partial_images`), as OpenAI allows.
pub const PARTIAL_MAX: u32 = 3;
/// The longest `user` kept in the tasks' metadata.
const USER_MAX_CHARS: usize = 256;

/// The qualities OpenAI's models take; accepted, echoed, and without effect on easel's.
const QUALITIES: &[&str] = &[
    "auto", "low", "medium", "high", "xhigh", "max", "standard", "hd",
];
const BACKGROUNDS: &[&str] = &["auto", "transparent", "opaque"];

/// A request's fields, from JSON (typed) or a form (text).
pub struct Fields {
    pub map: Map<String, Value>,
    pub form: bool,
}

impl Fields {
    fn get(&self, name: &str) -> Option<&Value> {
        self.map.get(name).filter(|v| !v.is_null())
    }

    pub fn string(&self, name: &str) -> Result<Option<&str>, OpenAiError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(field(name, "invalid_type", "must be a string")),
        }
    }

    pub fn required(&self, name: &str) -> Result<&str, OpenAiError> {
        self.string(name)?
            .ok_or_else(|| field(name, "missing_field", "is required"))
    }

    /// One of `allowed`, when given.
    fn choice(&self, name: &str, allowed: &[&str]) -> Result<Option<String>, OpenAiError> {
        match self.string(name)? {
            None => Ok(None),
            Some(v) if allowed.contains(&v) => Ok(Some(v.to_string())),
            Some(v) => Err(field(
                name,
                "invalid_value",
                format!("{v:?} is not one of {}", allowed.join(", ")),
            )),
        }
    }

    /// A whole number from `lo` to `hi`, when given (a form's as text).
    pub fn integer(&self, name: &str, lo: u32, hi: u32) -> Result<Option<u32>, OpenAiError> {
        let range = || field(name, "invalid_value", format!("must be from {lo} to {hi}"));
        let n = match self.get(name) {
            None => return Ok(None),
            Some(Value::Number(n)) => n
                .as_i64()
                .ok_or_else(|| field(name, "invalid_type", "must be an integer"))?,
            Some(Value::String(s)) if self.form => s
                .trim()
                .parse::<i64>()
                .map_err(|_| field(name, "invalid_type", "must be an integer"))?,
            Some(_) => return Err(field(name, "invalid_type", "must be an integer")),
        };
        u32::try_from(n)
            .ok()
            .filter(|n| (lo..=hi).contains(n))
            .map(Some)
            .ok_or_else(range)
    }

    pub fn boolean(&self, name: &str) -> Result<bool, OpenAiError> {
        match self.get(name) {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(Value::String(s)) if self.form && (s == "true" || s == "false") => Ok(s == "true"),
            Some(_) => Err(field(name, "invalid_type", "must be a boolean")),
        }
    }
}

/// What a call asked beyond its images: the answer's shape, the aspect ratio its `size` makes,
/// the model, the caller's `user`, and streaming.
pub struct Common {
    pub shape: Shape,
    /// `W:H` from `size` (`WxH`), None for `auto` or none.
    pub aspect_ratio: Option<String>,
    pub model: Option<String>,
    pub user: Option<String>,
    pub stream: bool,
    pub partial_images: u32,
}

impl Common {
    pub fn read(fields: &Fields, tasks: &Tasks) -> Result<Common, OpenAiError> {
        let n = fields.integer("n", 1, N_MAX)?.unwrap_or(1);
        let aspect_ratio = match fields.string("size")? {
            None | Some("auto") => None,
            Some(size) => Some(aspect(size)?),
        };
        let model = fields.string("model")?.map(str::to_string);
        let known = model
            .as_ref()
            .is_some_and(|m| tasks.pool.catalogue().models.iter().any(|c| &c.name == m));
        // OpenAI's own model names run on easel's default model; any other name is easel's to
        // check (an unknown one is 400 naming `model`).
        let model = model.filter(|m| known || !is_openai_model(m));
        let gpt = fields
            .string("model")?
            .is_some_and(|m| m.starts_with("gpt-image") || m.starts_with("chatgpt-image"));
        let response_format = match fields.choice("response_format", &["url", "b64_json"])? {
            Some(f) if f == "url" => ResponseFormat::Url,
            Some(_) => ResponseFormat::B64Json,
            // OpenAI's GPT image models answer base64 only; easel answers URLs otherwise.
            None if gpt => ResponseFormat::B64Json,
            None => ResponseFormat::Url,
        };
        let output_format = match fields.choice("output_format", &["png", "jpeg", "webp"])? {
            Some(f) if f == "jpeg" => Format::Jpeg,
            Some(f) if f == "webp" => Format::Webp,
            _ => Format::Png,
        };
        let compression = fields.integer("output_compression", 0, 100)?.unwrap_or(100) as u8;
        let quality = fields
            .choice("quality", QUALITIES)?
            .unwrap_or_else(|| "auto".into());
        let background = fields.choice("background", BACKGROUNDS)?;
        let user = fields.string("user")?.map(str::to_string);
        if user
            .as_ref()
            .is_some_and(|u| u.chars().count() > USER_MAX_CHARS)
        {
            return Err(field(
                "user",
                "invalid_value",
                format!("must be at most {USER_MAX_CHARS} characters"),
            ));
        }
        let stream = fields.boolean("stream")?;
        let partial_images = fields
            .integer("partial_images", 0, PARTIAL_MAX)?
            .unwrap_or(0);
        Ok(Common {
            shape: Shape {
                n,
                response_format,
                output_format,
                compression,
                quality,
                background,
            },
            aspect_ratio,
            model,
            user,
            stream,
            partial_images,
        })
    }

    /// The aspect ratio `size` made, for the operations that choose their images' shape (an
    /// inpaint keeps its parent's).
    pub fn aspect_into(&self, body: &mut Map<String, Value>) {
        if let Some(aspect) = &self.aspect_ratio {
            body.insert("aspect_ratio".into(), json!(aspect));
        }
    }

    /// The call's tasks: `body` with the easel fields every task carries (model, the caller's
    /// `user` as metadata), as many as make its `n` images.
    pub fn task_bodies(&self, mut body: Map<String, Value>) -> Vec<Map<String, Value>> {
        if let Some(model) = &self.model {
            body.insert("model".into(), json!(model));
        }
        if let Some(user) = &self.user {
            body.insert("metadata".into(), json!({ "openai_user": user }));
        }
        vec![body; task_count(self.shape.n)]
    }
}

/// Whether `name` is one of OpenAI's image models (or a later one of theirs).
fn is_openai_model(name: &str) -> bool {
    ["dall-e", "gpt-image", "chatgpt-image"]
        .iter()
        .any(|p| name.starts_with(p))
}

/// `WxH` as the aspect ratio `W:H` in lowest terms; easel checks its range (1:4 to 4:1).
fn aspect(size: &str) -> Result<String, OpenAiError> {
    let bad = || {
        field(
            "size",
            "invalid_value",
            format!("{size:?} must be WIDTHxHEIGHT in pixels (1024x1536) or auto"),
        )
    };
    let (w, h) = size.split_once('x').ok_or_else(bad)?;
    let parse = |s: &str| {
        s.parse::<u32>()
            .ok()
            .filter(|n| (1..=100_000).contains(n) && s.bytes().all(|b| b.is_ascii_digit()))
    };
    let (w, h) = (parse(w).ok_or_else(bad)?, parse(h).ok_or_else(bad)?);
    let g = gcd(w, h);
    Ok(format!("{}:{}", w / g, h / g))
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_become_aspect_ratios() {
        assert_eq!(aspect("1024x1024").unwrap(), "1:1");
        assert_eq!(aspect("1536x1024").unwrap(), "3:2");
        assert_eq!(aspect("1792x1024").unwrap(), "7:4");
        for bad in [
            "1024",
            "x1024",
            "0x5",
            "-1x2",
            "1024X1024",
            "10.5x2",
            "+1x1",
        ] {
            assert!(aspect(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn form_values_are_read_as_text_json_values_by_type() {
        let form = Fields {
            map: serde_json::from_value(json!({"n": "3", "stream": "true"})).unwrap(),
            form: true,
        };
        assert_eq!(form.integer("n", 1, 10).unwrap(), Some(3));
        assert!(form.boolean("stream").unwrap());
        let body = Fields {
            map: serde_json::from_value(json!({"n": "3", "m": 11, "f": 1.5})).unwrap(),
            form: false,
        };
        assert!(body.integer("n", 1, 10).is_err());
        assert!(body.integer("m", 1, 10).is_err());
        assert!(body.integer("f", 1, 10).is_err());
        assert_eq!(body.integer("absent", 1, 10).unwrap(), None);
    }
}
