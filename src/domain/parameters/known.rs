//! The one place that knows every parameter ([`KNOWN`]: names, aliases, what each takes, the
//! backend control each acts through, [`Control::on`]: which backends have which control) and
//! the one pass over a prompt that reads them, with the text's `::` weights on the way.

use super::{
    decimal, parameter_name, whole, words, Parameters, Weighted, NIJI_VERSIONS, QUALITIES,
    SEED_RULE, VERSIONS,
};
use crate::config::backends::BackendKind;
use crate::domain::image_prompts::is_image_url;
use crate::domain::task::AspectRatio;

/// Most `--repeat`, as Midjourney has it; a batch's own limit (`batch_max`) may be lower.
pub const REPEAT_MAX: u32 = 40;
/// Most codes or URLs after one `--sref`, `--cref` or `--p`.
const LIST_MAX: usize = 5;

/// Why a prompt's parameters are refused: the API's error code and the rule, which names the
/// parameter (`--chaos must be 0 to 100`).
#[derive(Debug, Clone, PartialEq)]
pub struct Refused {
    pub code: &'static str,
    pub message: String,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<String> for Refused {
    fn from(message: String) -> Refused {
        Refused {
            code: "invalid_value",
            message,
        }
    }
}

impl From<&str> for Refused {
    fn from(message: &str) -> Refused {
        Refused::from(message.to_string())
    }
}

/// Which field a parameter name (or alias) sets.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
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
    Mode,
    Repeat,
    Stop,
    Draft,
    Exp,
    Sref,
    Sw,
    Sv,
    Cref,
    Cw,
    Oref,
    Ow,
    Personalize,
    /// Midjourney's video parameters: known, and refused (no backend makes video).
    Video,
}

/// What a parameter takes after its name.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Takes {
    Nothing,
    One,
    /// Words up to the next parameter (at least one).
    Words,
    /// One or more values.
    Some,
    /// Zero or more values.
    Any,
}

/// Every parameter easel knows: its names (the long one first: the record's), what it takes,
/// and the control it acts through where a backend has it (recorded with no effect elsewhere).
/// `--fast`, `--relax` and `--turbo` are three parameters of one field: one of them at most.
#[rustfmt::skip]
const KNOWN: &[(&[&str], Field, Takes, Control)] = &[
    (&["ar", "aspect"], Field::Aspect, Takes::One, Control::Everywhere),
    (&["no"], Field::No, Takes::Words, Control::Negative),
    // `--sameseed` was Midjourney's older name for a seed shared by the grid's images.
    (&["seed", "sameseed"], Field::Seed, Takes::One, Control::Seed),
    (&["chaos", "c"], Field::Chaos, Takes::One, Control::Spread),
    (&["stylize", "s"], Field::Stylize, Takes::One, Control::Guidance),
    (&["quality", "q"], Field::Quality, Takes::One, Control::Nowhere),
    (&["weird", "w"], Field::Weird, Takes::One, Control::Nowhere),
    (&["tile"], Field::Tile, Takes::Nothing, Control::Tiling),
    (&["style"], Field::Style, Takes::One, Control::Nowhere),
    (&["raw"], Field::Style, Takes::Nothing, Control::Nowhere),
    (&["v", "version"], Field::Version, Takes::One, Control::Nowhere),
    (&["niji"], Field::Niji, Takes::One, Control::Nowhere),
    (&["iw"], Field::Iw, Takes::One, Control::ImageWeight),
    (&["fast"], Field::Mode, Takes::Nothing, Control::Everywhere),
    (&["relax"], Field::Mode, Takes::Nothing, Control::Everywhere),
    (&["turbo"], Field::Mode, Takes::Nothing, Control::Everywhere),
    (&["repeat", "r"], Field::Repeat, Takes::One, Control::Everywhere),
    (&["stop"], Field::Stop, Takes::One, Control::Steps),
    (&["draft"], Field::Draft, Takes::Nothing, Control::Steps),
    (&["exp"], Field::Exp, Takes::One, Control::Nowhere),
    (&["sref"], Field::Sref, Takes::Some, Control::Reference("sref")),
    (&["sw"], Field::Sw, Takes::One, Control::Nowhere),
    (&["sv"], Field::Sv, Takes::One, Control::Nowhere),
    (&["cref"], Field::Cref, Takes::Some, Control::Reference("cref")),
    (&["cw"], Field::Cw, Takes::One, Control::Nowhere),
    (&["oref"], Field::Oref, Takes::One, Control::Reference("oref")),
    (&["ow"], Field::Ow, Takes::One, Control::Nowhere),
    (&["p", "personalize"], Field::Personalize, Takes::Any, Control::Look),
    (&["video", "motion", "loop", "end"], Field::Video, Takes::Any, Control::Nowhere),
];

