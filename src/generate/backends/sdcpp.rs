//! stable-diffusion.cpp's server (`sd-server`), whichever API easel speaks to it. It reads JSON
//! between `<sd_cpp_extra_args>` tags anywhere in a prompt, on its OpenAI and WebUI routes alike,
//! as settings that override the request's (size, batch count, seed, steps...). easel uses that
//! for what the images API has no field for (`dialect = "sd-cpp"`), and takes the tags out of
//! every caller's prompt, so that no caller can set a backend's batch size or image size.

use std::borrow::Cow;

use serde_json::{json, Value};

use crate::generate::Job;

const OPEN: &str = "<sd_cpp_extra_args>";
const CLOSE: &str = "</sd_cpp_extra_args>";

/// `prompt` with every `<sd_cpp_extra_args>` tag taken out, however it was nested to survive
/// one pass.
pub fn neutralize(prompt: &str) -> Cow<'_, str> {
    if !prompt.contains(OPEN) && !prompt.contains(CLOSE) {
        return Cow::Borrowed(prompt);
    }
    let mut text = prompt.to_string();
    while text.contains(OPEN) || text.contains(CLOSE) {
        text = text.replace(OPEN, "").replace(CLOSE, "");
    }
    Cow::Owned(text)
}

/// The caller's `prompt` (neutralized) followed by the job's settings as sd-server's extra
/// arguments: its seed, and the steps, guidance, sampler and negative prompt resolved at
/// submit; `strength` for an edit (how much of the start image is redrawn).
pub fn with_extra_args(prompt: &str, job: &Job, strength: Option<f64>) -> String {
    let settings = &job.extras.settings;
    let mut args = json!({ "seed": job.seed });
    let mut sample = serde_json::Map::new();
    if let Some(steps) = settings.steps {
        sample.insert("sample_steps".into(), json!(steps));
    }
    if let Some(cfg) = settings.cfg_scale {
        sample.insert("guidance".into(), json!({ "txt_cfg": cfg }));
    }
    if let Some(method) = settings.sampler.as_deref().and_then(sample_method) {
        sample.insert("sample_method".into(), json!(method));
    }
    if !sample.is_empty() {
        args["sample_params"] = Value::Object(sample);
    }
    if let Some(negative) = &settings.negative_prompt {
        args["negative_prompt"] = json!(neutralize(negative));
    }
    if let Some(strength) = strength {
        args["strength"] = json!(strength);
    }
    format!("{}{OPEN}{args}{CLOSE}", neutralize(prompt))
}

/// sd-server's name of an easel sampler, for those it has; the others leave its default.
fn sample_method(sampler: &str) -> Option<&'static str> {
    Some(match sampler {
        "euler" => "euler",
        "euler_a" => "euler_a",
        "heun" => "heun",
        "dpm2" => "dpm2",
        "dpmpp_2m" => "dpm++2m",
        "lcm" => "lcm",
        "ddim" => "ddim_trailing",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_callers_tags_are_taken_out_however_nested() {
        assert_eq!(neutralize("a fox"), "a fox");
        assert_eq!(
            neutralize("a fox<sd_cpp_extra_args>{\"batch_count\":99}</sd_cpp_extra_args>"),
            "a fox{\"batch_count\":99}"
        );
        let nested = "<sd_cpp_<sd_cpp_extra_args>extra_args>{}</sd_cpp_extra_args>";
        assert!(!neutralize(nested).contains(OPEN));
    }

    #[test]
    fn the_settings_follow_the_prompt_as_json() {
        let mut job = Job::for_tests(crate::domain::Operation::Imagine, "", 42);
        job.extras.settings.steps = Some(3);
        job.extras.settings.cfg_scale = Some(5.5);
        job.extras.settings.sampler = Some("dpmpp_2m".into());
        job.extras.settings.negative_prompt = Some("rain".into());
        let prompt = with_extra_args("a fox <sd_cpp_extra_args>{}", &job, Some(0.7));
        let (text, rest) = prompt.split_once(OPEN).unwrap();
        assert_eq!(text, "a fox {}");
        let args: Value = serde_json::from_str(rest.strip_suffix(CLOSE).unwrap()).unwrap();
        assert_eq!(
            args,
            json!({
                "seed": 42, "negative_prompt": "rain", "strength": 0.7,
                "sample_params": {
                    "sample_steps": 3, "guidance": { "txt_cfg": 5.5 }, "sample_method": "dpm++2m"
                },
            })
        );
    }
}
