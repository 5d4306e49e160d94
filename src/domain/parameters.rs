//! Midjourney's prompt parameters (`--ar 16:9 --no trees --chaos 30`), as parsed from the end of
//! a prompt: the record shows them as `parameters`, and each generator does with them what its
//! kind can (see docs/api.md, "Prompt parameters").

use serde::{Deserialize, Serialize};
use utoipa::openapi::schema::{Object, ObjectBuilder, Type};
use utoipa::ToSchema;

use super::task::AspectRatio;

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
}

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

/// Which field a parameter name (or alias) sets.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Field {
    Aspect,
    No,
    Seed,
    Chaos,
    Stylize,
    Quality,
    Weird,
    Tile,
    Style,
    Version,
    Niji,
    Iw,
}

fn field_of(name: &str) -> Option<Field> {
    Some(match name {
        "ar" | "aspect" => Field::Aspect,
        "no" => Field::No,
        // `--sameseed` was Midjourney's older name for a seed shared by the grid's images.
        "seed" | "sameseed" => Field::Seed,
        "chaos" | "c" => Field::Chaos,
        "stylize" | "s" => Field::Stylize,
        "quality" | "q" => Field::Quality,
        "weird" | "w" => Field::Weird,
        "tile" => Field::Tile,
        "style" => Field::Style,
        "v" | "version" => Field::Version,
        "niji" => Field::Niji,
        "iw" => Field::Iw,
        _ => return None,
    })
}

impl Parameters {
    /// `prompt` split into the text to draw and its parameters, or the rule a parameter breaks
    /// (a phrase without the field's name). The text keeps everything before the first
    /// parameter as it was written (image URLs, `::` weights); the parameters run to the end.
    pub fn parse(prompt: &str) -> Result<(&str, Parameters), String> {
        let Some(start) = parameters_start(prompt) else {
            return Ok((prompt, Parameters::default()));
        };
        let text = prompt[..start].trim_end();
        if text.is_empty() {
            return Err("has only parameters; the words to draw come before them".into());
        }
        // Each parameter with the words up to the next one.
        let mut groups: Vec<(String, Vec<&str>)> = Vec::new();
        for (_, word) in words(&prompt[start..]) {
            match (parameter_name(word), groups.last_mut()) {
                (Some(name), _) => groups.push((name, Vec::new())),
                (None, Some((_, values))) => values.push(word),
                (None, None) => unreachable!("the first word opens a parameter"),
            }
        }
        let mut p = Parameters::default();
        let mut seen: Vec<Field> = Vec::new();
        for (name, values) in groups {
            let Some(field) = field_of(&name) else {
                let hint = match name.as_str() {
                    "fast" | "relax" | "turbo" => "; give process_mode in the body instead",
                    _ => "",
                };
                return Err(format!("unknown parameter --{name}{hint}"));
            };
            if seen.contains(&field) {
                return Err(format!("--{name} given twice"));
            }
            seen.push(field);
            p.set(field, &name, &values)?;
        }
        if p.version.is_some() && p.niji.is_some() {
            return Err("--v and --niji cannot be used together".into());
        }
        Ok((text, p))
    }

