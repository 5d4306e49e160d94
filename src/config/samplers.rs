//! The samplers callers may name (`sampler`), by easel's own names, and what each backend kind
//! calls them. One table, so that the check at submit and what the adapters send cannot drift
//! apart: a sampler is known to a kind when the table gives that kind a name for it.

use super::backends::BackendKind;

/// One sampler: easel's name, the WebUI's `sampler_name`, and ComfyUI's KSampler
/// `sampler_name` with its `scheduler`.
pub struct Sampler {
    pub name: &'static str,
    pub webui: Option<&'static str>,
    pub comfy: Option<(&'static str, &'static str)>,
}

/// Every sampler easel knows. The WebUI's names are those of its 1.x releases (which still
/// accept the `... Karras` names); ComfyUI's are its KSampler's.
pub const SAMPLERS: &[Sampler] = &[
    s("euler", "Euler", "euler", "normal"),
    s("euler_a", "Euler a", "euler_ancestral", "normal"),
    s("heun", "Heun", "heun", "normal"),
    s("lms", "LMS", "lms", "normal"),
    s("dpm2", "DPM2", "dpm_2", "normal"),
    s("dpm2_a", "DPM2 a", "dpm_2_ancestral", "normal"),
    s("dpmpp_2m", "DPM++ 2M", "dpmpp_2m", "normal"),
    s("dpmpp_2m_karras", "DPM++ 2M Karras", "dpmpp_2m", "karras"),
    s("dpmpp_sde", "DPM++ SDE", "dpmpp_sde", "normal"),
    s(
        "dpmpp_sde_karras",
        "DPM++ SDE Karras",
        "dpmpp_sde",
        "karras",
    ),
    s("dpmpp_2m_sde", "DPM++ 2M SDE", "dpmpp_2m_sde", "normal"),
    s("dpm_fast", "DPM fast", "dpm_fast", "normal"),
    s("dpm_adaptive", "DPM adaptive", "dpm_adaptive", "normal"),
    s("ddim", "DDIM", "ddim", "ddim_uniform"),
    s("uni_pc", "UniPC", "uni_pc", "normal"),
    s("lcm", "LCM", "lcm", "normal"),
    // Only the WebUI has PLMS; only ComfyUI has DDPM.
    webui_only("plms", "PLMS"),
    comfyui_only("ddpm", "ddpm", "normal"),
];

/// A sampler both kinds know: easel's name, the WebUI's, ComfyUI's and its scheduler.
const fn s(
    name: &'static str,
    webui: &'static str,
    comfy: &'static str,
    scheduler: &'static str,
) -> Sampler {
    Sampler {
        name,
        webui: Some(webui),
        comfy: Some((comfy, scheduler)),
    }
}

const fn webui_only(name: &'static str, webui: &'static str) -> Sampler {
    Sampler {
        name,
        webui: Some(webui),
        comfy: None,
    }
}

const fn comfyui_only(name: &'static str, comfy: &'static str, scheduler: &'static str) -> Sampler {
    Sampler {
        name,
        webui: None,
        comfy: Some((comfy, scheduler)),
    }
}

/// The sampler of that name.
pub fn sampler(name: &str) -> Option<&'static Sampler> {
    SAMPLERS.iter().find(|s| s.name == name)
}

/// Whether a backend of `kind` can use the sampler `name`. The kinds without samplers (openai,
/// procedural) take none: there the value is recorded and has no effect, so any known name is
/// accepted.
pub fn kind_knows(kind: BackendKind, name: &str) -> bool {
    let Some(found) = sampler(name) else {
        return false;
    };
    match kind {
        BackendKind::Sdwebui => found.webui.is_some(),
        BackendKind::Comfyui => found.comfy.is_some(),
        BackendKind::Openai | BackendKind::Procedural => true,
    }
}

/// The names of the samplers every one of `kinds` can use, in the table's order.
pub fn known_to(kinds: &[BackendKind]) -> Vec<&'static str> {
    SAMPLERS
        .iter()
        .filter(|s| kinds.iter().all(|k| kind_knows(*k, s.name)))
        .map(|s| s.name)
        .collect()
}
