//! Midjourney's prompt parameters (`--ar 16:9 --no trees --chaos 30`), as parsed from the end of
//! a prompt: the record shows them as `parameters`, and each generator does with them what its
//! kind can (see docs/api.md, "Prompt parameters"). `known.rs` holds the table of every
//! parameter and reads a prompt in one pass.

use serde::{Deserialize, Serialize};
use utoipa::openapi::schema::{Object, ObjectBuilder, Type};
use utoipa::ToSchema;

use super::image_prompts::is_image_url;

pub mod known;

/// The parameters a prompt gave, each `None` (or false) when absent. Field names are the
/// parameters' long names, as the record shows them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Parameters {
    /// `--ar`/`--aspect W:H`, as `W:H`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, pattern = "^[0-9]{1,5}:[0-9]{1,5}$")]
    pub aspect: Option<String>,
    /// `--no WORDS`: what must not be drawn (the negative prompt where a kind has one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub no: Option<String>,
    /// `--seed N` (`--sameseed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = u64, maximum = 4294967295u64)]
    pub seed: Option<u32>,
    /// `--chaos`/`--c`, 0..=100: how far apart the four images are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, maximum = 100)]
    pub chaos: Option<u32>,
    /// `--stylize`/`--s`, 0..=1000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, maximum = 1000)]
    pub stylize: Option<u32>,
    /// `--quality`/`--q`: 0.25, 0.5, 1 or 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = quality)]
    pub quality: Option<f64>,
    /// `--weird`/`--w`, 0..=3000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, maximum = 3000)]
    pub weird: Option<u32>,
    /// `--tile`: the image repeats seamlessly.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tile: bool,
    /// `--style raw`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, pattern = "^raw$")]
    pub style: Option<String>,
    /// `--v N`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub version: Option<String>,
    /// `--niji N`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, pattern = "^[456]$")]
    pub niji: Option<String>,
    /// `--iw 0..3`: the weight of the image prompts against the text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, minimum = 0, maximum = 3)]
    pub iw: Option<f64>,
    /// `--fast`, `--relax` or `--turbo`: the task's process mode unless the body gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, pattern = "^(fast|relax|turbo)$")]
    pub process_mode: Option<String>,
    /// `--repeat`/`--r N`: N tasks of this prompt (a batch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, minimum = 1, maximum = 40)]
    pub repeat: Option<u32>,
    /// `--stop 10..100`: the image as it was at that share of the steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, minimum = 10, maximum = 100)]
    pub stop: Option<u32>,
    /// `--draft`: half the model's default steps.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub draft: bool,
    /// `--exp 0..100`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, maximum = 100)]
    pub exp: Option<u32>,
    /// `--sref URL...|CODE|random`: style references, image URLs (easel URLs once kept) and
    /// style codes (`random` is recorded as the code picked for it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sref: Vec<String>,
    /// `--sw 0..1000`: the style references' weight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, maximum = 1000)]
    pub sw: Option<u32>,
    /// `--sv 1..6`: the style reference version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, minimum = 1, maximum = 6)]
    pub sv: Option<u32>,
    /// `--cref URL...`: character references.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cref: Vec<String>,
    /// `--cw 0..100`: the character references' weight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, maximum = 100)]
    pub cw: Option<u32>,
    /// `--oref URL`: the omni reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub oref: Option<String>,
    /// `--ow 0..1000`: the omni reference's weight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, maximum = 1000)]
    pub ow: Option<u32>,
    /// `--p [CODE...]`/`--personalize`: personalization, with its profile codes (none: the
    /// default profile).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub personalize: Option<Vec<String>>,
    /// Multi-prompt weights, `text::2 other::-0.5`: each part of the text and its weight, in
    /// order (the text without a `::` weighs 1).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub weights: Vec<Weighted>,
}

/// One part of a multi-prompt and its weight.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Weighted {
    pub text: String,
    pub weight: f64,
}

/// Which reference parameter an image came from.
pub const REFERENCES: [&str; 3] = ["sref", "cref", "oref"];

/// `quality`'s schema, one of [`QUALITIES`]. `schema_with` leaves the field's doc comment out,
/// so the description is said here.
fn quality() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::Number)
        .enum_values(Some(QUALITIES.iter().copied()))
        .description(Some("`--quality`/`--q`: 0.25, 0.5, 1 or 2."))
        .build()
}

impl Parameters {
    pub fn is_empty(&self) -> bool {
        self == &Parameters::default()
    }

    /// The reference images' URLs, each with its parameter's name and place (`--sref[0]`):
    /// what the image-field checks take, in the record's order.
    pub fn references_mut(&mut self) -> Vec<(String, &mut String)> {
        let mut found: Vec<(String, &mut String)> = Vec::new();
        let urls = self.sref.iter_mut().filter(|v| is_image_url(v));
        for (i, url) in urls.enumerate() {
            found.push((format!("--sref[{i}]"), url));
        }
        for (i, url) in self.cref.iter_mut().enumerate() {
            found.push((format!("--cref[{i}]"), url));
        }
        if let Some(url) = self.oref.as_mut() {
            found.push(("--oref".into(), url));
        }
        found
    }

