//! The model backends (`[[backends]]` tables): what kind each is, where it is, how many jobs it
//! takes, the secrets it names and the operations it runs. Checked here, where nothing outside
//! the settings is needed; the adapters in `generate::backends` use them.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::values::duration;
use crate::domain::OpKind;

/// The kinds of backend, by their names in `kind = "..."` (serde reads them, strum writes them
/// in logs and on `/readyz`; the two agree on lowercase).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum BackendKind {
    Procedural,
    Openai,
    Sdwebui,
    Comfyui,
}

impl BackendKind {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// One `[[backends]]` table. Secrets are named by environment variable (`api_key_env`,
/// `password_env`) or given inline (`api_key`, `password`); either way they never appear in
/// `Debug` output, logs, records or errors.
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendConfig {
    /// Unique: lower-case letters, digits and `-`.
    pub name: String,
    pub kind: BackendKind,
    /// sdwebui, comfyui: the server's base URL; openai: the API base, `/v1` included.
    #[serde(default)]
    pub url: Option<String>,
    /// Jobs in flight on this backend at once.
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    /// Longest one job may take on it; past it the job is cancelled on the backend.
    #[serde(default = "default_timeout", with = "duration")]
    pub timeout: Duration,
    /// openai: the environment variable that holds the key.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// openai: the key itself (prefer `api_key_env`).
    #[serde(default)]
    pub api_key: Option<String>,
    /// openai: the model; sdwebui: a checkpoint to switch to for every job (optional). A
    /// `[[models]]` table's `checkpoint` takes its place for that model's jobs.
    #[serde(default)]
    pub model: Option<String>,
    /// sdwebui: the basic-auth user (with `password_env` or `password`).
    #[serde(default)]
    pub username: Option<String>,
    #[serde(default)]
    pub password_env: Option<String>,
    #[serde(default)]
    pub password: Option<String>,
    /// comfyui: the API-format workflow for imagine (relative to the configuration file).
    #[serde(default)]
    pub workflow: Option<PathBuf>,
    /// comfyui: workflows for other operations, by operation name (`upscale-1x = "up.json"`).
    #[serde(default)]
    pub workflows: BTreeMap<String, PathBuf>,
    /// comfyui: node ids where the graph is unusual: `prompt`, `negative`, `seed`, `latent`,
    /// `sampler`, `image`, `mask`, `output`, `checkpoint`.
    #[serde(default)]
    pub nodes: BTreeMap<String, String>,
    /// Only these operations; default: all that the kind can do.
    #[serde(default)]
    pub operations: Option<Vec<String>>,
    /// openai, sdwebui, comfyui: a PEM file of CA certificates to trust beside the public ones
    /// (a server behind a private CA), for HTTP and the WebSocket alike (relative to the
    /// configuration file).
    #[serde(default)]
    pub tls_ca_file: Option<PathBuf>,
    /// openai: the server's own additions to the images API that easel uses (none by default).
    #[serde(default)]
    pub dialect: Option<Dialect>,
}

/// Additions to OpenAI's images API that a server understands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Dialect {
    /// stable-diffusion.cpp's `sd-server`: the seed, steps, guidance, sampler, negative prompt
    /// and strength of an edit are read from JSON between `<sd_cpp_extra_args>` tags at the end
    /// of the prompt (the server takes them out). Without them it draws every request with the
    /// seed and steps it was started with, so a reroll would repeat its parent.
    #[serde(rename = "sd-cpp")]
    SdCpp,
}

fn default_concurrency() -> usize {
    1
}

fn default_timeout() -> Duration {
    Duration::from_secs(300)
}

impl fmt::Debug for BackendConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hidden = |s: &Option<String>| s.as_ref().map(|_| "***");
        f.debug_struct("BackendConfig")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("url", &self.url)
            .field("concurrency", &self.concurrency)
            .field("timeout", &self.timeout)
            .field("api_key_env", &self.api_key_env)
            .field("api_key", &hidden(&self.api_key))
            .field("model", &self.model)
            .field("username", &self.username)
            .field("password_env", &self.password_env)
            .field("password", &hidden(&self.password))
            .field("workflow", &self.workflow)
            .field("workflows", &self.workflows)
            .field("nodes", &self.nodes)
            .field("operations", &self.operations)
            .field("tls_ca_file", &self.tls_ca_file)
            .field("dialect", &self.dialect)
            .finish()
    }
}