    fn set(&mut self, field: Field, name: &str, values: &[&str]) -> Result<(), String> {
        let rule = |rule: &str| format!("--{name} {rule}");
        let value = match (field, values) {
            (Field::No, []) => return Err(rule("needs words after it")),
            (Field::No, words) => {
                self.no = Some(words.join(" "));
                return Ok(());
            }
            (Field::Tile, []) => {
                self.tile = true;
                return Ok(());
            }
            (Field::Tile, extra) => {
                return Err(rule(&format!(
                    "takes no value (got \"{}\"); parameters come at the end of the prompt",
                    extra.join(" ")
                )))
            }
            (_, [] | [_]) => values.first().copied().unwrap_or(""),
            (_, extra) => {
                return Err(rule(&format!(
                    "takes one value (got \"{}\"); parameters come at the end of the prompt",
                    extra.join(" ")
                )))
            }
        };
        match field {
            Field::Aspect => {
                let ratio = value.parse::<AspectRatio>().map_err(|e| rule(&e))?;
                self.aspect = Some(ratio.to_string());
            }
            Field::Seed => self.seed = Some(whole(value, u32::MAX).ok_or_else(|| rule(SEED_RULE))?),
            Field::Chaos => {
                self.chaos = Some(whole(value, 100).ok_or_else(|| rule("must be 0 to 100"))?)
            }
            Field::Stylize => {
                self.stylize = Some(whole(value, 1000).ok_or_else(|| rule("must be 0 to 1000"))?)
            }
            Field::Weird => {
                self.weird = Some(whole(value, 3000).ok_or_else(|| rule("must be 0 to 3000"))?)
            }
            Field::Quality => {
                let q = decimal(value)
                    .filter(|q| QUALITIES.contains(q))
                    .ok_or_else(|| rule("must be .25, .5, 1 or 2"))?;
                self.quality = Some(q);
            }
            Field::Iw => {
                let w = decimal(value)
                    .filter(|w| (0.0..=3.0).contains(w))
                    .ok_or_else(|| rule("must be 0 to 3"))?;
                self.iw = Some(w);
            }
            Field::Style => {
                if !value.eq_ignore_ascii_case("raw") {
                    return Err(rule("must be raw"));
                }
                self.style = Some("raw".into());
            }
            Field::Version => {
                if !VERSIONS.contains(&value) {
                    return Err(rule(&format!("must be one of {}", VERSIONS.join(", "))));
                }
                self.version = Some(value.into());
            }
            Field::Niji => {
                if !NIJI_VERSIONS.contains(&value) {
                    return Err(rule("must be 4, 5 or 6"));
                }
                self.niji = Some(value.into());
            }
            Field::No | Field::Tile => unreachable!("answered above"),
        }
        Ok(())
    }

