//! The operator's moderation services, asked over HTTP: a prompt checker that speaks OpenAI's
//! `/v1/moderations` (`{"input", "model"?}` in, `{"results": [{"flagged", "categories"}]}`
//! out) and an image checker (an image's bytes in, `{"flagged", "categories"?}` out). Both go
//! through the webhooks' destination policy; an answer is read up to [`ANSWER_MAX_BYTES`].

use bytes::Bytes;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE};
use serde::Deserialize;
use url::Url;

use super::client::callers_client;
use super::destination::{validate_webhook_url, DestinationPolicy, PublicOnlyResolver};
use super::failure::Failure;
use crate::config::{Checkers, OnError};

/// Most bytes of a checker's answer that are read; more is an unusable answer.
pub const ANSWER_MAX_BYTES: usize = 64 * 1024;

/// What a checker said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    /// Flagged, with the categories it named (may be none).
    Flagged(Vec<String>),
    /// No usable answer: why, for the log (no URL, no key).
    Unavailable(String),
}

/// The configured checkers and the client that asks them.
pub struct ModerationServices {
    prompt: Option<Url>,
    image: Option<Url>,
    api_key: Option<String>,
    model: Option<String>,
    on_error: OnError,
    client: reqwest::Client,
}

#[derive(Deserialize)]
struct PromptAnswer {
    results: Vec<Flag>,
}

#[derive(Deserialize)]
struct Flag {
    flagged: bool,
    #[serde(default)]
    categories: serde_json::Map<String, serde_json::Value>,
}

impl ModerationServices {
    /// The services `settings` configures, or None when it names neither; `Err` names the
    /// setting whose URL the destination policy refuses.
    pub fn new(
        settings: &Checkers,
        policy: DestinationPolicy,
        user_agent: &str,
    ) -> Result<Option<ModerationServices>, String> {
        if settings.prompt_url.is_none() && settings.image_url.is_none() {
            return Ok(None);
        }
        let url = |key: &str, raw: &Option<String>| -> Result<Option<Url>, String> {
            raw.as_deref()
                .map(|raw| {
                    validate_webhook_url(raw, &policy).map_err(|e| {
                        format!(
                            "moderation.{key} {e} (the webhooks' destination rules apply; \
                             webhook_allow_http and webhook_allow_private relax them)"
                        )
                    })
                })
                .transpose()
        };
        let client = callers_client(
            "moderation",
            policy,
            PublicOnlyResolver::new(policy.allow_private),
            settings.timeout,
            user_agent,
        )?
        .build()
        .map_err(|e| format!("moderation client: {e}"))?;
        Ok(Some(ModerationServices {
            prompt: url("prompt_url", &settings.prompt_url)?,
            image: url("image_url", &settings.image_url)?,
            api_key: settings.api_key.clone(),
            model: settings.model.clone(),
            on_error: settings.on_error,
            client,
        }))
    }

    /// Whether prompts are checked.
    pub fn checks_prompts(&self) -> bool {
        self.prompt.is_some()
    }

    /// Whether result images are checked.
    pub fn checks_images(&self) -> bool {
        self.image.is_some()
    }

    /// What to do when a checker cannot be asked.
    pub fn on_error(&self) -> OnError {
        self.on_error
    }

    /// Ask the prompt checker about `text` (Pass when none is configured).
    pub async fn check_prompt(&self, text: &str) -> Verdict {
        let Some(url) = &self.prompt else {
            return Verdict::Pass;
        };
        let mut body = serde_json::json!({ "input": text });
        if let Some(model) = &self.model {
            body["model"] = model.clone().into();
        }
        let request = self.client.post(url.clone()).json(&body);
        match self.ask(request).await {
            Ok(answer) => match serde_json::from_slice::<PromptAnswer>(&answer) {
                Ok(answer) if !answer.results.is_empty() => {
                    let flagged: Vec<&Flag> = answer.results.iter().filter(|r| r.flagged).collect();
                    if flagged.is_empty() {
                        Verdict::Pass
                    } else {
                        Verdict::Flagged(categories(flagged.into_iter()))
                    }
                }
                _ => Verdict::Unavailable("the prompt checker's answer has no results".into()),
            },
            Err(why) => Verdict::Unavailable(why),
        }
    }

    /// Ask the image checker about one image (`content_type` its format), Pass when none is
    /// configured.
    pub async fn check_image(&self, image: Bytes, content_type: &'static str) -> Verdict {
        let Some(url) = &self.image else {
            return Verdict::Pass;
        };
        let request = self
            .client
            .post(url.clone())
            .header(CONTENT_TYPE, content_type)
            .body(image);
        match self.ask(request).await {
            Ok(answer) => match serde_json::from_slice::<Flag>(&answer) {
                Ok(flag) if flag.flagged => Verdict::Flagged(categories(std::iter::once(&flag))),
                Ok(_) => Verdict::Pass,
                Err(_) => Verdict::Unavailable(
                    "the image checker's answer is not {\"flagged\": bool}".into(),
                ),
            },
            Err(why) => Verdict::Unavailable(why),
        }
    }

    /// Send `request` with the key, and read a 2xx answer up to [`ANSWER_MAX_BYTES`].
    async fn ask(&self, mut request: reqwest::RequestBuilder) -> Result<Vec<u8>, String> {
        if let Some(key) = &self.api_key {
            request = request.header(AUTHORIZATION, format!("Bearer {key}"));
        }
        let mut response = request.send().await.map_err(unreachable)?;
        if !response.status().is_success() {
            return Err(format!(
                "the checker answered {}",
                response.status().as_u16()
            ));
        }
        let mut answer = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(unreachable)? {
            if answer.len() + chunk.len() > ANSWER_MAX_BYTES {
                return Err(format!(
                    "the checker's answer is over {ANSWER_MAX_BYTES} bytes"
                ));
            }
            answer.extend_from_slice(&chunk);
        }
        Ok(answer)
    }
}

/// The categories marked true in the flagged results, sorted, each once.
fn categories<'a>(flags: impl Iterator<Item = &'a Flag>) -> Vec<String> {
    let mut named: Vec<String> = flags
        .flat_map(|f| f.categories.iter())
        .filter(|(_, on)| on.as_bool() == Some(true))
        .map(|(name, _)| name.clone())
        .collect();
    named.sort();
    named.dedup();
    named
}

/// Why a checker could not be asked, without its URL.
fn unreachable(e: reqwest::Error) -> String {
    format!("could not reach the checker ({:?})", Failure::of(&e))
}