impl BackendConfig {
    /// The rules that need nothing outside the settings: the name, the URL, the concurrency, the
    /// operations. A message naming the backend and the setting when one is broken.
    pub fn validate(&self) -> Result<(), String> {
        let name = &self.name;
        let ok_name = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !ok_name {
            return Err(format!(
                "backends: name {name:?} must be 1 to 64 lower-case letters, digits and '-'"
            ));
        }
        let at = |setting: &str, problem: &str| format!("backends.{name}.{setting}: {problem}");
        if self.concurrency == 0 {
            return Err(at("concurrency", "must be at least 1"));
        }
        if self.timeout.is_zero() {
            return Err(at("timeout", "must be greater than zero"));
        }
        match (&self.url, self.kind) {
            (None, BackendKind::Procedural) => {}
            (None, _) => return Err(at("url", "is required for this kind")),
            (Some(url), _) => match url::Url::parse(url) {
                Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {}
                _ => return Err(at("url", "must be an http or https URL")),
            },
        }
        if self.kind == BackendKind::Procedural && self.tls_ca_file.is_some() {
            return Err(at(
                "tls_ca_file",
                "a procedural backend has no server to trust",
            ));
        }
        if self.dialect.is_some() && self.kind != BackendKind::Openai {
            return Err(at("dialect", "is a setting of openai backends"));
        }
        if let Some(ops) = &self.operations {
            for op in ops {
                let kind: OpKind = op.parse().map_err(|e: String| at("operations", &e))?;
                if !kind_can(self.kind, kind) {
                    return Err(at(
                        "operations",
                        &format!("a {} backend cannot run {op}", self.kind.as_str()),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The API key, from `api_key` or the variable `api_key_env` names; an error naming the
    /// variable when it is unset.
    pub fn api_key(&self) -> Result<Option<String>, String> {
        secret(&self.name, "api_key", &self.api_key, &self.api_key_env)
    }

    /// The basic-auth password, as [`BackendConfig::api_key`].
    pub fn password(&self) -> Result<Option<String>, String> {
        secret(&self.name, "password", &self.password, &self.password_env)
    }

    /// Whether this backend is to run operation `kind`: its kind can, and `operations` (when
    /// given) names it.
    pub fn runs(&self, kind: OpKind) -> bool {
        kind_can(self.kind, kind)
            && self
                .operations
                .as_ref()
                .is_none_or(|ops| ops.iter().any(|o| o == kind.as_str()))
    }
}

fn secret(
    backend: &str,
    setting: &str,
    inline: &Option<String>,
    env: &Option<String>,
) -> Result<Option<String>, String> {
    if let Some(value) = inline {
        return Ok(Some(value.clone()));
    }
    let Some(var) = env else { return Ok(None) };
    match std::env::var(var) {
        Ok(value) if !value.is_empty() => Ok(Some(value)),
        _ => Err(format!(
            "backends.{backend}.{setting}_env: the environment variable {var} is not set"
        )),
    }
}

/// What each kind can do at all. Faceswap needs a model of faces that none of them has built in.
pub fn kind_can(backend: BackendKind, op: OpKind) -> bool {
    use OpKind::*;
    match backend {
        BackendKind::Procedural => op != Faceswap,
        // Images from text, and edits of an image (with a mask for inpaint).
        BackendKind::Openai => matches!(
            op,
            Imagine | Reroll | Variations | Pan | Outpaint | Inpaint | Blend
        ),
        BackendKind::Sdwebui => matches!(
            op,
            Imagine
                | Reroll
                | Variations
                | Pan
                | Outpaint
                | Inpaint
                | Upscale1x
                | UpscaleAlt
                | UpscaleHighres
                | Describe
        ),
        // Whatever it has a workflow for; checked against the workflows when it is built.
        BackendKind::Comfyui => op != Faceswap && op != Shorten && op != Seed && op != Describe,
    }
}

/// Every backend valid on its own, and no name used twice.
pub fn validate(backends: &[BackendConfig]) -> anyhow::Result<()> {
    let mut names = std::collections::HashSet::new();
    for backend in backends {
        backend
            .validate()
            .map_err(|e| anyhow::anyhow!("configuration: {e}"))?;
        if !names.insert(backend.name.as_str()) {
            anyhow::bail!(
                "configuration: backends: the name {:?} is used twice",
                backend.name
            );
        }
    }
    Ok(())
}

/// Workflow and CA files are named relative to the configuration file, as people write them.
pub fn resolve_workflows(backends: &mut [BackendConfig], dir: &Path) {
    for backend in backends {
        let paths = backend
            .workflow
            .iter_mut()
            .chain(backend.workflows.values_mut())
            .chain(backend.tls_ca_file.iter_mut());
        for path in paths {
            if path.is_relative() {
                *path = dir.join(&*path);
            }
        }
    }
}
