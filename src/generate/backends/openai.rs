//! The `openai` kind: OpenAI's images API, and the servers that speak it (LocalAI,
//! stable-diffusion.cpp's server). New images come from `POST /images/generations`; everything
//! made from a parent (variations, pan, outpaint, inpaint, blend) from `POST /images/edits`, with
//! a mask whose fully transparent pixels mark what to redraw. dall-e-2's variations use
//! `POST /images/variations`, because its edits need a mask or a transparent image.
//!
//! What each model accepts (sizes, `n`, `response_format`) is known for OpenAI's own models; any
//! other model is taken to be a local server's, asked for the job's own size.

use std::time::Duration;

use base64::Engine as _;
use futures::future::{try_join_all, BoxFuture};
use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use reqwest::{Client, Response, StatusCode};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{decode_output, size_for, status_error, transport_error, BackendConfig};
use crate::domain::operation::PanDirection;
use crate::domain::{OpKind, Operation};
use crate::generate::ops::{self, mask_redraws, Direction};
use crate::generate::raster::{dimensions, encode_png, RgbaImage};
use crate::generate::{GenerateError, Generator, Job, Product, Progress};

/// Largest answer read from the backend (JSON with base64 images, or one image file).
const MAX_ANSWER: usize = 64 * 1024 * 1024;

/// The prompt of a blend, which has none of its own.
const BLEND_PROMPT: &str = "a blend of these images";

/// What a model accepts, by its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    DallE2,
    DallE3,
    /// gpt-image-1 and its siblings: always base64, no `response_format`.
    GptImage,
    /// A local server's model (or none named): the job's own size, base64 asked for.
    Other,
}

impl Family {
    fn of(model: Option<&str>) -> Family {
        match model {
            Some("dall-e-2") => Family::DallE2,
            Some("dall-e-3") => Family::DallE3,
            Some(m) if m.starts_with("gpt-image") || m.starts_with("chatgpt-image") => {
                Family::GptImage
            }
            _ => Family::Other,
        }
    }

    /// Whether it takes `n` above 1 (dall-e-3 makes one image a request).
    fn batches(self) -> bool {
        self != Family::DallE3
    }

    /// Whether it takes `response_format` (gpt-image models reject it and answer base64).
    fn takes_response_format(self) -> bool {
        self != Family::GptImage
    }

    /// Whether `/images/edits` serves it (OpenAI's edits take dall-e-2 and gpt-image models).
    fn edits(self) -> bool {
        self != Family::DallE3
    }

    /// The size to ask for an image of aspect `aw:ah`: the nearest shape the model accepts, or,
    /// for a local server, that aspect at `image_size` rounded to multiples of 64.
    fn size(self, aw: u32, ah: u32, image_size: u32) -> (u32, u32) {
        let nearest = |sizes: &[(u32, u32)]| {
            let want = (f64::from(aw.max(1)) / f64::from(ah.max(1))).ln();
            let off = |&(w, h): &(u32, u32)| (want - (f64::from(w) / f64::from(h)).ln()).abs();
            sizes
                .iter()
                .copied()
                .min_by(|a, b| off(a).total_cmp(&off(b)))
                .unwrap_or((1024, 1024))
        };
        match self {
            // Square only; the smallest that is not smaller than asked.
            Family::DallE2 => match image_size {
                0..=256 => (256, 256),
                257..=512 => (512, 512),
                _ => (1024, 1024),
            },
            Family::DallE3 => nearest(&[(1024, 1024), (1792, 1024), (1024, 1792)]),
            Family::GptImage => nearest(&[(1024, 1024), (1536, 1024), (1024, 1536)]),
            Family::Other => {
                let (w, h) = dimensions(aw, ah, image_size);
                (round64(w), round64(h))
            }
        }
    }
}

/// As `size_for(job, 64)` rounds a side.
fn round64(v: u32) -> u32 {
    (v.saturating_add(32) / 64).max(1) * 64
}

/// A backend speaking OpenAI's images API.
pub struct OpenAi {
    config: BackendConfig,
    /// The API base, `/v1` included, without a trailing `/`.
    base: url::Url,
    family: Family,
    /// `Bearer <key>`, marked sensitive; `None` for a local server without keys.
    auth: Option<HeaderValue>,
    /// The key, only to blank it out of any message that might echo it.
    key: Option<String>,
    client: Client,
}