/// The multi-prompt weights (`text::2 other::-0.5`), which have no `--` name: the name
/// `GET /api/v1/models` lists them by, and the control they act through.
pub const WEIGHTS: (&str, Control) = ("::", Control::Weights);

/// What a parameter goes through to change the picture. Each backend has some of these
/// ([`Control::on`], the one place that says which kind has which); a parameter acts where its
/// backend has its control and is recorded with no effect elsewhere (docs/api.md's table, kind
/// by kind, says the same in words).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Control {
    /// Every backend: the image's size, the queue's order, the number of tasks.
    Everywhere,
    /// None: recorded only.
    Nowhere,
    /// A negative prompt (the procedural generator leaves out what it names).
    Negative,
    Seed,
    /// The grid's four images moved apart (the WebUI's variation seed, the procedural turn).
    Spread,
    /// The guidance (`cfg_scale`), scaled from the model's default when it has one.
    Guidance,
    /// Seamless tiling.
    Tiling,
    /// How much of the image prompts an image keeps.
    ImageWeight,
    /// The sampler's steps, lowered from the model's default when it has one (the procedural
    /// generator draws part of its picture instead).
    Steps,
    /// The prompt's `(text:w)` syntax.
    Weights,
    /// A ComfyUI workflow's placeholder for these reference images (`nodes.sref`, ...); style
    /// codes of `--sref` pick the procedural generator's look too.
    Reference(&'static str),
    /// The procedural generator's palette and shapes, from personalization codes.
    Look,
}

/// A backend as the prompt's parameters see it: its kind and what its settings add.
#[derive(Clone, Debug, PartialEq)]
pub struct Backend {
    pub kind: BackendKind,
    /// An OpenAI-speaking stable-diffusion.cpp server (`dialect = "sd-cpp"`), which takes the
    /// seed, steps, guidance and negative prompt as extra arguments.
    pub sd_cpp: bool,
    /// The reference placeholders its ComfyUI workflows declare (`sref`, `cref`, `oref`).
    pub placeholders: Vec<&'static str>,
}

/// What a model's settings add to its backends': whether it has default steps and guidance for
/// `--stop`, `--draft` and `--stylize` to scale.
#[derive(Clone, Copy, Debug)]
pub struct ModelControls {
    pub steps: bool,
    pub guidance: bool,
}

impl Control {
    /// Whether `backend`, serving a model with `model`'s defaults, has this control.
    pub fn on(self, backend: &Backend, model: ModelControls) -> bool {
        use BackendKind::{Comfyui, Openai, Procedural, Sdwebui};
        let diffusion = matches!(backend.kind, Sdwebui | Comfyui) || backend.sd_cpp;
        let drawn = backend.kind == Procedural;
        match self {
            Control::Everywhere => true,
            Control::Nowhere => false,
            Control::Negative | Control::Seed | Control::ImageWeight => {
                backend.kind != Openai || backend.sd_cpp
            }
            Control::Spread | Control::Tiling => matches!(backend.kind, Sdwebui | Procedural),
            Control::Guidance => diffusion && model.guidance,
            Control::Steps => drawn || (diffusion && model.steps),
            Control::Weights => matches!(backend.kind, Sdwebui | Comfyui),
            Control::Reference(name) => {
                backend.placeholders.contains(&name) || (name == "sref" && drawn)
            }
            Control::Look => drawn,
        }
    }
}

/// The parameters that act on a model served by `backends`, as a prompt writes them (`--ar`,
/// `--stop`, `::`), in [`KNOWN`]'s order: those whose control every one of them has, since a
/// task may run on any of them. The others are recorded with no effect.
pub fn acting(backends: &[Backend], model: ModelControls) -> Vec<String> {
    let everywhere =
        |control: Control| !backends.is_empty() && backends.iter().all(|b| control.on(b, model));
    let named = KNOWN
        .iter()
        .filter(|(_, field, _, control)| *field != Field::Video && everywhere(*control))
        .map(|(names, ..)| format!("--{}", names[0]));
    named
        .chain(everywhere(WEIGHTS.1).then(|| WEIGHTS.0.to_string()))
        .collect()
}

