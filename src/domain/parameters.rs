//! Midjourney's prompt parameters (`--ar 16:9 --no trees --chaos 30`), as parsed from the end of
//! a prompt: the record shows them as `parameters`, and each generator does with them what its
//! kind can (see docs/api.md, "Prompt parameters").

use serde::{Deserialize, Serialize};

/// The parameters a prompt gave, each `None` (or false) when absent. Field names are the
/// parameters' long names, as the record shows them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Parameters {
    /// `--ar`/`--aspect W:H`, as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aspect: Option<String>,
    /// `--no WORDS`: what must not be drawn (the negative prompt where a kind has one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u32>,
    /// `--chaos`/`--c`, 0..=100: how far apart the four images are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chaos: Option<u32>,
    /// `--stylize`/`--s`, 0..=1000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stylize: Option<u32>,
    /// `--quality`/`--q`: 0.25, 0.5, 1 or 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quality: Option<f64>,
    /// `--weird`/`--w`, 0..=3000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weird: Option<u32>,
    /// `--tile`: the image repeats seamlessly.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tile: bool,
    /// `--style raw`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub style: Option<String>,
    /// `--v N`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// `--niji N`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub niji: Option<String>,
    /// `--iw 0..3`: the weight of the image prompts against the text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iw: Option<f64>,
}

impl Parameters {
    pub fn is_empty(&self) -> bool {
        self == &Parameters::default()
    }
}
