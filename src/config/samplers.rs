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
    s("euler", Some("Euler"), Some(("euler", "normal"))),
    s(
        "euler_a",
        Some("Euler a"),
        Some(("euler_ancestral", "normal")),
    ),
    s("heun", Some("Heun"), Some(("heun", "normal"))),
    s("lms", Some("LMS"), Some(("lms", "normal"))),
    s("dpm2", Some("DPM2"), Some(("dpm_2", "normal"))),
    s(
        "dpm2_a",
        Some("DPM2 a"),
        Some(("dpm_2_ancestral", "normal")),
    ),
    s("dpmpp_2m", Some("DPM++ 2M"), Some(("dpmpp_2m", "normal"))),
    s(
        "dpmpp_2m_karras",
        Some("DPM++ 2M Karras"),
        Some(("dpmpp_2m", "karras")),
    ),
    s(
        "dpmpp_sde",
        Some("DPM++ SDE"),
        Some(("dpmpp_sde", "normal")),
    ),
    s(
        "dpmpp_sde_karras",
        Some("DPM++ SDE Karras"),
        Some(("dpmpp_sde", "karras")),
    ),
    s(
        "dpmpp_2m_sde",
        Some("DPM++ 2M SDE"),
        Some(("dpmpp_2m_sde", "normal")),
    ),
    s("dpm_fast", Some("DPM fast"), Some(("dpm_fast", "normal"))),
    s(
        "dpm_adaptive",
        Some("DPM adaptive"),
        Some(("dpm_adaptive", "normal")),
    ),
    s("ddim", Some("DDIM"), Some(("ddim", "ddim_uniform"))),
    s("uni_pc", Some("UniPC"), Some(("uni_pc", "normal"))),
    s("lcm", Some("LCM"), Some(("lcm", "normal"))),
    // Only the WebUI has PLMS; only ComfyUI has DDPM.
    s("plms", Some("PLMS"), None),
    s("ddpm", None, Some(("ddpm", "normal"))),
];

const fn s(
    name: &'static str,
    webui: Option<&'static str>,
    comfy: Option<(&'static str, &'static str)>,
) -> Sampler {
    Sampler { name, webui, comfy }
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