    /// The reference images' URLs with the parameter each came from (`sref`, `cref`, `oref`).
    pub fn references(&self) -> Vec<(&'static str, &str)> {
        let sref = self.sref.iter().filter(|v| is_image_url(v));
        sref.map(|u| (REFERENCES[0], u.as_str()))
            .chain(self.cref.iter().map(|u| (REFERENCES[1], u.as_str())))
            .chain(self.oref.iter().map(|u| (REFERENCES[2], u.as_str())))
            .collect()
    }

    /// The style and personalization codes (`--sref CODE`, `--p CODE`), which pick the
    /// procedural generator's palette and shapes: a hash of them, None without any. A `--p`
    /// without codes counts as the code `p`.
    pub fn style_code(&self) -> Option<u64> {
        let mut codes: Vec<&str> = self
            .sref
            .iter()
            .filter(|v| !is_image_url(v))
            .map(String::as_str)
            .collect();
        match &self.personalize {
            Some(p) if p.is_empty() => codes.push("p"),
            Some(p) => codes.extend(p.iter().map(String::as_str)),
            None => {}
        }
        if codes.is_empty() {
            return None;
        }
        // FNV-1a: the same codes give the same look on every build.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in codes.join(" ").bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        Some(h)
    }

    /// These parameters as a follow-up that reuses its parent's prompt takes them: all but the
    /// seed, since a follow-up draws anew unless it names a seed itself (as reroll always has).
    pub fn inherited(&self) -> Parameters {
        Parameters {
            seed: None,
            ..self.clone()
        }
    }

    /// `--sref random` as the code picked for it by `pick`, as Midjourney records it.
    pub fn pick_random_codes(&mut self, mut pick: impl FnMut() -> u32) {
        for v in self.sref.iter_mut().filter(|v| v.as_str() == "random") {
            *v = pick().to_string();
        }
    }

    /// The prompt as WebUI and ComfyUI read weights, `(text:w)`; `text` unchanged when it has
    /// no `::` weights. Parentheses in the text are escaped so that they stay text.
    pub fn weighted_prompt(&self, text: &str) -> String {
        if self.weights.is_empty() {
            return text.to_string();
        }
        let escape = |t: &str| t.replace('(', "\\(").replace(')', "\\)");
        self.weights
            .iter()
            .map(|w| format!("({}:{})", escape(&w.text), w.weight))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Most `--seed`, as the body's `seed`.
const SEED_RULE: &str = "must be an integer from 0 to 4294967295";
/// The `--v` values Midjourney has had.
const VERSIONS: &[&str] = &[
    "1", "2", "3", "4", "5", "5.0", "5.1", "5.2", "6", "6.0", "6.1", "7",
];
/// The `--niji` values.
const NIJI_VERSIONS: &[&str] = &["4", "5", "6"];
/// The `--quality` values.
const QUALITIES: &[f64] = &[0.25, 0.5, 1.0, 2.0];

/// Where a prompt's parameters begin: the byte offset of its first word that starts with `--`
/// (or the em dash that phones make of it) directly followed by a letter; `None` when it has none.
/// A `--` inside a word ("rock--paper") or before a non-letter ("-- 5") is text.
fn parameters_start(prompt: &str) -> Option<usize> {
    words(prompt)
        .find(|(_, word)| parameter_name(word).is_some())
        .map(|(at, _)| at)
}

/// The words of `prompt` with their byte offsets.
fn words(prompt: &str) -> impl Iterator<Item = (usize, &str)> {
    prompt
        .split_whitespace()
        .map(move |w| (w.as_ptr() as usize - prompt.as_ptr() as usize, w))
}

/// The name of the parameter `word` opens, lowercased, if it opens one.
fn parameter_name(word: &str) -> Option<String> {
    let name = word
        .strip_prefix("--")
        .or_else(|| word.strip_prefix('\u{2014}'))?;
    name.starts_with(|c: char| c.is_ascii_alphabetic())
        .then(|| name.to_lowercase())
}

/// What a prompt asks to draw: its text before its parameters, which come last and say how to
/// draw, not what. For a prompt stored before parameters were parsed apart, as for a new one.
pub fn prompt_text(prompt: &str) -> &str {
    match parameters_start(prompt) {
        Some(at) => prompt[..at].trim_end(),
        None => prompt,
    }
}

/// `value` as a whole number from 0 to `max`: ASCII digits only (no sign, no decimals).
fn whole(value: &str, max: u32) -> Option<u32> {
    if value.is_empty() || value.len() > 10 || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    value
        .parse::<u64>()
        .ok()
        .filter(|n| *n <= u64::from(max))
        .map(|n| n as u32)
}

/// `value` as a plain decimal (`2`, `0.5`, `.25`): digits and at most one point, nothing else
/// (no exponent, sign, `inf` or `NaN`).
fn decimal(value: &str) -> Option<f64> {
    let digits = value.bytes().filter(u8::is_ascii_digit).count();
    let points = value.bytes().filter(|b| *b == b'.').count();
    (digits > 0 && digits <= 8 && points <= 1 && digits + points == value.len())
        .then(|| value.parse::<f64>().ok())
        .flatten()
}

#[cfg(test)]
mod tests;
