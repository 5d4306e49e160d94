//! The images API's requests and answers: generations, edits and variations, and the images
//! they answer with (base64, or a URL to fetch).

use std::borrow::Cow;

use bytes::Bytes;
use futures::future::try_join_all;
use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION};
use reqwest::multipart::{Form, Part};
use reqwest::{Response, StatusCode};
use serde::Deserialize;
use serde_json::{json, Value};

use super::family::Family;
use crate::config::backends::Dialect;
use crate::generate::backends::answers::{blocking, Base64Text};
use crate::generate::backends::edits::size_for;
use crate::generate::backends::http::{excerpt, http_client, status_error, transport_error};
use crate::generate::backends::sdcpp;
use crate::generate::backends::tls::Trust;
use crate::generate::backends::BackendConfig;
use crate::generate::{GenerateError, Job, Progress};
use crate::images::{encode_png, RgbaImage};

/// Largest answer read from the backend (JSON with base64 images, or one image file).
const MAX_ANSWER: usize = 64 * 1024 * 1024;

/// The HTTP client of one server that speaks the images API.
pub(super) struct Client {
    /// The API base, `/v1` included, without a trailing `/`.
    base: url::Url,
    pub(super) family: Family,
    /// `Bearer <key>`, marked sensitive; `None` for a local server without keys.
    auth: Option<HeaderValue>,
    /// The key, only to blank it out of any message that might echo it.
    key: Option<String>,
    http: reqwest::Client,
    model: Option<String>,
    dialect: Option<Dialect>,
}