    /// These parameters as a follow-up that reuses its parent's prompt takes them: all but the
    /// seed, since a follow-up draws anew unless it names a seed itself (as reroll always has).
    pub fn inherited(&self) -> Parameters {
        Parameters {
            seed: None,
            ..self.clone()
        }
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
mod tests {
    use super::*;

    fn parsed(prompt: &str) -> (&str, Parameters) {
        Parameters::parse(prompt).unwrap_or_else(|e| panic!("{prompt}: {e}"))
    }

    fn refused(prompt: &str) -> String {
        Parameters::parse(prompt)
            .map(|(_, p)| format!("accepted: {p:?}"))
            .unwrap_or_else(|e| e)
    }

    #[test]
    fn every_parameter_and_alias_is_read_and_left_out_of_the_text() {
        let (text, p) = parsed(
            "a red fox in the snow --ar 16:9 --no trees, cars --seed 42 --chaos 30 --stylize 250 \
             --quality .5 --weird 1000 --tile --style raw --v 6.1 --iw 1.5",
        );
        assert_eq!(text, "a red fox in the snow");
        let want = Parameters {
            aspect: Some("16:9".into()),
            no: Some("trees, cars".into()),
            seed: Some(42),
            chaos: Some(30),
            stylize: Some(250),
            quality: Some(0.5),
            weird: Some(1000),
            tile: true,
            style: Some("raw".into()),
            version: Some("6.1".into()),
            niji: None,
            iw: Some(1.5),
        };
        assert_eq!(p, want);
        let (_, aliases) = parsed(
            "x \u{2014}aspect 16:9 --no trees, cars --sameseed 42 --c 30 --s 250 --q 0.5 --w 1000 \
             --TILE --style RAW --version 6.1 --iw 1.5",
        );
        assert_eq!(aliases, want);
        let (_, niji) = parsed("x --niji 6");
        assert_eq!(niji.niji.as_deref(), Some("6"));
    }

    #[test]
    fn ranges_hold_at_their_edges() {
        for (ok, bad, rule) in [
            ("--chaos 0", "--chaos 101", "--chaos must be 0 to 100"),
            ("--chaos 100", "--chaos -1", "--chaos must be 0 to 100"),
            ("--stylize 1000", "--s 1001", "--s must be 0 to 1000"),
            ("--weird 3000", "--w 3001", "--w must be 0 to 3000"),
            ("--iw 3", "--iw 3.01", "--iw must be 0 to 3"),
            ("--iw 0", "--iw 1e0", "--iw must be 0 to 3"),
            ("--quality .25", "--q 0.3", "--q must be .25, .5, 1 or 2"),
            ("--q 2", "--q NaN", "--q must be .25, .5, 1 or 2"),
            (
                "--seed 4294967295",
                "--seed 4294967296",
                "--seed must be an integer",
            ),
            (
                "--seed 0",
                "--seed x",
                "--seed must be an integer from 0 to 4294967295",
            ),
            ("--ar 1:4", "--ar 0:1", "--ar must look like \"W:H\""),
            (
                "--ar 4:1",
                "--ar 5:1",
                "--ar ratio must be between 1:4 and 4:1",
            ),
            ("--v 7", "--v 8", "--v must be one of 1, 2"),
            ("--niji 4", "--niji 3", "--niji must be 4, 5 or 6"),
            ("--style raw", "--style cute", "--style must be raw"),
        ] {
            assert!(Parameters::parse(&format!("a cat {ok}")).is_ok(), "{ok}");
            let got = refused(&format!("a cat {bad}"));
            assert!(got.starts_with(rule), "{bad}: {got}");
        }
        assert_eq!(parsed("a --chaos 7").1.chaos, Some(7));
        assert_eq!(parsed("a --q 1").1.quality, Some(1.0));
    }

    #[test]
    fn each_error_names_the_parameter_and_the_rule() {
        let no_words = "--no needs words after it";
        for (prompt, error) in [
            ("a cat --foo 3", "unknown parameter --foo"),
            ("a cat --stop 50", "unknown parameter --stop"),
            ("a cat --ar 1:1 --ar 2:1", "--ar given twice"),
            ("a cat --ar 1:1 --aspect 2:1", "--aspect given twice"),
            ("a cat --tile --tile", "--tile given twice"),
            ("a cat --no", no_words),
            ("a cat --no --ar 1:1", no_words),
            ("a cat --chaos", "--chaos must be 0 to 100"),
            (
                "a cat --ar 16:9 in the snow",
                "--ar takes one value (got \"16:9 in the snow\"); parameters come at the end of \
                 the prompt",
            ),
            (
                "a cat --v 6 --niji 6",
                "--v and --niji cannot be used together",
            ),
            (
                "--ar 16:9",
                "has only parameters; the words to draw come before them",
            ),
        ] {
            assert_eq!(refused(prompt), error, "{prompt}");
        }
        assert!(refused("a cat --relax").contains("process_mode"));
        assert!(refused("a cat --tile with stripes").starts_with("--tile takes no value"));
    }

    #[test]
    fn dashes_inside_words_are_text() {
        for prompt in [
            "rock--paper--scissors",
            "a well--known face",
            "an em\u{2014}dash, and \u{2014} alone",
            "a countdown -- 3 2 1 --5",
            "https://example.com/a--b.png a cat",
        ] {
            assert_eq!(parsed(prompt), (prompt, Parameters::default()), "{prompt}");
            assert_eq!(prompt_text(prompt), prompt);
        }
        // An image URL leads the text, untouched.
        let (text, p) = parsed("https://example.com/a.png a cat --iw 2");
        assert_eq!(text, "https://example.com/a.png a cat");
        assert_eq!(p.iw, Some(2.0));
        // `--no` runs to the next parameter, whatever its words.
        assert_eq!(
            parsed("x --no a -- b --tile").1.no.as_deref(),
            Some("a -- b")
        );
    }

    #[test]
    fn a_stored_prompt_gives_its_text_with_or_without_parameters() {
        for (stored, text) in [
            ("a red fox --ar 16:9 --seed 42 --no snow", "a red fox"),
            ("a red fox \u{2014}ar 16:9", "a red fox"),
            ("a red fox", "a red fox"),
            ("--ar 1:1", ""),
        ] {
            assert_eq!(prompt_text(stored), text, "{stored}");
        }
    }

    #[test]
    fn a_follow_up_inherits_all_but_the_seed() {
        let (_, p) = parsed("a --seed 3 --tile --chaos 5");
        let inherited = p.inherited();
        assert_eq!(inherited.seed, None);
        assert!(inherited.tile);
        assert_eq!(inherited.chaos, Some(5));
    }
}
