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
        let client = super::http_client(config)?;
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
                let direction = Direction::from(*direction);
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
        progress.backend_done();
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
            // A stopped job is dropped the same way.
            tokio::select! {
                timed = tokio::time::timeout(self.config.timeout, self.generate(job, progress)) => {
                    match timed {
                        Ok(result) => result,
                        Err(_) => Err(GenerateError::transient(format!(
                            "timed out after {}",
                            humantime::format_duration(self.config.timeout)
                        ))),
                    }
                }
                _ = progress.stopped() => Err(GenerateError::Canceled),
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
    if src.width == 0
        || src.height == 0
        || src.data.len() != src.width as usize * src.height as usize * 4
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

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Instant;

    use axum::extract::{Request, State};
    use axum::http::header::{AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER};
    use axum::response::{IntoResponse, Response};
    use axum::Router;

    use super::*;
    use crate::domain::operation::PanDirection;
    use crate::domain::operation::{Dimension, ImageInput, StoredImage, VariationOf};
    use crate::domain::AspectRatio;
    use crate::generate::raster::decode_png;

    const KEY: &str = "sk-secret-123";

    /// How the mock server answers the images endpoints.
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Mode {
        Ok,
        Url,
        Status(u16),
        RateLimited,
        Refuse(&'static str),
        KeyEcho,
        BadJson,
        BadBase64,
        NotImage,
        Count(usize),
        MixedSizes,
        Hang,
    }

    struct Part {
        name: String,
        filename: Option<String>,
        data: Vec<u8>,
    }

    struct Seen {
        path: String,
        auth: Option<String>,
        json: Option<Value>,
        form: Vec<Part>,
    }

    impl Seen {
        fn part(&self, name: &str) -> Option<&Part> {
            self.form.iter().find(|p| p.name == name)
        }
        fn text(&self, name: &str) -> Option<String> {
            self.part(name)
                .map(|p| String::from_utf8_lossy(&p.data).into_owned())
        }
        fn png(&self, name: &str) -> RgbaImage {
            let part = self.part(name).expect("file part");
            assert_eq!(part.filename.as_deref(), Some(&format!("{name}.png")[..]));
            decode_png(&part.data).expect("a PNG file")
        }
    }

    struct Mock {
        mode: Mutex<Mode>,
        /// The size of the images it makes; the size asked for when `None`.
        made: Mutex<Option<(u32, u32)>>,
        seen: Mutex<Vec<Seen>>,
        base: Mutex<String>,
        /// A hanging request's handler was dropped: its connection was closed.
        dropped: AtomicBool,
    }

    impl Mock {
        fn seen_at(&self, path: &str) -> Vec<Seen> {
            let mut seen = self.seen.lock().unwrap();
            let (at, rest): (Vec<Seen>, Vec<Seen>) = seen.drain(..).partition(|s| s.path == path);
            *seen = rest;
            at
        }
    }

    struct DropFlag(Arc<Mock>);
    impl Drop for DropFlag {
        fn drop(&mut self) {
            self.0.dropped.store(true, Ordering::SeqCst);
        }
    }

    fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
        hay.windows(needle.len()).position(|w| w == needle)
    }

    /// A small multipart/form-data reader, enough for what the adapter sends.
    fn parse_form(content_type: &str, body: &[u8]) -> Vec<Part> {
        let boundary = content_type.split("boundary=").nth(1).expect("a boundary");
        let delimiter = format!("--{boundary}").into_bytes();
        let mut parts = Vec::new();
        let mut rest = body;
        while let Some(at) = find(rest, &delimiter) {
            rest = &rest[at + delimiter.len()..];
            if rest.starts_with(b"--") {
                break;
            }
            let end = find(rest, &delimiter).expect("a closing delimiter");
            let segment = &rest[2..end - 2]; // the CRLF after the delimiter and before the next
            let split = find(segment, b"\r\n\r\n").expect("part headers");
            let headers = String::from_utf8_lossy(&segment[..split]).into_owned();
            let attr = |key: &str| {
                headers
                    .split(';')
                    .map(str::trim)
                    .find_map(|kv| kv.strip_prefix(&format!("{key}=\"")[..]))
                    .map(|v| v.split('"').next().unwrap_or("").to_string())
            };
            parts.push(Part {
                name: attr("name").expect("a name"),
                filename: attr("filename"),
                data: segment[split + 4..].to_vec(),
            });
        }
        parts
    }

    fn png_of(w: u32, h: u32) -> Vec<u8> {
        let mut image = RgbaImage::new(w, h);
        for (i, px) in image.data.chunks_exact_mut(4).enumerate() {
            px[0] = (i % 251) as u8;
        }
        encode_png(&image)
    }

    fn b64(bytes: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    fn json_response(status: u16, body: Value) -> Response {
        (
            StatusCode::from_u16(status).unwrap(),
            [(CONTENT_TYPE, "application/json")],
            body.to_string(),
        )
            .into_response()
    }

    async fn handle(State(mock): State<Arc<Mock>>, request: Request) -> Response {
        let path = request.uri().path().to_string();
        let auth = request
            .headers()
            .get(AUTHORIZATION)
            .map(|v| v.to_str().unwrap_or("").to_string());
        let content_type = request
            .headers()
            .get(CONTENT_TYPE)
            .map(|v| v.to_str().unwrap_or("").to_string())
            .unwrap_or_default();
        let body = axum::body::to_bytes(request.into_body(), usize::MAX)
            .await
            .unwrap_or_default();
        let (json, form) = if content_type.starts_with("multipart/form-data") {
            (None, parse_form(&content_type, &body))
        } else {
            (serde_json::from_slice::<Value>(&body).ok(), Vec::new())
        };
        let seen = Seen {
            path: path.clone(),
            auth,
            json,
            form,
        };
        let (n, size) = match (&seen.json, seen.text("n")) {
            (Some(j), _) => (
                j["n"].as_u64().unwrap_or(1) as usize,
                j["size"].as_str().unwrap_or("").to_string(),
            ),
            (None, n) => (
                n.and_then(|n| n.parse().ok()).unwrap_or(1),
                seen.text("size").unwrap_or_default(),
            ),
        };
        mock.seen.lock().unwrap().push(seen);
        let mode = *mock.mode.lock().unwrap();
        let made = mock.made.lock().unwrap().unwrap_or_else(|| {
            let mut wh = size.split('x').map(|v| v.parse::<u32>().unwrap_or(8));
            (wh.next().unwrap_or(8), wh.next().unwrap_or(8))
        });
        if path == "/v1/models" {
            return match mode {
                Mode::Status(code) => json_response(code, json!({})),
                _ => json_response(200, json!({ "object": "list", "data": [] })),
            };
        }
        if path.starts_with("/files/") {
            return ([(CONTENT_TYPE, "image/png")], png_of(made.0, made.1)).into_response();
        }
        let images = |count: usize| {
            let png = b64(&png_of(made.0, made.1));
            let data: Vec<Value> = (0..count).map(|_| json!({ "b64_json": png })).collect();
            json_response(200, json!({ "created": 1, "data": data }))
        };
        match mode {
            Mode::Ok => images(n),
            Mode::Count(k) => images(k),
            Mode::Url => {
                let base = mock.base.lock().unwrap().clone();
                let data: Vec<Value> = (0..n)
                    .map(|i| json!({ "url": format!("{base}/files/{i}.png") }))
                    .collect();
                json_response(200, json!({ "data": data }))
            }
            Mode::Status(code) => json_response(
                code,
                json!({ "error": { "message": "boom", "type": "server_error" } }),
            ),
            Mode::RateLimited => (
                StatusCode::TOO_MANY_REQUESTS,
                [(RETRY_AFTER, "7")],
                r#"{"error":{"message":"slow down","type":"requests"}}"#,
            )
                .into_response(),
            Mode::Refuse(code) => json_response(
                400,
                json!({ "error": {
                    "message": "Your request was rejected by the safety system.",
                    "type": "image_generation_user_error",
                    "code": code,
                } }),
            ),
            Mode::KeyEcho => json_response(
                401,
                json!({ "error": {
                    "message": format!("Incorrect API key provided: {KEY}."),
                    "type": "invalid_request_error",
                    "code": "invalid_api_key",
                } }),
            ),
            Mode::BadJson => (
                [(CONTENT_TYPE, "application/json")],
                r#"{"data": [{"b64_json": "#,
            )
                .into_response(),
            Mode::BadBase64 => json_response(
                200,
                json!({ "data": vec![json!({ "b64_json": "%%%" }); n] }),
            ),
            Mode::NotImage => json_response(
                200,
                json!({ "data": vec![json!({ "b64_json": b64(b"hello") }); n] }),
            ),
            Mode::MixedSizes => {
                let a = b64(&png_of(made.0, made.1));
                let b = b64(&png_of(made.0 + 2, made.1));
                json_response(
                    200,
                    json!({ "data": [{ "b64_json": a }, { "b64_json": b }, { "b64_json": a }, { "b64_json": a }] }),
                )
            }
            Mode::Hang => {
                let _flag = DropFlag(mock.clone());
                tokio::time::sleep(Duration::from_secs(60)).await;
                images(n)
            }
        }
    }

    async fn serve(mode: Mode) -> (Arc<Mock>, String) {
        let mock = Arc::new(Mock {
            mode: Mutex::new(mode),
            made: Mutex::new(None),
            seen: Mutex::new(Vec::new()),
            base: Mutex::new(String::new()),
            dropped: AtomicBool::new(false),
        });
        let app = Router::new().fallback(handle).with_state(mock.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let base = format!("http://{addr}");
        *mock.base.lock().unwrap() = base.clone();
        (mock, format!("{base}/v1"))
    }

    fn config(url: &str, model: Option<&str>, key: Option<&str>) -> BackendConfig {
        let mut config: BackendConfig = serde_json::from_value(json!({
            "name": "oa",
            "kind": "openai",
            "url": url,
        }))
        .unwrap();
        config.model = model.map(str::to_string);
        config.api_key = key.map(str::to_string);
        config.timeout = Duration::from_secs(20);
        config
    }

    fn backend(url: &str, model: Option<&str>, key: Option<&str>) -> OpenAi {
        OpenAi::new(&config(url, model, key)).unwrap()
    }

    fn source(image: &RgbaImage) -> StoredImage {
        StoredImage {
            key: "parent".into(),
            width: image.width,
            height: image.height,
        }
    }

    fn job(operation: Operation, aspect: (u32, u32), image_size: u32) -> Job {
        Job {
            operation,
            prompt: "a red fox in snow".into(),
            seed: 7,
            aspect: AspectRatio {
                width: aspect.0,
                height: aspect.1,
            },
            image_size,
            inputs: Vec::new(),
            mask: None,
        }
    }

    fn solid(w: u32, h: u32, rgba: [u8; 4]) -> RgbaImage {
        let mut image = RgbaImage::new(w, h);
        for px in image.data.chunks_exact_mut(4) {
            px.copy_from_slice(&rgba);
        }
        image
    }

    fn px(image: &RgbaImage, x: u32, y: u32) -> [u8; 4] {
        let i = ((y * image.width + x) * 4) as usize;
        image.data[i..i + 4].try_into().unwrap()
    }

    async fn run(backend: &OpenAi, job: &Job) -> Result<Product, GenerateError> {
        backend.run(job, &Progress::default()).await
    }

    fn grid_size(product: &Product) -> (u32, u32) {
        match product {
            Product::Grid { width, height, .. } => (*width, *height),
            other => panic!("not a grid: {other:?}"),
        }
    }

    #[tokio::test]
    async fn gpt_image_imagine_asks_four_at_its_size_and_keeps_what_it_made() {
        let (mock, url) = serve(Mode::Ok).await;
        *mock.made.lock().unwrap() = Some((48, 32));
        let backend = backend(&url, Some("gpt-image-1"), Some(KEY));
        let product = run(&backend, &job(Operation::Imagine, (3, 2), 64))
            .await
            .unwrap();
        assert_eq!(grid_size(&product), (48, 32));
        let seen = mock.seen_at("/v1/images/generations");
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].auth.as_deref(), Some(&format!("Bearer {KEY}")[..]));
        let body = seen[0].json.as_ref().unwrap();
        assert_eq!(body["model"], "gpt-image-1");
        assert_eq!(body["prompt"], "a red fox in snow");
        assert_eq!(body["n"], 4);
        assert_eq!(body["size"], "1536x1024");
        assert!(body.get("response_format").is_none(), "{body}");
    }

    #[tokio::test]
    async fn a_local_model_gets_the_jobs_size_and_base64_without_a_key() {
        let (mock, url) = serve(Mode::Ok).await;
        let backend = backend(&url, Some("sd-turbo"), None);
        let progress = Progress::default();
        let product = backend
            .run(&job(Operation::Reroll, (16, 9), 128), &progress)
            .await
            .unwrap();
        assert_eq!(grid_size(&product), (128, 64));
        assert!(progress.get() >= 80);
        let seen = mock.seen_at("/v1/images/generations");
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].auth, None);
        let body = seen[0].json.as_ref().unwrap();
        assert_eq!(body["model"], "sd-turbo");
        assert_eq!(body["size"], "128x64");
        assert_eq!(body["n"], 4);
        assert_eq!(body["response_format"], "b64_json");
    }

    #[tokio::test]
    async fn dall_e_3_makes_four_requests_and_url_answers_are_fetched() {
        let (mock, url) = serve(Mode::Url).await;
        *mock.made.lock().unwrap() = Some((32, 18));
        let backend = backend(&url, Some("dall-e-3"), Some(KEY));
        let product = run(&backend, &job(Operation::Imagine, (16, 9), 64))
            .await
            .unwrap();
        assert_eq!(grid_size(&product), (32, 18));
        let seen = mock.seen_at("/v1/images/generations");
        assert_eq!(seen.len(), 4);
        for s in &seen {
            let body = s.json.as_ref().unwrap();
            assert_eq!(body["n"], 1);
            assert_eq!(body["size"], "1792x1024");
            assert_eq!(body["model"], "dall-e-3");
            assert_eq!(body["response_format"], "b64_json");
        }
        let files = mock
            .seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.path.starts_with("/files/"))
            .count();
        assert_eq!(files, 4);
        // dall-e-3 has no edits.
        assert!(backend.supports(OpKind::Imagine) && backend.supports(OpKind::Reroll));
        for kind in [
            OpKind::Variations,
            OpKind::Pan,
            OpKind::Inpaint,
            OpKind::Blend,
        ] {
            assert!(!backend.supports(kind), "{kind}");
        }
    }

    #[tokio::test]
    async fn dall_e_2_is_square_and_varies_through_the_variations_endpoint() {
        let (mock, url) = serve(Mode::Ok).await;
        *mock.made.lock().unwrap() = Some((16, 16));
        let backend = backend(&url, Some("dall-e-2"), Some(KEY));
        run(&backend, &job(Operation::Imagine, (16, 9), 64))
            .await
            .unwrap();
        let seen = mock.seen_at("/v1/images/generations");
        assert_eq!(seen[0].json.as_ref().unwrap()["size"], "256x256");

        let parent = solid(40, 30, [10, 200, 30, 255]);
        let mut j = job(
            Operation::Variations {
                of: VariationOf::Index(2),
                source: source(&parent),
            },
            (4, 3),
            512,
        );
        j.inputs = vec![parent];
        let product = run(&backend, &j).await.unwrap();
        assert_eq!(grid_size(&product), (16, 16));
        let seen = mock.seen_at("/v1/images/variations");
        assert_eq!(seen.len(), 1);
        let s = &seen[0];
        assert_eq!(s.auth.as_deref(), Some(&format!("Bearer {KEY}")[..]));
        assert_eq!(s.text("model").as_deref(), Some("dall-e-2"));
        assert_eq!(s.text("n").as_deref(), Some("4"));
        assert_eq!(s.text("size").as_deref(), Some("512x512"));
        assert_eq!(s.text("response_format").as_deref(), Some("b64_json"));
        assert!(s.part("prompt").is_none() && s.part("mask").is_none());
        let image = s.png("image");
        assert_eq!((image.width, image.height), (512, 512));
    }

    #[tokio::test]
    async fn inpaint_sends_the_parent_and_easels_mask_as_transparency() {
        let (mock, url) = serve(Mode::Ok).await;
        let backend = backend(&url, Some("sd-turbo"), None);
        let parent = solid(64, 64, [200, 20, 20, 255]);
        // easel's mask: white (redrawn) on the left half, black (kept) on the right.
        let mut mask = solid(64, 64, [0, 0, 0, 255]);
        for y in 0..64 {
            for x in 0..32 {
                let i = ((y * 64 + x) * 4) as usize;
                mask.data[i..i + 4].copy_from_slice(&[255, 255, 255, 255]);
            }
        }
        let mut j = job(
            Operation::Inpaint {
                source: source(&parent),
                mask: String::new(),
            },
            (1, 1),
            64,
        );
        j.inputs = vec![parent.clone()];
        j.mask = Some(mask);
        let product = run(&backend, &j).await.unwrap();
        assert_eq!(grid_size(&product), (64, 64));
        let seen = mock.seen_at("/v1/images/edits");
        assert_eq!(seen.len(), 1);
        let s = &seen[0];
        assert_eq!(s.text("model").as_deref(), Some("sd-turbo"));
        assert_eq!(s.text("prompt").as_deref(), Some("a red fox in snow"));
        assert_eq!(s.text("n").as_deref(), Some("4"));
        assert_eq!(s.text("size").as_deref(), Some("64x64"));
        assert_eq!(s.text("response_format").as_deref(), Some("b64_json"));
        assert_eq!(s.png("image"), parent);
        let sent = s.png("mask");
        assert_eq!((sent.width, sent.height), (64, 64));
        assert_eq!(px(&sent, 5, 40)[3], 0, "redrawn: transparent");
        assert_eq!(px(&sent, 31, 0)[3], 0);
        assert_eq!(px(&sent, 32, 0)[3], 255, "kept: opaque");
        assert_eq!(px(&sent, 60, 60)[3], 255);
    }

    #[tokio::test]
    async fn pan_and_outpaint_edit_the_transparent_part_of_a_larger_canvas() {
        let (mock, url) = serve(Mode::Ok).await;
        let backend = backend(&url, Some("sd-turbo"), None);
        let red = [220, 10, 10, 255];
        let parent = solid(64, 64, red);
        for (direction, kept, drawn) in [
            (PanDirection::Right, (10, 32), (120, 32)),
            (PanDirection::Left, (120, 32), (10, 32)),
        ] {
            let mut j = job(
                Operation::Pan {
                    direction,
                    source: source(&parent),
                },
                (1, 1),
                128,
            );
            j.inputs = vec![parent.clone()];
            run(&backend, &j).await.unwrap();
            let seen = mock.seen_at("/v1/images/edits");
            let s = &seen[0];
            // A 96x64 canvas at 128 on its long side, in multiples of 64.
            assert_eq!(s.text("size").as_deref(), Some("128x64"));
            let (image, mask) = (s.png("image"), s.png("mask"));
            assert_eq!((image.width, image.height), (128, 64));
            assert_eq!((mask.width, mask.height), (128, 64));
            assert_eq!(px(&image, kept.0, kept.1), red, "{direction:?}");
            assert_eq!(px(&mask, kept.0, kept.1)[3], 255, "{direction:?}");
            assert_eq!(px(&image, drawn.0, drawn.1)[3], 0, "{direction:?}");
            assert_eq!(px(&mask, drawn.0, drawn.1)[3], 0, "{direction:?}");
        }
        let mut down = job(
            Operation::Pan {
                direction: PanDirection::Down,
                source: source(&parent),
            },
            (1, 1),
            128,
        );
        down.inputs = vec![parent.clone()];
        run(&backend, &down).await.unwrap();
        let seen = mock.seen_at("/v1/images/edits");
        assert_eq!(seen[0].text("size").as_deref(), Some("64x128"));
        let mask = seen[0].png("mask");
        assert_eq!((px(&mask, 32, 5)[3], px(&mask, 32, 125)[3]), (255, 0));

        let mut j = job(
            Operation::Outpaint {
                zoom_ratio: 2.0,
                source: source(&parent),
            },
            (1, 1),
            64,
        );
        j.inputs = vec![parent.clone()];
        run(&backend, &j).await.unwrap();
        let seen = mock.seen_at("/v1/images/edits");
        let s = &seen[0];
        assert_eq!(s.text("size").as_deref(), Some("64x64"));
        let (image, mask) = (s.png("image"), s.png("mask"));
        assert_eq!(px(&image, 32, 32), red);
        assert_eq!(px(&mask, 32, 32)[3], 255);
        assert_eq!(px(&mask, 16, 16)[3], 255);
        assert_eq!(px(&mask, 15, 15)[3], 0);
        assert_eq!(px(&mask, 2, 60)[3], 0);
        assert_eq!(px(&image, 2, 60)[3], 0);
    }

    #[tokio::test]
    async fn blend_and_variations_edit_without_a_mask() {
        let (mock, url) = serve(Mode::Ok).await;
        *mock.made.lock().unwrap() = Some((16, 24));
        let backend = backend(&url, Some("gpt-image-1"), Some(KEY));
        let first = solid(30, 30, [1, 2, 3, 255]);
        let mut j = job(
            Operation::Blend {
                dimension: Dimension::Portrait,
                input_image_urls: vec!["a".into(), "b".into()],
                inputs: vec![
                    ImageInput::Url { url: "a".into() },
                    ImageInput::Url { url: "b".into() },
                ],
            },
            (2, 3),
            64,
        );
        j.prompt = String::new();
        j.inputs = vec![first.clone(), solid(20, 20, [9, 9, 9, 255])];
        let product = run(&backend, &j).await.unwrap();
        assert_eq!(grid_size(&product), (16, 24));
        let seen = mock.seen_at("/v1/images/edits");
        let s = &seen[0];
        assert_eq!(s.text("prompt").as_deref(), Some(BLEND_PROMPT));
        assert_eq!(s.text("size").as_deref(), Some("1024x1536"));
        assert_eq!(s.text("model").as_deref(), Some("gpt-image-1"));
        assert!(s.part("mask").is_none() && s.part("response_format").is_none());
        let image = s.png("image");
        assert_eq!((image.width, image.height), (1024, 1536));

        let mut j = job(
            Operation::Variations {
                of: VariationOf::Strong,
                source: source(&first),
            },
            (1, 1),
            64,
        );
        j.inputs = vec![first];
        run(&backend, &j).await.unwrap();
        let seen = mock.seen_at("/v1/images/edits");
        assert_eq!(seen[0].text("prompt").as_deref(), Some("a red fox in snow"));
        assert_eq!(seen[0].text("size").as_deref(), Some("1024x1024"));
        assert!(seen[0].part("mask").is_none());
    }

    #[tokio::test]
    async fn failures_are_sorted() {
        let (mock, url) = serve(Mode::Ok).await;
        let backend = backend(&url, Some("sd-turbo"), Some(KEY));
        let imagine = job(Operation::Imagine, (1, 1), 64);
        let mut results = Vec::new();
        for mode in [
            Mode::Status(500),
            Mode::Status(503),
            Mode::RateLimited,
            Mode::Status(400),
            Mode::Status(404),
            Mode::KeyEcho,
            Mode::Refuse("content_policy_violation"),
            Mode::Refuse("moderation_blocked"),
            Mode::BadJson,
            Mode::BadBase64,
            Mode::NotImage,
            Mode::Count(3),
            Mode::MixedSizes,
        ] {
            *mock.mode.lock().unwrap() = mode;
            let error = run(&backend, &imagine).await.unwrap_err();
            assert!(!error.to_string().contains(KEY), "{mode:?}: {error}");
            results.push((mode, error));
        }
        for (mode, error) in results {
            match (mode, &error) {
                (Mode::Status(500 | 503), GenerateError::Transient { retry_after, .. }) => {
                    assert_eq!(*retry_after, None)
                }
                (Mode::RateLimited, GenerateError::Transient { retry_after, .. }) => {
                    assert_eq!(*retry_after, Some(Duration::from_secs(7)))
                }
                (Mode::Status(400 | 404), GenerateError::Failed(m)) => {
                    assert!(m.contains("boom"), "{m}")
                }
                (Mode::KeyEcho, GenerateError::Failed(m)) => {
                    assert!(m.contains("refused the key"), "{m}")
                }
                (Mode::Refuse(_), GenerateError::Refused(m)) => {
                    assert!(m.contains("safety system"), "{m}")
                }
                (Mode::BadJson, GenerateError::Failed(m)) => {
                    assert!(m.contains("not the images JSON"), "{m}")
                }
                (Mode::BadBase64, GenerateError::Failed(m)) => {
                    assert!(m.contains("base64"), "{m}")
                }
                (Mode::NotImage, GenerateError::Failed(m)) => {
                    assert!(m.contains("image 1"), "{m}")
                }
                (Mode::Count(3), GenerateError::Failed(m)) => {
                    assert!(m.contains("3 images"), "{m}")
                }
                (Mode::MixedSizes, GenerateError::Failed(m)) => {
                    assert!(m.contains("different sizes"), "{m}")
                }
                (mode, error) => panic!("{mode:?} gave {error:?}"),
            }
        }
    }

    #[tokio::test]
    async fn a_job_past_the_timeout_is_dropped_and_transient() {
        let (mock, url) = serve(Mode::Hang).await;
        let mut config = config(&url, Some("sd-turbo"), None);
        config.timeout = Duration::from_millis(300);
        let backend = OpenAi::new(&config).unwrap();
        let started = Instant::now();
        let error = run(&backend, &job(Operation::Imagine, (1, 1), 64))
            .await
            .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(5));
        match error {
            GenerateError::Transient { message, .. } => {
                assert!(message.contains("timed out after 300ms"), "{message}")
            }
            other => panic!("{other:?}"),
        }
        // No cancel endpoint: the request was dropped, and the server saw its connection close.
        let deadline = Instant::now() + Duration::from_secs(3);
        while !mock.dropped.load(Ordering::SeqCst) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(mock.dropped.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn refused_and_dropped_connections_are_transient() {
        // A port nobody listens on.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let closed = listener.local_addr().unwrap();
        drop(listener);
        // A server that reads the request and hangs up without answering.
        let rude = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let rude_addr = rude.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = rude.accept().await {
                use tokio::io::AsyncReadExt;
                let mut buf = [0u8; 1024];
                let _ = socket.read(&mut buf).await;
                drop(socket);
            }
        });
        for addr in [closed, rude_addr] {
            let backend = backend(&format!("http://{addr}/v1"), None, Some(KEY));
            let error = run(&backend, &job(Operation::Imagine, (1, 1), 64))
                .await
                .unwrap_err();
            assert!(
                matches!(error, GenerateError::Transient { .. }),
                "{error:?}"
            );
            assert!(backend.probe().await.is_err());
        }
    }

    #[tokio::test]
    async fn probe_lists_the_models() {
        let (mock, url) = serve(Mode::Ok).await;
        let backend = backend(&url, Some("gpt-image-1"), Some(KEY));
        backend.probe().await.unwrap();
        let seen = mock.seen_at("/v1/models");
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].auth.as_deref(), Some(&format!("Bearer {KEY}")[..]));
        *mock.mode.lock().unwrap() = Mode::Status(401);
        let error = backend.probe().await.unwrap_err();
        assert!(error.contains("401"), "{error}");
    }

    #[test]
    fn supports_what_the_model_and_the_settings_allow() {
        let backend = backend("http://127.0.0.1:9/v1", Some("gpt-image-1"), None);
        for kind in OpKind::ALL {
            let expected = matches!(
                kind,
                OpKind::Imagine
                    | OpKind::Reroll
                    | OpKind::Variations
                    | OpKind::Pan
                    | OpKind::Outpaint
                    | OpKind::Inpaint
                    | OpKind::Blend
            );
            assert_eq!(backend.supports(kind), expected, "{kind}");
        }
        let mut limited = config("http://127.0.0.1:9/v1", None, None);
        limited.operations = Some(vec!["imagine".into()]);
        let limited = OpenAi::new(&limited).unwrap();
        assert!(limited.supports(OpKind::Imagine));
        assert!(!limited.supports(OpKind::Pan) && !limited.supports(OpKind::Reroll));
        assert_eq!(limited.name(), "oa");
    }

    #[test]
    fn new_names_the_setting_that_cannot_work() {
        let mut unset = config("http://127.0.0.1:9/v1", None, None);
        unset.api_key_env = Some("EASEL_TEST_OPENAI_KEY_NEVER_SET".into());
        let error = OpenAi::new(&unset).err().unwrap();
        assert!(error.contains("backends.oa.api_key_env"), "{error}");
        assert!(error.contains("EASEL_TEST_OPENAI_KEY_NEVER_SET"), "{error}");
        let bad = config("http://127.0.0.1:9/v1", None, Some("sk-\nbroken"));
        let error = OpenAi::new(&bad).err().unwrap();
        assert!(error.contains("backends.oa.api_key") && !error.contains("broken"));
        let mut no_url = config("http://127.0.0.1:9/v1", None, None);
        no_url.url = None;
        assert!(OpenAi::new(&no_url)
            .err()
            .unwrap()
            .contains("backends.oa.url"));
    }

    #[test]
    fn sizes_follow_the_model() {
        assert_eq!(Family::of(Some("dall-e-2")).size(16, 9, 1024), (1024, 1024));
        assert_eq!(Family::of(Some("dall-e-2")).size(1, 1, 300), (512, 512));
        assert_eq!(Family::of(Some("dall-e-3")).size(9, 16, 64), (1024, 1792));
        assert_eq!(Family::of(Some("dall-e-3")).size(5, 4, 64), (1024, 1024));
        assert_eq!(Family::of(Some("gpt-image-1")).size(2, 3, 64), (1024, 1536));
        assert_eq!(
            Family::of(Some("gpt-image-1-mini")).size(3, 2, 64),
            (1536, 1024)
        );
        assert_eq!(Family::of(None).size(1, 1, 1000), (1024, 1024));
        assert_eq!(Family::of(Some("flux")).size(16, 9, 1024), (1024, 576));
    }
}