impl OpenAi {
    pub fn new(config: &BackendConfig) -> Result<OpenAi, String> {
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
        let client = Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(config.timeout.min(Duration::from_secs(10)))
            .build()
            .map_err(|e| format!("backends.{name}: cannot build an HTTP client: {e}"))?;
        Ok(OpenAi {
            config: config.clone(),
            base,
            family: Family::of(config.model.as_deref()),
            auth,
            key,
            client,
        })
    }

    fn endpoint(&self, path: &str) -> String {
        format!("{}/{path}", self.base.as_str().trim_end_matches('/'))
    }

    fn with_auth(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
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

    /// The job, without the timeout.
    async fn generate(&self, job: &Job, progress: &Progress) -> Result<Product, GenerateError> {
        let kind = job.operation.kind();
        if !self.supports(kind) {
            return Err(GenerateError::Failed(format!(
                "backend {} cannot run {kind}",
                self.config.name
            )));
        }
        let parent = || {
            job.inputs
                .first()
                .cloned()
                .ok_or_else(|| GenerateError::Failed("the input image is missing".into()))
        };
        let images = match &job.operation {
            Operation::Imagine | Operation::Reroll => self.generations(job, progress).await?,
            Operation::Variations { .. } => {
                let parent = parent()?;
                let size = self
                    .family
                    .size(parent.width, parent.height, job.image_size);
                let image = blocking(move || ops::resize(&parent, size.0, size.1)).await?;
                if self.family == Family::DallE2 {
                    self.variations(&image, size).await?
                } else {
                    let prompt = if job.prompt.is_empty() {
                        "a variation of this image"
                    } else {
                        &job.prompt
                    };
                    self.edits(&image, None, prompt, size).await?
                }
            }
            Operation::Pan { direction, .. } => {
                let parent = parent()?;
                let direction = match direction {
                    PanDirection::Up => Direction::Up,
                    PanDirection::Down => Direction::Down,
                    PanDirection::Left => Direction::Left,
                    PanDirection::Right => Direction::Right,
                };
                let (cw, ch) = ops::pan_size(parent.width, parent.height, direction);
                let size = self.family.size(cw, ch, job.image_size);
                let (image, mask) = blocking(move || pan_canvas(&parent, direction, size)).await?;
                self.edits(&image, Some(&mask), &job.prompt, size).await?
            }
            Operation::Outpaint { zoom_ratio, .. } => {
                let parent = parent()?;
                let size = self
                    .family
                    .size(parent.width, parent.height, job.image_size);
                let zoom = *zoom_ratio;
                let (image, mask) = blocking(move || outpaint_canvas(&parent, zoom, size)).await?;
                self.edits(&image, Some(&mask), &job.prompt, size).await?
            }
            Operation::Inpaint { .. } => {
                let parent = parent()?;
                let mask = job
                    .mask
                    .clone()
                    .ok_or_else(|| GenerateError::Failed("the inpaint mask is missing".into()))?;
                let size = self
                    .family
                    .size(parent.width, parent.height, job.image_size);
                let (image, mask) = blocking(move || {
                    (
                        ops::resize(&parent, size.0, size.1),
                        nearest(&edit_mask(&mask), size.0, size.1),
                    )
                })
                .await?;
                self.edits(&image, Some(&mask), &job.prompt, size).await?
            }
            // The first image, redrawn toward a blend: one image is what every model's edits
            // take (dall-e-2 takes no more).
            Operation::Blend { .. } => {
                let first = parent()?;
                let size = self
                    .family
                    .size(job.aspect.width, job.aspect.height, job.image_size);
                let image = blocking(move || ops::resize(&first, size.0, size.1)).await?;
                let prompt = if job.prompt.is_empty() {
                    BLEND_PROMPT.to_string()
                } else {
                    format!("{BLEND_PROMPT}: {}", job.prompt)
                };
                self.edits(&image, None, &prompt, size).await?
            }
            _ => {
                return Err(GenerateError::Failed(format!(
                    "backend {} cannot run {kind}",
                    self.config.name
                )))
            }
        };
        progress.report(80);
        let files = try_join_all(images.into_iter().map(|a| self.image_bytes(a))).await?;
        progress.report(90);
        blocking(move || grid(&files)).await?
    }

    /// `POST /images/generations`: four images in one request, or in four at once where the
    /// model makes one a request.
    async fn generations(
        &self,
        job: &Job,
        progress: &Progress,
    ) -> Result<Vec<Answer>, GenerateError> {
        let (w, h) = match self.family {
            Family::Other => size_for(job, 64),
            family => family.size(job.aspect.width, job.aspect.height, job.image_size),
        };
        let body = |n: u32| {
            let mut body = json!({ "prompt": job.prompt, "n": n, "size": format!("{w}x{h}") });
            if let Some(model) = &self.config.model {
                body["model"] = json!(model);
            }
            if self.family.takes_response_format() {
                body["response_format"] = json!("b64_json");
            }
            body
        };
        let url = self.endpoint("images/generations");
        if self.family.batches() {
            let request = self.client.post(&url).json(&body(4));
            return self.images(request, 4).await;
        }
        let done = std::sync::atomic::AtomicI64::new(0);
        let (done, url, body) = (&done, &url, &body);
        let one = move |_| async move {
            let request = self.client.post(url.as_str()).json(&body(1));
            let answer = self.images(request, 1).await?;
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
    async fn edits(
        &self,
        image: &RgbaImage,
        mask: Option<&RgbaImage>,
        prompt: &str,
        (w, h): (u32, u32),
    ) -> Result<Vec<Answer>, GenerateError> {
        let mut form = Multipart::new();
        if let Some(model) = &self.config.model {
            form.text("model", model);
        }
        form.text("prompt", prompt);
        form.text("n", "4");
        form.text("size", &format!("{w}x{h}"));
        if self.family.takes_response_format() {
            form.text("response_format", "b64_json");
        }
        let (image, mask) = (image.clone(), mask.cloned());
        let (image, mask) =
            blocking(move || (encode_png(&image), mask.as_ref().map(encode_png))).await?;
        form.file("image", "image.png", &image);
        if let Some(mask) = &mask {
            form.file("mask", "mask.png", mask);
        }
        self.images(
            form.into_request(&self.client, &self.endpoint("images/edits")),
            4,
        )
        .await
    }

    /// `POST /images/variations` (dall-e-2 only): four variations of `image`.
    async fn variations(
        &self,
        image: &RgbaImage,
        (w, h): (u32, u32),
    ) -> Result<Vec<Answer>, GenerateError> {
        let mut form = Multipart::new();
        if let Some(model) = &self.config.model {
            form.text("model", model);
        }
        form.text("n", "4");
        form.text("size", &format!("{w}x{h}"));
        form.text("response_format", "b64_json");
        let image = image.clone();
        let png = blocking(move || encode_png(&image)).await?;
        form.file("image", "image.png", &png);
        let url = self.endpoint("images/variations");
        self.images(form.into_request(&self.client, &url), 4).await
    }

    /// Send an images request and read its `data`: `n` images, each base64 or a URL.
    async fn images(
        &self,
        request: reqwest::RequestBuilder,
        n: usize,
    ) -> Result<Vec<Answer>, GenerateError> {
        let mut response = self
            .with_auth(request)
            .send()
            .await
            .map_err(|e| transport_error(&e))?;
        let status = response.status();
        let headers = response.headers().clone();
        let body = read_capped(&mut response).await?;
        if !status.is_success() {
            return Err(self.answer_error(status, &headers, &body));
        }
        let answer: ImagesAnswer = serde_json::from_slice(&body).map_err(|e| {
            GenerateError::Failed(format!(
                "the backend's answer is not the images JSON ({e}): {}",
                self.scrub(super::excerpt(&String::from_utf8_lossy(&body)))
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
                (Some(b64), _) => Ok(Answer::Base64(b64)),
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
    fn answer_error(&self, status: StatusCode, headers: &HeaderMap, body: &[u8]) -> GenerateError {
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
            return GenerateError::Refused(self.scrub(super::excerpt(&message)));
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

    /// The file of one answered image: decoded from base64, or fetched from its URL with the
    /// same client (with the key only when the URL is on the API's own origin).
    async fn image_bytes(&self, answer: Answer) -> Result<Vec<u8>, GenerateError> {
        match answer {
            Answer::Base64(b64) => base64::engine::general_purpose::STANDARD
                .decode(b64.trim())
                .map_err(|e| {
                    GenerateError::Failed(format!("the backend's b64_json is not base64: {e}"))
                }),
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
                let mut request = self.client.get(url);
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
                Ok(body)
            }
        }
    }
}

impl Generator for OpenAi {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn supports(&self, kind: OpKind) -> bool {
        let edit = matches!(
            kind,
            OpKind::Variations | OpKind::Pan | OpKind::Outpaint | OpKind::Inpaint | OpKind::Blend
        );
        self.config.runs(kind)
            && (matches!(kind, OpKind::Imagine | OpKind::Reroll) || edit && self.family.edits())
    }

    fn run<'a>(
        &'a self,
        job: &'a Job,
        progress: &'a Progress,
    ) -> BoxFuture<'a, Result<Product, GenerateError>> {
        Box::pin(async move {
            // The images API has no cancel endpoint: past the timeout the requests are dropped,
            // which closes their connections; that is all a client can do to stop the work.
            match tokio::time::timeout(self.config.timeout, self.generate(job, progress)).await {
                Ok(result) => result,
                Err(_) => Err(GenerateError::transient(format!(
                    "timed out after {}",
                    humantime::format_duration(self.config.timeout)
                ))),
            }
        })
    }

    fn probe(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let request = self
                .with_auth(self.client.get(self.endpoint("models")))
                .timeout(self.config.timeout.min(Duration::from_secs(10)));
            match request.send().await {
                Ok(response) if response.status().is_success() => Ok(()),
                Ok(response) => Err(format!(
                    "GET models answered HTTP {}",
                    response.status().as_u16()
                )),
                Err(e) => Err(match transport_error(&e) {
                    GenerateError::Transient { message, .. } => message,
                    other => other.to_string(),
                }),
            }
        })
    }
}

/// One image of an answer, as the backend gave it.
enum Answer {
    Base64(String),
    Url(String),
}

#[derive(Deserialize)]
struct ImagesAnswer {
    data: Vec<ImageItem>,
}

#[derive(Deserialize)]
struct ImageItem {
    #[serde(default)]
    b64_json: Option<String>,
    #[serde(default)]
    url: Option<String>,
}

/// A body, up to [`MAX_ANSWER`] bytes: a connection dropped part-way is transient, a larger
/// body is the backend's fault.
async fn read_capped(response: &mut Response) -> Result<Vec<u8>, GenerateError> {
    let mut body = Vec::new();
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

/// CPU work (resampling, PNG coding) off the async runtime.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, GenerateError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| GenerateError::Failed(format!("image work crashed: {e}")))
}

/// The four files decoded, checked to be one size, and their grid.
fn grid(files: &[Vec<u8>]) -> Result<Product, GenerateError> {
    let images = files
        .iter()
        .enumerate()
        .map(|(i, bytes)| decode_output(bytes, &format!("image {}", i + 1)))
        .collect::<Result<Vec<_>, _>>()?;
    let images: [RgbaImage; 4] = images.try_into().map_err(|v: Vec<RgbaImage>| {
        GenerateError::Failed(format!("the backend made {} images, not 4", v.len()))
    })?;
    let (w, h) = (images[0].width, images[0].height);
    if images.iter().any(|i| (i.width, i.height) != (w, h)) {
        return Err(GenerateError::Failed(
            "the backend made images of different sizes".into(),
        ));
    }
    Ok(Product::grid(&images))
}

/// A fully transparent `w` x `h` image.
fn transparent(w: u32, h: u32) -> RgbaImage {
    RgbaImage {
        width: w,
        height: h,
        data: vec![0; w as usize * h as usize * 4],
    }
}

/// Copy `src` onto `dst` at (`x`, `y`), clipped to `dst`.
fn paste(dst: &mut RgbaImage, src: &RgbaImage, x: u32, y: u32) {
    let (dw, sw) = (dst.width as usize, src.width as usize);
    for row in 0..src.height.min(dst.height.saturating_sub(y)) as usize {
        let n = sw.min(dw.saturating_sub(x as usize)) * 4;
        let from = row * sw * 4;
        let to = ((y as usize + row) * dw + x as usize) * 4;
        dst.data[to..to + n].copy_from_slice(&src.data[from..from + n]);
    }
}

/// `parent` resized into the rectangle (`x`, `y`, `w`, `h`) of a transparent canvas of `size`,
/// and the edit mask: opaque over the parent, transparent (to be drawn) everywhere else.
fn place_on_canvas(
    parent: &RgbaImage,
    (x, y, w, h): (u32, u32, u32, u32),
    (tw, th): (u32, u32),
) -> (RgbaImage, RgbaImage) {
    let mut canvas = transparent(tw, th);
    let mut mask = transparent(tw, th);
    paste(&mut canvas, &ops::resize(parent, w, h), x, y);
    let mut solid = RgbaImage::new(w, h);
    solid.data.fill(255);
    paste(&mut mask, &solid, x, y);
    (canvas, mask)
}

/// Pan: the parent on a canvas extended by half toward `direction`, scaled to `size`.
fn pan_canvas(
    parent: &RgbaImage,
    direction: Direction,
    size: (u32, u32),
) -> (RgbaImage, RgbaImage) {
    let (pw, ph) = (parent.width.max(1), parent.height.max(1));
    let (cw, ch) = ops::pan_size(pw, ph, direction);
    let (x, y) = match direction {
        Direction::Left => (cw - pw, 0),
        Direction::Up => (0, ch - ph),
        Direction::Right | Direction::Down => (0, 0),
    };
    let scale = |v: u32, to: u32, of: u32| {
        ((u64::from(v) * u64::from(to) + u64::from(of) / 2) / u64::from(of.max(1))) as u32
    };
    let (tw, th) = size;
    let (w, h) = (
        scale(pw, tw, cw).clamp(1, tw),
        scale(ph, th, ch).clamp(1, th),
    );
    let (x, y) = (scale(x, tw, cw).min(tw - w), scale(y, th, ch).min(th - h));
    place_on_canvas(parent, (x, y, w, h), size)
}

/// Outpaint: the parent scaled down by `zoom` and centred on a canvas of `size`.
fn outpaint_canvas(parent: &RgbaImage, zoom: f64, size: (u32, u32)) -> (RgbaImage, RgbaImage) {
    let placement = ops::outpaint_placement(parent.width, parent.height, size.0, size.1, zoom);
    place_on_canvas(parent, placement, size)
}

/// easel's inpaint mask as OpenAI's: redrawn pixels fully transparent, the others opaque.
fn edit_mask(mask: &RgbaImage) -> RgbaImage {
    let mut out = transparent(mask.width, mask.height);
    for (from, to) in mask.data.chunks_exact(4).zip(out.data.chunks_exact_mut(4)) {
        if !mask_redraws([from[0], from[1], from[2], from[3]]) {
            to.copy_from_slice(&[255, 255, 255, 255]);
        }
    }
    out
}

/// `src` at `w` x `h` by nearest neighbour, so a mask stays either transparent or opaque.
fn nearest(src: &RgbaImage, w: u32, h: u32) -> RgbaImage {
    let mut out = transparent(w, h);
    if src.width == 0 || src.height == 0 || src.data.len() != (src.width * src.height * 4) as usize
    {
        return out;
    }
    for y in 0..h {
        let sy = (u64::from(y) * u64::from(src.height) / u64::from(h)) as usize;
        for x in 0..w {
            let sx = (u64::from(x) * u64::from(src.width) / u64::from(w)) as usize;
            let from = (sy * src.width as usize + sx) * 4;
            let to = (y as usize * w as usize + x as usize) * 4;
            out.data[to..to + 4].copy_from_slice(&src.data[from..from + 4]);
        }
    }
    out
}

/// A `multipart/form-data` body, built by hand: reqwest's multipart feature is not enabled, and
/// the form is a few text fields and one or two PNG files.
struct Multipart {
    boundary: String,
    body: Vec<u8>,
}

impl Multipart {
    fn new() -> Multipart {
        Multipart {
            boundary: format!("easel-{}", uuid::Uuid::new_v4().simple()),
            body: Vec::new(),
        }
    }

    fn text(&mut self, name: &str, value: &str) {
        let head = format!(
            "--{}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n",
            self.boundary
        );
        self.body.extend_from_slice(head.as_bytes());
        self.body.extend_from_slice(value.as_bytes());
        self.body.extend_from_slice(b"\r\n");
    }

    fn file(&mut self, name: &str, filename: &str, bytes: &[u8]) {
        let head = format!(
            "--{}\r\nContent-Disposition: form-data; name=\"{name}\"; filename=\"{filename}\"\r\nContent-Type: image/png\r\n\r\n",
            self.boundary
        );
        self.body.extend_from_slice(head.as_bytes());
        self.body.extend_from_slice(bytes);
        self.body.extend_from_slice(b"\r\n");
    }

    fn into_request(mut self, client: &Client, url: &str) -> reqwest::RequestBuilder {
        self.body
            .extend_from_slice(format!("--{}--\r\n", self.boundary).as_bytes());
        client
            .post(url)
            .header(
                CONTENT_TYPE,
                format!("multipart/form-data; boundary={}", self.boundary),
            )
            .body(self.body)
    }
}