fn known(name: &str) -> Option<(Field, Takes)> {
    KNOWN
        .iter()
        .find(|(names, ..)| names.contains(&name))
        .map(|(_, field, takes, _)| (*field, *takes))
}

/// The `::` weights of a prompt's text, read word by word as the pass goes.
struct Weights<'p> {
    prompt: &'p str,
    /// Where the part being read began.
    from: usize,
    parts: Vec<Weighted>,
}

impl<'p> Weights<'p> {
    /// A word of the text at byte `at`: each `::` in it ends a part, with the number right
    /// after it as its weight (1 without one). Image URLs are text, whatever they hold.
    fn word(&mut self, at: usize, word: &str) -> Result<(), Refused> {
        if is_image_url(word) {
            return Ok(());
        }
        let mut offset = 0;
        while let Some(found) = word[offset..].find("::") {
            let end = at + offset + found;
            let after = &word[offset + found + 2..];
            let number_len = after
                .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-'))
                .unwrap_or(after.len());
            let number = &after[..number_len];
            let weight = match number {
                "" => 1.0,
                n => signed(n).ok_or_else(|| {
                    format!("the weight ::{n} must be a number, like ::2 or ::-0.5")
                })?,
            };
            let text = self.prompt[self.from..end].trim();
            if text.is_empty() {
                return Err(format!("the weight ::{number} must follow words").into());
            }
            self.parts.push(Weighted {
                text: text.to_string(),
                weight,
            });
            offset += found + 2 + number_len;
            self.from = at + offset;
        }
        Ok(())
    }

    /// The parts, the text up to `end` after the last `::` weighing 1; none without `::`.
    fn finish(mut self, end: usize) -> Result<Vec<Weighted>, Refused> {
        if self.parts.is_empty() {
            return Ok(self.parts);
        }
        let rest = self.prompt[self.from.min(end)..end].trim();
        if !rest.is_empty() {
            self.parts.push(Weighted {
                text: rest.to_string(),
                weight: 1.0,
            });
        }
        let total: f64 = self.parts.iter().map(|p| p.weight).sum();
        if total <= 0.0 {
            return Err("the :: weights must add up to more than 0".into());
        }
        Ok(self.parts)
    }
}

/// `-0.5`, `2`: a plain decimal with an optional minus sign.
fn signed(value: &str) -> Option<f64> {
    match value.strip_prefix('-') {
        Some(rest) => decimal(rest).map(|v| -v),
        None => decimal(value),
    }
}

impl Parameters {
    /// `prompt` split into the text to draw and its parameters, or the rule a parameter breaks
    /// (a phrase without the field's name). One pass over the words: the text keeps
    /// everything before the first parameter as it was written (image URLs, `::` weights, read
    /// into `weights` on the way); the parameters run to the end.
    pub fn parse(prompt: &str) -> Result<(&str, Parameters), Refused> {
        let mut start = None;
        let mut weights = Weights {
            prompt,
            from: 0,
            parts: Vec::new(),
        };
        // Each parameter with the words up to the next one.
        let mut groups: Vec<(String, Vec<&str>)> = Vec::new();
        for (at, word) in words(prompt) {
            match (parameter_name(word), groups.last_mut()) {
                (Some(name), _) => {
                    start.get_or_insert(at);
                    groups.push((name, Vec::new()));
                }
                (None, Some((_, values))) => values.push(word),
                (None, None) => weights.word(at, word)?,
            }
        }
        let end = start.unwrap_or(prompt.len());
        let text = prompt[..end].trim_end();
        let mut p = Parameters {
            weights: weights.finish(end)?,
            ..Parameters::default()
        };
        if start.is_none() {
            return Ok((prompt, p));
        }
        if text.is_empty() {
            return Err("has only parameters; the words to draw come before them".into());
        }
        let mut seen: Vec<(Field, String)> = Vec::new();
        for (name, values) in groups {
            let Some((field, takes)) = known(&name) else {
                return Err(format!("unknown parameter --{name}").into());
            };
            if field == Field::Video {
                return Err(Refused {
                    code: "unsupported_operation",
                    message: format!("--{name}: no configured backend makes video"),
                });
            }
            if let Some((_, before)) = seen.iter().find(|(f, _)| *f == field) {
                return Err(match field {
                    Field::Mode if *before != name => {
                        format!("--{before} and --{name} cannot be used together")
                    }
                    _ => format!("--{name} given twice"),
                }
                .into());
            }
            seen.push((field, name.clone()));
            p.set(field, takes, &name, &values)?;
        }
        if p.version.is_some() && p.niji.is_some() {
            return Err("--v and --niji cannot be used together".into());
        }
        Ok((text, p))
    }