impl Client {
    pub(super) fn new(config: &BackendConfig) -> Result<Client, String> {
        let name = &config.name;
        let url = config
            .url
            .as_deref()
            .ok_or_else(|| format!("backends.{name}.url: is required for an openai backend"))?;
        let base = url::Url::parse(url.trim_end_matches('/'))
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
            .ok_or_else(|| format!("backends.{name}.url: must be an http or https URL"))?;
        let key = config.api_key()?;
        let auth = match &key {
            None => None,
            Some(key) => {
                let mut value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                    format!("backends.{name}.api_key: holds characters a header cannot carry")
                })?;
                value.set_sensitive(true);
                Some(value)
            }
        };
        Ok(Client {
            base,
            family: Family::of(config.model.as_deref()),
            auth,
            key,
            http: http_client(name, config.timeout, &Trust::of(config)?)?,
            model: config.model.clone(),
            dialect: config.dialect,
        })
    }

    pub(super) fn endpoint(&self, path: &str) -> String {
        format!("{}/{path}", self.base.as_str().trim_end_matches('/'))
    }

    pub(super) fn with_auth(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.auth {
            Some(auth) => request.header(AUTHORIZATION, auth.clone()),
            None => request,
        }
    }

    /// `text` with the key blanked out, should a server have echoed it.
    fn scrub(&self, text: String) -> String {
        match &self.key {
            Some(key) if !key.is_empty() && text.contains(key.as_str()) => text.replace(key, "***"),
            _ => text,
        }
    }

    /// The prompt to send for `text`: without sd-server's tags, which no caller may set, and, for
    /// a server of the sd-cpp dialect, followed by the job's settings (and an edit's
    /// `strength`) where it reads them.
    pub(super) fn prompt(&self, job: &Job, text: &str, strength: Option<f64>) -> String {
        match self.dialect {
            Some(Dialect::SdCpp) => sdcpp::with_extra_args(text, job, strength),
            None => sdcpp::neutralize(text).into_owned(),
        }
    }

    /// `GET models`, which any working server answers.
    pub(super) fn models(&self) -> reqwest::RequestBuilder {
        self.with_auth(self.http.get(self.endpoint("models")))
    }

    /// `POST /images/generations`: four images in one request, or in four at once where the
    /// model makes one a request.
    pub(super) async fn generations(
        &self,
        job: &Job,
        progress: &Progress,
    ) -> Result<Vec<Answer>, GenerateError> {
        let (w, h) = match self.family {
            Family::Other => size_for(job, 64),
            family => family.size(job.aspect.width, job.aspect.height, job.image_size),
        };
        let prompt = self.prompt(job, &job.prompt, None);
        let body = |n: u32| {
            let mut body = json!({ "prompt": prompt, "n": n, "size": format!("{w}x{h}") });
            if let Some(model) = &self.model {
                body["model"] = json!(model);
            }
            if self.family.takes_response_format() {
                body["response_format"] = json!("b64_json");
            }
            body
        };
        let url = self.endpoint("images/generations");
        if self.family.batches() {
            let request = self.http.post(&url).json(&body(4));
            return self.images(request, 4, Some(progress)).await;
        }
        let done = std::sync::atomic::AtomicI64::new(0);
        let (done, url, body) = (&done, &url, &body);
        let one = move |_| async move {
            let request = self.http.post(url.as_str()).json(&body(1));
            // One image of four: the job is not done when this one is.
            let answer = self.images(request, 1, None).await?;
            let n = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            progress.report(n * 20);
            Ok::<_, GenerateError>(answer)
        };
        Ok(try_join_all((0..4).map(one))
            .await?
            .into_iter()
            .flatten()
            .collect())
    }

    /// `POST /images/edits`: four edits of `image` (where `mask` is fully transparent, or
    /// anywhere without one).
    pub(super) async fn edits(
        &self,
        image: &RgbaImage,
        mask: Option<&RgbaImage>,
        prompt: &str,
        (w, h): (u32, u32),
        progress: &Progress,
    ) -> Result<Vec<Answer>, GenerateError> {
        let (image, mask) = (image.clone(), mask.cloned());
        let (image, mask) =
            blocking(move || (encode_png(&image), mask.as_ref().map(encode_png))).await?;
        let mut form = self.form();
        form = form
            .text("prompt", prompt.to_string())
            .text("n", "4")
            .text("size", format!("{w}x{h}"));
        if self.family.takes_response_format() {
            form = form.text("response_format", "b64_json");
        }
        form = form.part("image", png_part(image, "image.png")?);
        if let Some(mask) = mask {
            form = form.part("mask", png_part(mask, "mask.png")?);
        }
        let request = self
            .http
            .post(self.endpoint("images/edits"))
            .multipart(form);
        self.images(request, 4, Some(progress)).await
    }

    /// `POST /images/variations` (dall-e-2 only): four variations of `image`.
    pub(super) async fn variations(
        &self,
        image: &RgbaImage,
        (w, h): (u32, u32),
        progress: &Progress,
    ) -> Result<Vec<Answer>, GenerateError> {
        let image = image.clone();
        let png = blocking(move || encode_png(&image)).await?;
        let form = self
            .form()
            .text("n", "4")
            .text("size", format!("{w}x{h}"))
            .text("response_format", "b64_json")
            .part("image", png_part(png, "image.png")?);
        let request = self
            .http
            .post(self.endpoint("images/variations"))
            .multipart(form);
        self.images(request, 4, Some(progress)).await
    }

    /// A form that names the model, when one is set.
    fn form(&self) -> Form {
        match &self.model {
            Some(model) => Form::new().text("model", model.clone()),
            None => Form::new(),
        }
    }

    /// Send an images request and read its `data`: `n` images, each base64 or a URL. With
    /// `whole_job`, the request is the job's only one: once it is answered with success the
    /// backend has made the images, and its slot goes to the next job while the answer is read.
    pub(super) async fn images(
        &self,
        request: reqwest::RequestBuilder,
        n: usize,
        whole_job: Option<&Progress>,
    ) -> Result<Vec<Answer>, GenerateError> {
        let mut response = self
            .with_auth(request)
            .send()
            .await
            .map_err(|e| transport_error(&e))?;
        let status = response.status();
        if let (true, Some(progress)) = (status.is_success(), whole_job) {
            progress.backend_done();
        }
        let headers = response.headers().clone();
        let body = read_capped(&mut response).await?;
        if !status.is_success() {
            return Err(self.answer_error(status, &headers, &body));
        }
        // The base64 is read where it lies in the body, not copied into strings of its own.
        let body = Bytes::from(body);
        let answer: ImagesAnswer = serde_json::from_slice(&body).map_err(|e| {
            GenerateError::Failed(format!(
                "the backend's answer is not the images JSON ({e}): {}",
                self.scrub(excerpt(&String::from_utf8_lossy(&body)))
            ))
        })?;
        if answer.data.len() != n {
            return Err(GenerateError::Failed(format!(
                "the backend answered {} images where {n} were asked for",
                answer.data.len()
            )));
        }
        answer
            .data
            .into_iter()
            .enumerate()
            .map(|(i, item)| match (item.b64_json, item.url) {
                (Some(Base64Text(b64)), _) => Ok(Answer::Base64(match b64 {
                    Cow::Borrowed(b64) => body.slice_ref(b64),
                    // Escaped (`\/`): unescaped into bytes of their own.
                    Cow::Owned(b64) => b64.into(),
                })),
                (None, Some(url)) => Ok(Answer::Url(url)),
                (None, None) => Err(GenerateError::Failed(format!(
                    "image {} of the backend's answer has neither b64_json nor url",
                    i + 1
                ))),
            })
            .collect()
    }

    /// A failed answer, sorted: the model's content filter is a refusal; a rejected key says so
    /// without the body (OpenAI's quotes part of the key); the rest as any backend's.
    pub(super) fn answer_error(
        &self,
        status: StatusCode,
        headers: &HeaderMap,
        body: &[u8],
    ) -> GenerateError {
        let text = String::from_utf8_lossy(body);
        let error = serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|v| v.get("error").cloned());
        let field = |name: &str| {
            error
                .as_ref()
                .and_then(|e| e.get(name))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let message = field("message");
        let refused = [field("code"), field("type")]
            .iter()
            .flatten()
            .any(|c| c == "content_policy_violation" || c == "moderation_blocked");
        if refused {
            let message = message.unwrap_or_else(|| "the backend refused the prompt".into());
            return GenerateError::Refused(self.scrub(excerpt(&message)));
        }
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            return GenerateError::Failed(format!(
                "the backend refused the key (HTTP {})",
                status.as_u16()
            ));
        }
        let detail = message.unwrap_or_else(|| text.into_owned());
        status_error(status, headers, &self.scrub(detail))
    }

    /// The file of one answered image: its base64 as it came (decoded where the file is kept,
    /// off the async runtime and after the backend's slot is given back), or fetched from its
    /// URL with the same client (with the key only when the URL is on the API's own origin).
    pub(super) async fn image_file(&self, answer: Answer) -> Result<Sent, GenerateError> {
        match answer {
            Answer::Base64(b64) => Ok(Sent::Base64(b64)),
            Answer::Url(url) => {
                let url = self
                    .base
                    .join(&url)
                    .ok()
                    .filter(|u| matches!(u.scheme(), "http" | "https"))
                    .ok_or_else(|| {
                        GenerateError::Failed("the backend answered an unusable image URL".into())
                    })?;
                let same_origin = url.origin() == self.base.origin();
                let mut request = self.http.get(url);
                if same_origin {
                    request = self.with_auth(request);
                }
                let mut response = request.send().await.map_err(|e| transport_error(&e))?;
                let status = response.status();
                let headers = response.headers().clone();
                let body = read_capped(&mut response).await?;
                if !status.is_success() {
                    return Err(status_error(
                        status,
                        &headers,
                        "fetching an image the backend made",
                    ));
                }
                Ok(Sent::Bytes(body))
            }
        }
    }
}