    fn set(
        &mut self,
        field: Field,
        takes: Takes,
        name: &str,
        values: &[&str],
    ) -> Result<(), String> {
        let rule = |rule: &str| format!("--{name} {rule}");
        let extra = |what: &str| {
            rule(&format!(
                "takes {what} (got \"{}\"); parameters come at the end of the prompt",
                values.join(" ")
            ))
        };
        match (takes, values.len()) {
            (Takes::Some | Takes::Any, n) if n > LIST_MAX => {
                return Err(rule(&format!("takes at most {LIST_MAX} values")))
            }
            (Takes::Nothing, 0) | (Takes::Any, _) => {}
            (Takes::Nothing, _) => return Err(extra("no value")),
            (Takes::One, n) if n > 1 => return Err(extra("one value")),
            (Takes::Words, 0) => return Err(rule("needs words after it")),
            (Takes::Some, 0) => return Err(rule("needs a value after it")),
            _ => {}
        }
        let value = values.first().copied().unwrap_or("");
        let number = |max: u32, min: u32| {
            whole(value, max)
                .filter(|n| *n >= min)
                .ok_or_else(|| rule(&format!("must be {min} to {max}")))
        };
        let url = |v: &str| {
            if is_image_url(v) {
                Ok(v.to_string())
            } else {
                Err(rule(&format!("takes image URLs (got \"{v}\")")))
            }
        };
        match field {
            Field::Aspect => {
                let ratio = value.parse::<AspectRatio>().map_err(|e| rule(&e))?;
                self.aspect = Some(ratio.to_string());
            }
            Field::No => self.no = Some(values.join(" ")),
            Field::Seed => self.seed = Some(whole(value, u32::MAX).ok_or_else(|| rule(SEED_RULE))?),
            Field::Chaos => self.chaos = Some(number(100, 0)?),
            Field::Stylize => self.stylize = Some(number(1000, 0)?),
            Field::Weird => self.weird = Some(number(3000, 0)?),
            Field::Tile => self.tile = true,
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
                // `--raw` takes nothing; `--style` takes `raw`.
                if takes == Takes::One && !value.eq_ignore_ascii_case("raw") {
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
            Field::Mode => self.process_mode = Some(name.to_string()),
            Field::Repeat => self.repeat = Some(number(REPEAT_MAX, 1)?),
            Field::Stop => self.stop = Some(number(100, 10)?),
            Field::Draft => self.draft = true,
            Field::Exp => self.exp = Some(number(100, 0)?),
            Field::Sw => self.sw = Some(number(1000, 0)?),
            Field::Sv => self.sv = Some(number(6, 1)?),
            Field::Cw => self.cw = Some(number(100, 0)?),
            Field::Ow => self.ow = Some(number(1000, 0)?),
            Field::Sref => {
                for v in values {
                    let style_code = v.len() <= 12 && v.bytes().all(|b| b.is_ascii_digit());
                    if !(is_image_url(v) || style_code || v.eq_ignore_ascii_case("random")) {
                        return Err(rule(&format!(
                            "takes image URLs, style codes (digits) or random (got \"{v}\")"
                        )));
                    }
                    let v = if style_code || is_image_url(v) {
                        v.to_string()
                    } else {
                        "random".into()
                    };
                    self.sref.push(v);
                }
            }
            Field::Cref => {
                for v in values {
                    self.cref.push(url(v)?);
                }
            }
            Field::Oref => self.oref = Some(url(value)?),
            Field::Personalize => {
                let mut codes = Vec::new();
                for v in values {
                    let ok = v.len() <= 32 && v.bytes().all(|b| b.is_ascii_alphanumeric());
                    if !ok {
                        return Err(rule(&format!(
                            "takes profile codes, letters and digits (got \"{v}\")"
                        )));
                    }
                    codes.push(v.to_string());
                }
                self.personalize = Some(codes);
            }
            Field::Video => unreachable!("refused before"),
        }
        Ok(())
    }
}