/// One image of an answer, as the backend gave it.
pub(super) enum Answer {
    /// The base64 text, a slice of the answer's body where it needed no unescaping.
    Base64(Bytes),
    Url(String),
}

/// One image's file: base64 text, or the bytes fetched from its URL.
pub(super) enum Sent {
    Base64(Bytes),
    Bytes(Vec<u8>),
}

impl Sent {
    /// Its length as it came, base64 or not.
    pub(super) fn len(&self) -> usize {
        match self {
            Sent::Base64(b64) => b64.len(),
            Sent::Bytes(bytes) => bytes.len(),
        }
    }

    /// The file's bytes (decoding its base64: CPU work).
    pub(super) fn bytes(&self) -> Result<Cow<'_, [u8]>, GenerateError> {
        match self {
            Sent::Bytes(bytes) => Ok(Cow::Borrowed(bytes)),
            Sent::Base64(b64) => base64_simd::STANDARD
                .decode_to_vec(b64.trim_ascii())
                .map(Cow::Owned)
                .map_err(|e| {
                    GenerateError::Failed(format!("the backend's b64_json is not base64: {e}"))
                }),
        }
    }
}

#[derive(Deserialize)]
struct ImagesAnswer<'a> {
    #[serde(borrow)]
    data: Vec<ImageItem<'a>>,
}

#[derive(Deserialize)]
struct ImageItem<'a> {
    #[serde(default, borrow)]
    b64_json: Option<Base64Text<'a>>,
    #[serde(default)]
    url: Option<String>,
}

/// A body, up to [`MAX_ANSWER`] bytes: a connection dropped part-way is transient, a larger
/// body is the backend's fault.
async fn read_capped(response: &mut Response) -> Result<Vec<u8>, GenerateError> {
    // Sized once when the length is told: an answer of four images is megabytes.
    let told = response
        .content_length()
        .unwrap_or(0)
        .min(MAX_ANSWER as u64);
    let mut body = Vec::with_capacity(told as usize);
    while let Some(chunk) = response.chunk().await.map_err(|e| transport_error(&e))? {
        if body.len() + chunk.len() > MAX_ANSWER {
            return Err(GenerateError::Failed(format!(
                "the backend's answer is larger than {} MiB",
                MAX_ANSWER / (1024 * 1024)
            )));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A PNG file part of a form.
fn png_part(png: Vec<u8>, file_name: &'static str) -> Result<Part, GenerateError> {
    Part::bytes(png)
        .file_name(file_name)
        .mime_str("image/png")
        .map_err(|e| GenerateError::Failed(format!("cannot build the form: {e}")))
}

#[cfg(test)]
mod answer_tests {
    use super::*;

    /// The images' base64 is read where it lies in the answer's body: no copy of megabytes.
    #[test]
    fn the_images_base64_is_a_slice_of_the_body() {
        let body = br#"{"created": 1, "data": [{"b64_json": "aGVsbG8=", "revised_prompt": "x"}]}"#;
        let answer: ImagesAnswer = serde_json::from_slice(body).unwrap();
        let Some(Base64Text(Cow::Borrowed(b64))) = &answer.data[0].b64_json else {
            panic!("the base64 was copied out of the body");
        };
        assert_eq!(*b64, b"aGVsbG8=");
        assert!(body.as_ptr_range().contains(&b64.as_ptr()));
    }
}
