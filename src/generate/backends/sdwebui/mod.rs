//! AUTOMATIC1111's stable-diffusion-webui API (`/sdapi/v1`), which Forge, SD.Next and
//! stable-diffusion.cpp's server answer too. New pictures come from `txt2img`; variations, pan,
//! outpaint and inpaint are `img2img` on the parent (with a mask where part of it is redrawn);
//! upscales are `extra-single-image`; describe is `interrogate`. The WebUI reports progress at
//! `progress`, polled while a job runs, and stops a job at `interrupt`, called when one runs past
//! the backend's timeout or is stopped (its task canceled).

use std::convert::Infallible;
use std::time::Duration;

use base64::alphabet;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use base64::engine::DecodePaddingMode;
use base64::Engine as _;
use futures::future::BoxFuture;
use reqwest::header::{HeaderMap, CONTENT_TYPE};
use reqwest::{Method, RequestBuilder, StatusCode};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{decode_output, size_for, status_error, transport_error, BackendConfig};
use crate::domain::operation::VariationOf;
use crate::domain::{OpKind, Operation};
use crate::generate::ops::{self, Direction};
use crate::generate::raster::{dimensions, encode_png, RgbaImage};
use crate::generate::{GenerateError, Generator, Job, Product, Progress};

const TXT2IMG: &str = "/sdapi/v1/txt2img";
const IMG2IMG: &str = "/sdapi/v1/img2img";
const EXTRA: &str = "/sdapi/v1/extra-single-image";
const INTERROGATE: &str = "/sdapi/v1/interrogate";
const PROGRESS: &str = "/sdapi/v1/progress?skip_current_image=true";
const INTERRUPT: &str = "/sdapi/v1/interrupt";

/// Images per grid task, made in one batch.
const BATCH: usize = 4;
/// Sampling steps: the WebUI's own default (50) is slow for little gain on current samplers.
const STEPS: u32 = 30;
/// The upscaler the WebUI ships with (Real-ESRGAN's general model).
const UPSCALER: &str = "R-ESRGAN 4x+";
/// Largest answer read: four large base64 PNGs fit well under it; a server streaming without
/// end does not exhaust memory.
const MAX_ANSWER: usize = 256 << 20;
/// Most images of one answer decoded: the four asked for, and room for the extras a WebUI adds
/// (a grid, an extension's maps) before them.
const MAX_DECODED: usize = 8;
/// Denoising strengths of img2img: how much of the parent a variation keeps, and how freely the
/// new area of a pan or outpaint (started from a continuation of the parent) is redrawn.
const SUBTLE: f64 = 0.45;
const STRONG: f64 = 0.7;
const EXTEND: f64 = 0.9;
const INPAINT: f64 = 0.75;

/// A stable-diffusion-webui server.
pub struct SdWebUi {
    config: BackendConfig,
    /// The base URL without its trailing `/`.
    base: String,
    client: reqwest::Client,
    password: Option<String>,
    /// How often progress is polled while a job runs.
    poll: Duration,
}

impl SdWebUi {
    pub fn new(config: &BackendConfig) -> Result<SdWebUi, String> {
        let name = &config.name;
        let url = config
            .url
            .as_deref()
            .ok_or_else(|| format!("backends.{name}.url: is required for an sdwebui backend"))?;
        match url::Url::parse(url) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {}
            _ => return Err(format!("backends.{name}.url: must be an http or https URL")),
        }
        let password = config.password()?;
        if password.is_some() && config.username.is_none() {
            return Err(format!(
                "backends.{name}.username: is required with a password"
            ));
        }
        let client = super::http_client(config)?;
        Ok(SdWebUi {
            config: config.clone(),
            base: url.trim_end_matches('/').to_string(),
            client,
            password,
            poll: Duration::from_secs(1),
        })
    }

    fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let request = self.client.request(method, format!("{}{path}", self.base));
        match &self.config.username {
            Some(user) => request.basic_auth(user, self.password.as_deref()),
            None => request,
        }
    }

    /// Send a request and read its whole answer, whatever its status.
    async fn fetch(
        &self,
        request: RequestBuilder,
    ) -> Result<(StatusCode, HeaderMap, Vec<u8>), GenerateError> {
        let mut response = request.send().await.map_err(|e| transport_error(&e))?;
        let (status, headers) = (response.status(), response.headers().clone());
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| transport_error(&e))? {
            if body.len() + chunk.len() > MAX_ANSWER {
                return Err(GenerateError::Failed(format!(
                    "the backend's answer is larger than {} MiB",
                    MAX_ANSWER >> 20
                )));
            }
            body.extend_from_slice(&chunk);
        }
        Ok((status, headers, body))
    }

    /// Send a request; an answer that is not a success is sorted into an error.
    async fn call(&self, request: RequestBuilder) -> Result<Vec<u8>, GenerateError> {
        let (status, headers, body) = self.fetch(request).await?;
        if !status.is_success() {
            return Err(status_error(
                status,
                &headers,
                &String::from_utf8_lossy(&body),
            ));
        }
        Ok(body)
    }

    /// POST a job, reporting the WebUI's progress until it answers.
    async fn post_job(
        &self,
        path: &str,
        body: Vec<u8>,
        progress: &Progress,
    ) -> Result<Vec<u8>, GenerateError> {
        let request = self
            .request(Method::POST, path)
            .header(CONTENT_TYPE, "application/json")
            .body(body);
        let call = self.call(request);
        let watch = self.watch(progress);
        tokio::pin!(call, watch);
        tokio::select! {
            biased;
            answer = &mut call => answer,
            never = &mut watch => match never {},
        }
    }

    /// Poll the WebUI's progress for ever. It runs one job at a time, so its progress is ours
    /// once our job has started; a failed poll only means no report this time.
    async fn watch(&self, progress: &Progress) -> Infallible {
        loop {
            tokio::time::sleep(self.poll).await;
            let request = self
                .request(Method::GET, PROGRESS)
                .timeout(self.poll.max(Duration::from_secs(5)));
            if let Ok(body) = self.call(request).await {
                if let Some(percent) = progress_percent(&body) {
                    progress.report(percent);
                }
            }
        }
    }

    /// Stop the job the WebUI is running: a request that was given up on keeps running there.
    async fn interrupt(&self) {
        let request = self
            .request(Method::POST, INTERRUPT)
            .timeout(Duration::from_secs(10));
        if let Err(e) = self.call(request).await {
            tracing::warn!(backend = %self.config.name, "could not interrupt a job: {e}");
        }
    }

    async fn perform(&self, job: &Job, progress: &Progress) -> Result<Product, GenerateError> {
        let planned = {
            let (job, model) = (job.clone(), self.config.model.clone());
            blocking(move || plan(&job, model.as_deref())).await?
        };
        let name = self.config.name.clone();
        match planned {
            Call::Done(product) => Ok(product),
            Call::Images { path, body } => {
                let answer = self.post_job(path, body, progress).await?;
                progress.backend_done();
                blocking(move || images_product(&answer, &name)).await
            }
            Call::Upscale { body } => {
                let answer = self.post_job(EXTRA, body, progress).await?;
                progress.backend_done();
                blocking(move || upscale_product(&answer)).await
            }
            Call::Describe {
                body,
                width,
                height,
            } => {
                let answer = self.post_job(INTERROGATE, body, progress).await?;
                progress.backend_done();
                describe_product(&answer, width, height)
            }
        }
    }

    /// Whether `model` (when set) is among the checkpoints of a `sd-models` answer.
    fn check_models(&self, body: &[u8]) -> Result<(), String> {
        let models: Vec<Value> = serde_json::from_slice(body)
            .map_err(|_| "the answer to sd-models is not a list of models".to_string())?;
        let Some(model) = &self.config.model else {
            return Ok(());
        };
        let named = |m: &Value| {
            let field = |k: &str| m.get(k).and_then(Value::as_str);
            ["title", "model_name", "hash", "sha256", "filename"]
                .iter()
                .any(|k| field(k) == Some(model.as_str()))
                || field("title")
                    .and_then(|t| t.split(" [").next())
                    .is_some_and(|t| t == model)
        };
        if models.iter().any(named) {
            Ok(())
        } else {
            Err(format!(
                "the checkpoint {model:?} is not among the server's models"
            ))
        }
    }
}

impl Generator for SdWebUi {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn supports(&self, kind: OpKind) -> bool {
        self.config.runs(kind)
    }

    fn run<'a>(
        &'a self,
        job: &'a Job,
        progress: &'a Progress,
    ) -> BoxFuture<'a, Result<Product, GenerateError>> {
        Box::pin(async move {
            let stopped = tokio::select! {
                timed = tokio::time::timeout(self.config.timeout, self.perform(job, progress)) => {
                    match timed {
                        Ok(result) => return result,
                        Err(_) => GenerateError::transient(format!(
                            "timed out after {}",
                            humantime::format_duration(self.config.timeout)
                        )),
                    }
                }
                _ = progress.stopped() => GenerateError::Canceled,
            };
            self.interrupt().await;
            Err(stopped)
        })
    }

    /// The list of checkpoints (servers without it answer `options`); a configured `model`
    /// must be among them.
    fn probe(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let timeout = Duration::from_secs(10);
            let request = self
                .request(Method::GET, "/sdapi/v1/sd-models")
                .timeout(timeout);
            let (status, headers, body) = self.fetch(request).await.map_err(|e| e.to_string())?;
            if status == StatusCode::NOT_FOUND {
                let request = self
                    .request(Method::GET, "/sdapi/v1/options")
                    .timeout(timeout);
                return self
                    .call(request)
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string());
            }
            if !status.is_success() {
                let body = String::from_utf8_lossy(&body);
                return Err(status_error(status, &headers, &body).to_string());
            }
            self.check_models(&body)
        })
    }
}

/// What a job asks of the server, with its body encoded.
enum Call {
    /// Nothing: the product is already made.
    Done(Product),
    /// txt2img or img2img, answered with images.
    Images {
        path: &'static str,
        body: Vec<u8>,
    },
    Upscale {
        body: Vec<u8>,
    },
    /// Interrogate an image of `width` x `height`.
    Describe {
        body: Vec<u8>,
        width: u32,
        height: u32,
    },
}

/// Run image work on a blocking thread: encoding and decoding large images is CPU work.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, GenerateError> + Send + 'static,
) -> Result<T, GenerateError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| GenerateError::Failed(format!("image work crashed: {e}")))?
}

fn plan(job: &Job, model: Option<&str>) -> Result<Call, GenerateError> {
    let input = |i: usize| {
        job.inputs
            .get(i)
            .ok_or_else(|| GenerateError::Failed(format!("input image {} is missing", i + 1)))
    };
    let call = match &job.operation {
        Operation::Imagine | Operation::Reroll => {
            let (width, height) = size_for(job, 8);
            Call::Images {
                path: TXT2IMG,
                body: encode(&generation(job, model, width, height)),
            }
        }
        Operation::Variations { of, .. } => {
            // A grid's image varies strongly, as Midjourney's V buttons do.
            let strength = match of {
                VariationOf::Subtle => SUBTLE,
                VariationOf::Index(_) | VariationOf::Strong => STRONG,
            };
            let init = fit8(input(0)?);
            img2img(job, model, &init, None, strength)?
        }
        Operation::Pan { direction, .. } => {
            let parent = input(0)?;
            let direction = Direction::from(*direction);
            // The new strip starts as a continuation of the parent (ops::pan), then is redrawn.
            let canvas = ops::pan(parent, direction, None, job.seed, 0);
            let (pw, ph) = (parent.width, parent.height);
            let (x, y) = match direction {
                Direction::Left => (canvas.width.saturating_sub(pw), 0),
                Direction::Up => (0, canvas.height.saturating_sub(ph)),
                Direction::Right | Direction::Down => (0, 0),
            };
            let mask = keep_mask(canvas.width, canvas.height, x, y, pw, ph);
            img2img(job, model, &fit8(&canvas), Some(&fit8_mask(&mask)), EXTEND)?
        }
        Operation::Outpaint { zoom_ratio, .. } => {
            let parent = input(0)?;
            let long = parent.width.max(parent.height);
            let (w, h) = dimensions(job.aspect.width, job.aspect.height, long);
            let canvas = ops::outpaint(parent, w, h, *zoom_ratio, None, job.seed, 0);
            let (x, y, sw, sh) =
                ops::outpaint_placement(parent.width, parent.height, w, h, *zoom_ratio);
            let mask = keep_mask(w, h, x, y, sw, sh);
            img2img(job, model, &fit8(&canvas), Some(&fit8_mask(&mask)), EXTEND)?
        }
        Operation::Inpaint { .. } => {
            let parent = input(0)?;
            let mask = job
                .mask
                .as_ref()
                .ok_or_else(|| GenerateError::Failed("the mask is missing".into()))?;
            if (mask.width, mask.height) != (parent.width, parent.height) {
                return Err(GenerateError::Failed(format!(
                    "the mask is {}x{}, the image {}x{}",
                    mask.width, mask.height, parent.width, parent.height
                )));
            }
            img2img(
                job,
                model,
                &fit8(parent),
                Some(&fit8_mask(&binary_mask(mask))),
                INPAINT,
            )?
        }
        Operation::Upscale1x { .. } => Call::Done(Product::single(input(0)?)),
        Operation::UpscaleAlt { .. } => upscale(input(0)?, 2)?,
        Operation::UpscaleHighres { factor, .. } => upscale(input(0)?, u32::from(*factor))?,
        Operation::Describe { .. } => {
            let image = input(0)?;
            Call::Describe {
                body: encode(&json!({ "image": base64_png(image)?, "model": "clip" })),
                width: image.width,
                height: image.height,
            }
        }
        other @ (Operation::Blend { .. } | Operation::Shorten | Operation::Seed) => {
            return Err(GenerateError::Failed(format!(
                "an sdwebui backend cannot run {}",
                other.kind()
            )))
        }
    };
    Ok(call)
}

/// The fields txt2img and img2img share.
fn generation(job: &Job, model: Option<&str>, width: u32, height: u32) -> Value {
    let mut body = json!({
        "prompt": job.prompt,
        // The prompt's `--no` words are not part of the job's text.
        "negative_prompt": "",
        "seed": job.seed,
        "width": width,
        "height": height,
        "batch_size": BATCH,
        "n_iter": 1,
        "steps": STEPS,
        "send_images": true,
        "save_images": false,
    });
    if let Some(model) = model {
        body["override_settings"] = json!({ "sd_model_checkpoint": model });
    }
    body
}

/// img2img from `init` (whose size is the output's), repainting where `mask` is white.
fn img2img(
    job: &Job,
    model: Option<&str>,
    init: &RgbaImage,
    mask: Option<&RgbaImage>,
    denoising: f64,
) -> Result<Call, GenerateError> {
    let mut body = generation(job, model, init.width, init.height);
    body["init_images"] = json!([base64_png(init)?]);
    body["denoising_strength"] = json!(denoising);
    body["resize_mode"] = json!(0);
    if let Some(mask) = mask {
        body["mask"] = json!(base64_png(mask)?);
        // Start the masked area from the init image (the parent, or its continuation).
        body["inpainting_fill"] = json!(1);
        body["inpaint_full_res"] = json!(false);
        body["inpainting_mask_invert"] = json!(0);
        body["mask_blur"] = json!(4);
    }
    Ok(Call::Images {
        path: IMG2IMG,
        body: encode(&body),
    })
}

fn upscale(image: &RgbaImage, factor: u32) -> Result<Call, GenerateError> {
    Ok(Call::Upscale {
        body: encode(&json!({
            "image": base64_png(image)?,
            "resize_mode": 0,
            "upscaling_resize": factor,
            "upscaler_1": UPSCALER,
        })),
    })
}

fn encode(body: &Value) -> Vec<u8> {
    serde_json::to_vec(body).expect("JSON values serialize")
}

fn base64_png(image: &RgbaImage) -> Result<String, GenerateError> {
    let png = encode_png(image);
    if png.is_empty() {
        return Err(GenerateError::Failed(format!(
            "a {}x{} image cannot be sent",
            image.width, image.height
        )));
    }
    Ok(STANDARD.encode(png))
}

/// `v` rounded to the nearest multiple of 8 (at least 8): latent diffusion works in blocks of 8.
fn round8(v: u32) -> u32 {
    (v.saturating_add(4) / 8).max(1) * 8
}

/// The image at sides that are multiples of 8, resized when they are not, so that the size
/// sent is the size the server works at.
fn fit8(image: &RgbaImage) -> RgbaImage {
    let (w, h) = (round8(image.width), round8(image.height));
    if (w, h) == (image.width, image.height) {
        image.clone()
    } else {
        ops::resize(image, w, h)
    }
}

/// A black-and-white mask at sides that are multiples of 8.
fn fit8_mask(mask: &RgbaImage) -> RgbaImage {
    let resized = fit8(mask);
    if resized.width == mask.width && resized.height == mask.height {
        resized
    } else {
        binary_mask(&resized)
    }
}

/// The WebUI's mask: white where easel's mask redraws, black elsewhere.
fn binary_mask(mask: &RgbaImage) -> RgbaImage {
    let mut out = RgbaImage::new(mask.width, mask.height);
    for (o, px) in out.data.chunks_exact_mut(4).zip(mask.data.chunks_exact(4)) {
        if ops::mask_redraws([px[0], px[1], px[2], px[3]]) {
            o.copy_from_slice(&[255, 255, 255, 255]);
        }
    }
    out
}

/// A `w` x `h` mask, white (redraw) but for the `kw` x `kh` rectangle at (x, y), which is kept.
fn keep_mask(w: u32, h: u32, x: u32, y: u32, kw: u32, kh: u32) -> RgbaImage {
    let mut mask = RgbaImage::new(w, h);
    for (i, px) in mask.data.chunks_exact_mut(4).enumerate() {
        let (px_x, px_y) = ((i % w as usize) as u32, (i / w as usize) as u32);
        let kept =
            (x..x.saturating_add(kw)).contains(&px_x) && (y..y.saturating_add(kh)).contains(&px_y);
        if !kept {
            px.copy_from_slice(&[255, 255, 255, 255]);
        }
    }
    mask
}

/// The progress answer as a percentage below 100 (the job is done only when it answers);
/// `None` when the WebUI is idle or the answer is not understood.
fn progress_percent(body: &[u8]) -> Option<i64> {
    #[derive(Deserialize)]
    struct Answer {
        progress: f64,
        #[serde(default)]
        state: Option<Value>,
    }
    let answer: Answer = serde_json::from_slice(body).ok()?;
    let jobs = answer
        .state
        .as_ref()
        .and_then(|s| s.get("job_count"))
        .and_then(Value::as_i64);
    if jobs == Some(0) || !answer.progress.is_finite() {
        return None;
    }
    Some(((answer.progress * 100.0).floor() as i64).clamp(0, 99))
}

fn parse<'a, T: Deserialize<'a>>(answer: &'a [u8]) -> Result<T, GenerateError> {
    serde_json::from_slice(answer)
        .map_err(|e| GenerateError::Failed(format!("the backend's answer is malformed: {e}")))
}

/// An image the WebUI sent: base64 (perhaps as a data URL) of an image file.
fn decode_image(text: &str, what: &str) -> Result<RgbaImage, GenerateError> {
    const LENIENT: GeneralPurpose = GeneralPurpose::new(
        &alphabet::STANDARD,
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
    );
    let text = match text.strip_prefix("data:") {
        Some(url) => url.split_once(',').map_or("", |(_, data)| data),
        None => text,
    };
    let bytes = LENIENT.decode(text.trim()).map_err(|e| {
        GenerateError::Failed(format!("{what} from the backend is not base64: {e}"))
    })?;
    decode_output(&bytes, what)
}

/// The grid of a txt2img or img2img answer: the first four images of one size, passing over
/// the extras a WebUI may add (a grid of the batch before them, an extension's images after).
fn images_product(answer: &[u8], backend: &str) -> Result<Product, GenerateError> {
    #[derive(Deserialize)]
    struct Answer {
        #[serde(default)]
        images: Option<Vec<String>>,
        #[serde(default)]
        info: Option<Value>,
    }
    let answer: Answer = parse(answer)?;
    let sent = answer.images.unwrap_or_default();
    if sent.len() < BATCH {
        return Err(GenerateError::Failed(format!(
            "the backend sent {} images where {BATCH} were asked for",
            sent.len()
        )));
    }
    let mut images = sent
        .iter()
        .take(MAX_DECODED)
        .enumerate()
        .map(|(i, text)| decode_image(text, &format!("image {}", i + 1)))
        .collect::<Result<Vec<_>, _>>()?;
    let size = |i: &RgbaImage| (i.width, i.height);
    let chosen = images
        .iter()
        .map(size)
        .find(|s| images.iter().filter(|i| size(i) == *s).count() >= BATCH);
    let Some(chosen) = chosen else {
        let sizes: Vec<String> = images
            .iter()
            .map(|i| format!("{}x{}", i.width, i.height))
            .collect();
        return Err(GenerateError::Failed(format!(
            "the backend sent no {BATCH} images of one size ({})",
            sizes.join(", ")
        )));
    };
    images.retain(|i| size(i) == chosen);
    images.truncate(BATCH);
    let four: [RgbaImage; BATCH] = images
        .try_into()
        .map_err(|_| GenerateError::Failed("the backend sent too few images".into()))?;
    if let Some(seeds) = answer.info.as_ref().and_then(seeds_of) {
        tracing::debug!(backend, ?seeds, "the backend's seeds");
    }
    Ok(Product::grid(&four))
}

/// The seeds in an answer's `info` (a JSON document in a string): `all_seeds`, or `seed`.
fn seeds_of(info: &Value) -> Option<Vec<i64>> {
    let info: Value = match info {
        Value::String(text) => serde_json::from_str(text).ok()?,
        other => other.clone(),
    };
    if let Some(all) = info.get("all_seeds").and_then(Value::as_array) {
        return Some(all.iter().filter_map(Value::as_i64).collect());
    }
    info.get("seed").and_then(Value::as_i64).map(|s| vec![s])
}

fn upscale_product(answer: &[u8]) -> Result<Product, GenerateError> {
    #[derive(Deserialize)]
    struct Answer {
        #[serde(default)]
        image: Option<String>,
    }
    let answer: Answer = parse(answer)?;
    match answer.image.filter(|i| !i.is_empty()) {
        Some(text) => Ok(Product::single(&decode_image(&text, "the upscaled image")?)),
        None => Err(GenerateError::Failed(
            "the backend's answer holds no image".into(),
        )),
    }
}

/// Four prompts from the WebUI's caption: as it is, with the image's aspect ratio, its subject
/// (the caption's first clause) alone, and with more detail asked for.
fn describe_product(answer: &[u8], width: u32, height: u32) -> Result<Product, GenerateError> {
    #[derive(Deserialize)]
    struct Answer {
        #[serde(default)]
        caption: Option<String>,
    }
    let answer: Answer = parse(answer)?;
    let caption = answer
        .caption
        .unwrap_or_default()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let caption = caption.trim_matches(|c: char| c == ',' || c.is_whitespace());
    if caption.is_empty() {
        return Err(GenerateError::Failed(
            "the backend's caption is empty".into(),
        ));
    }
    let (a, b) = simple_ratio(width, height);
    let ar = format!("--ar {a}:{b}");
    let subject = caption.split(',').next().unwrap_or_default().trim();
    let third = if subject.is_empty() || subject == caption {
        format!("{caption}, detailed {ar}")
    } else {
        format!("{subject} {ar}")
    };
    Ok(Product::Text(vec![
        caption.to_string(),
        format!("{caption} {ar}"),
        third,
        format!("{caption}, highly detailed, sharp focus {ar}"),
    ]))
}

/// `w`:`h` in small terms: exact when it reduces to terms up to 21, else the nearest ratio with
/// a second term up to 16.
fn simple_ratio(w: u32, h: u32) -> (u32, u32) {
    fn gcd(a: u32, b: u32) -> u32 {
        if b == 0 {
            a
        } else {
            gcd(b, a % b)
        }
    }
    let (w, h) = (w.max(1), h.max(1));
    let g = gcd(w, h);
    let (a, b) = (w / g, h / g);
    if a <= 21 && b <= 21 {
        return (a, b);
    }
    let r = f64::from(w) / f64::from(h);
    let (mut best, mut error) = ((1, 1), f64::MAX);
    for d in 1..=16u32 {
        let n = (r * f64::from(d)).round().max(1.0) as u32;
        let e = (f64::from(n) / f64::from(d) - r).abs();
        if e < error - 1e-9 {
            (best, error) = ((n, d), e);
        }
    }
    let g = gcd(best.0, best.1);
    (best.0 / g, best.1 / g)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    use axum::body::{Body, Bytes};
    use axum::extract::State;
    use axum::http::{HeaderMap, Method, StatusCode, Uri};
    use axum::response::{IntoResponse, Response};
    use axum::Router;

    use super::*;
    use crate::domain::operation::PanDirection;
    use crate::domain::operation::{AltKind, ImageInput, StoredImage};
    use crate::domain::AspectRatio;
    use crate::generate::raster::decode_png;

    const PASSWORD: &str = "s3cret-pw";

    /// How the mock server misbehaves on its next job requests.
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Mode {
        Normal,
        Status(u16),
        TooMany,
        Hang,
        BadJson,
        BadBase64,
        NotImage,
        Count(usize),
        Extras,
        Drop,
        NoModels,
    }

    struct Mock {
        mode: Mutex<Mode>,
        /// Every job request: its path and body.
        seen: Mutex<Vec<(String, Value)>>,
        interrupts: AtomicUsize,
        polls: AtomicUsize,
    }

    impl Mock {
        fn set(&self, mode: Mode) {
            *self.mode.lock().unwrap() = mode;
        }

        fn last(&self) -> (String, Value) {
            self.seen
                .lock()
                .unwrap()
                .last()
                .cloned()
                .expect("a request")
        }
    }

    fn png(w: u32, h: u32, colour: [u8; 3]) -> String {
        let mut image = RgbaImage::new(w, h);
        for px in image.data.chunks_exact_mut(4) {
            px[..3].copy_from_slice(&colour);
        }
        STANDARD.encode(encode_png(&image))
    }

    fn unpng(text: &Value) -> RgbaImage {
        let bytes = STANDARD.decode(text.as_str().expect("a string")).unwrap();
        decode_png(&bytes).unwrap()
    }

    fn reject(why: String) -> Response {
        (StatusCode::UNPROCESSABLE_ENTITY, why).into_response()
    }

    /// The WebUI's routes, checking what easel sends.
    async fn handle(
        State(mock): State<Arc<Mock>>,
        method: Method,
        uri: Uri,
        headers: HeaderMap,
        body: Bytes,
    ) -> Response {
        let expected = format!("Basic {}", STANDARD.encode(format!("user:{PASSWORD}")));
        let auth = headers.get("authorization").and_then(|v| v.to_str().ok());
        if auth != Some(expected.as_str()) {
            return (
                StatusCode::UNAUTHORIZED,
                [("www-authenticate", "Basic")],
                r#"{"detail":"Incorrect username or password"}"#,
            )
                .into_response();
        }
        let path = uri.path().to_string();
        let mode = *mock.mode.lock().unwrap();
        match (method.as_str(), path.as_str()) {
            ("GET", "/sdapi/v1/progress") => {
                mock.polls.fetch_add(1, Ordering::SeqCst);
                return axum::Json(json!({
                    "progress": 0.5, "eta_relative": 3.0,
                    "state": {"job_count": 1, "job_no": 0, "sampling_step": 10, "sampling_steps": 20}
                }))
                .into_response();
            }
            ("POST", "/sdapi/v1/interrupt") => {
                mock.interrupts.fetch_add(1, Ordering::SeqCst);
                return axum::Json(json!({})).into_response();
            }
            ("GET", "/sdapi/v1/sd-models") if mode == Mode::NoModels => {
                return StatusCode::NOT_FOUND.into_response();
            }
            ("GET", "/sdapi/v1/sd-models") => {
                return axum::Json(json!([{
                    "title": "sd_xl_base_1.0.safetensors [31e35c80fc]",
                    "model_name": "sd_xl_base_1.0", "hash": "31e35c80fc",
                    "filename": "/models/sd_xl_base_1.0.safetensors"
                }]))
                .into_response();
            }
            ("GET", "/sdapi/v1/options") => {
                return axum::Json(json!({"sd_model_checkpoint": "x"})).into_response();
            }
            ("POST", _) => {}
            _ => return StatusCode::NOT_FOUND.into_response(),
        }
        let Ok(body) = serde_json::from_slice::<Value>(&body) else {
            return reject("not JSON".into());
        };
        mock.seen.lock().unwrap().push((path.clone(), body.clone()));
        match mode {
            Mode::Status(code) => {
                return (StatusCode::from_u16(code).unwrap(), r#"{"error":"boom"}"#).into_response()
            }
            Mode::TooMany => {
                return (
                    StatusCode::TOO_MANY_REQUESTS,
                    [("retry-after", "7")],
                    "busy",
                )
                    .into_response()
            }
            Mode::Hang => {
                tokio::time::sleep(Duration::from_secs(60)).await;
            }
            Mode::BadJson => return "{\"images\": [".into_response(),
            Mode::Drop => {
                let parts: Vec<Result<Bytes, std::io::Error>> = vec![
                    Ok(Bytes::from_static(b"{\"images\": [\"iVBOR")),
                    Err(std::io::Error::other("dropped")),
                ];
                return Body::from_stream(futures::stream::iter(parts)).into_response();
            }
            _ => {}
        }
        match path.as_str() {
            "/sdapi/v1/txt2img" | "/sdapi/v1/img2img" => images(&path, &body, mode),
            "/sdapi/v1/extra-single-image" => {
                let image = unpng(&body["image"]);
                let Some(factor) = body["upscaling_resize"].as_u64() else {
                    return reject("upscaling_resize".into());
                };
                if body["upscaler_1"].as_str().is_none_or(str::is_empty) {
                    return reject("upscaler_1".into());
                }
                let f = factor as u32;
                axum::Json(json!({
                    "image": png(image.width * f, image.height * f, [9, 9, 9]),
                    "html_info": ""
                }))
                .into_response()
            }
            "/sdapi/v1/interrogate" => {
                unpng(&body["image"]);
                if body["model"] != "clip" {
                    return reject("model".into());
                }
                axum::Json(json!({
                    "caption": "a red fox in the snow, digital art,  trending on artstation\n"
                }))
                .into_response()
            }
            _ => StatusCode::NOT_FOUND.into_response(),
        }
    }

    fn images(path: &str, body: &Value, mode: Mode) -> Response {
        let (Some(w), Some(h)) = (body["width"].as_u64(), body["height"].as_u64()) else {
            return reject("width and height".into());
        };
        let (w, h) = (w as u32, h as u32);
        if w % 8 != 0 || h % 8 != 0 {
            return reject(format!("{w}x{h} is not in multiples of 8"));
        }
        if body["batch_size"] != 4 || body["n_iter"] != 1 || !body["prompt"].is_string() {
            return reject("batch_size, n_iter, prompt".into());
        }
        if path.ends_with("img2img") {
            let Some([init]) = body["init_images"].as_array().map(Vec::as_slice) else {
                return reject("one init image".into());
            };
            let init = unpng(init);
            if (init.width, init.height) != (w, h) {
                return reject("init image size".into());
            }
            if !body["mask"].is_null() {
                let mask = unpng(&body["mask"]);
                if (mask.width, mask.height) != (w, h) {
                    return reject("mask size".into());
                }
            }
        }
        let seed = body["seed"].as_i64().unwrap_or(-1);
        let info = json!({"seed": seed, "all_seeds": [seed, seed + 1, seed + 2, seed + 3]});
        let colours = [[255, 0, 0], [0, 255, 0], [0, 0, 255], [255, 255, 0]];
        let mut out: Vec<String> = colours.iter().map(|c| png(w, h, *c)).collect();
        match mode {
            Mode::BadBase64 => out[2] = "!!not base64!!".into(),
            Mode::NotImage => out[1] = STANDARD.encode(b"GIF? no, just text"),
            Mode::Count(n) => out.truncate(n),
            Mode::Extras => {
                out.insert(0, png(w * 2, h * 2, [1, 2, 3]));
                out.push(png(w, h / 2, [4, 5, 6]));
                out[1] = format!("data:image/png;base64,{}", out[1]);
            }
            _ => {}
        }
        axum::Json(json!({ "images": out, "parameters": {}, "info": info.to_string() }))
            .into_response()
    }

    async fn serve() -> (Arc<Mock>, String) {
        let mock = Arc::new(Mock {
            mode: Mutex::new(Mode::Normal),
            seen: Mutex::new(Vec::new()),
            interrupts: AtomicUsize::new(0),
            polls: AtomicUsize::new(0),
        });
        let app = Router::new().fallback(handle).with_state(mock.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (mock, url)
    }

    fn config(url: &str, extra: Value) -> BackendConfig {
        let mut c = json!({
            "name": "gpu-a", "kind": "sdwebui", "url": url, "timeout": "5s",
            "username": "user", "password": PASSWORD,
        });
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        serde_json::from_value(c).unwrap()
    }

    fn backend(url: &str, extra: Value) -> SdWebUi {
        let mut b = SdWebUi::new(&config(url, extra)).unwrap();
        b.poll = Duration::from_millis(20);
        b
    }

    fn stored(w: u32, h: u32) -> StoredImage {
        StoredImage {
            key: "k".into(),
            width: w,
            height: h,
        }
    }

    fn job(operation: Operation, inputs: Vec<RgbaImage>) -> Job {
        Job {
            operation,
            prompt: "a lighthouse at dusk".into(),
            seed: 1234,
            aspect: AspectRatio::SQUARE,
            image_size: 64,
            inputs,
            mask: None,
        }
    }

    fn parent(w: u32, h: u32) -> RgbaImage {
        let mut image = RgbaImage::new(w, h);
        for (i, px) in image.data.chunks_exact_mut(4).enumerate() {
            px[0] = (i % 251) as u8;
            px[1] = (i / 7 % 251) as u8;
        }
        image
    }

    fn pixel(image: &RgbaImage, x: u32, y: u32) -> [u8; 4] {
        let o = ((y * image.width + x) * 4) as usize;
        image.data[o..o + 4].try_into().unwrap()
    }

    async fn run(b: &SdWebUi, job: &Job) -> Result<Product, GenerateError> {
        b.run(job, &Progress::default()).await
    }

    fn grid_size(p: &Product) -> (u32, u32) {
        match p {
            Product::Grid {
                images,
                width,
                height,
                ..
            } => {
                for png in images {
                    let i = decode_png(png).unwrap();
                    assert_eq!((i.width, i.height), (*width, *height));
                }
                (*width, *height)
            }
            other => panic!("not a grid: {other:?}"),
        }
    }

    #[tokio::test]
    async fn imagine_asks_txt2img_for_four_at_the_job_size() {
        let (mock, url) = serve().await;
        let b = backend(&url, json!({"model": "sd_xl_base_1.0"}));
        let mut j = job(Operation::Imagine, vec![]);
        j.aspect = AspectRatio {
            width: 16,
            height: 9,
        };
        let product = run(&b, &j).await.unwrap();
        // 64 x 36, rounded to multiples of 8.
        assert_eq!(grid_size(&product), (64, 40));
        let (path, body) = mock.last();
        assert_eq!(path, TXT2IMG);
        assert_eq!(body["prompt"], "a lighthouse at dusk");
        assert_eq!(body["seed"], 1234);
        assert_eq!(
            (body["width"].clone(), body["height"].clone()),
            (json!(64), json!(40))
        );
        assert_eq!(body["batch_size"], 4);
        assert_eq!(body["steps"], STEPS);
        assert_eq!(
            body["override_settings"]["sd_model_checkpoint"],
            "sd_xl_base_1.0"
        );
        // Without a model, no override.
        let b = backend(&url, json!({}));
        run(&b, &job(Operation::Reroll, vec![])).await.unwrap();
        assert!(mock.last().1.get("override_settings").is_none());
    }

    #[tokio::test]
    async fn extra_images_are_passed_over() {
        let (mock, url) = serve().await;
        mock.set(Mode::Extras);
        let b = backend(&url, json!({}));
        let product = run(&b, &job(Operation::Imagine, vec![])).await.unwrap();
        assert_eq!(grid_size(&product), (64, 64));
        let Product::Grid { images, .. } = product else {
            unreachable!()
        };
        // The four of the batch, in order, not the grid before them.
        assert_eq!(
            pixel(&decode_png(&images[0]).unwrap(), 0, 0),
            [255, 0, 0, 255]
        );
        assert_eq!(
            pixel(&decode_png(&images[3]).unwrap(), 0, 0),
            [255, 255, 0, 255]
        );
    }

    #[tokio::test]
    async fn variations_are_img2img_on_the_parent() {
        let (mock, url) = serve().await;
        let b = backend(&url, json!({}));
        for (of, strength) in [
            (VariationOf::Subtle, SUBTLE),
            (VariationOf::Strong, STRONG),
            (VariationOf::Index(2), STRONG),
        ] {
            let op = Operation::Variations {
                of,
                source: stored(60, 36),
            };
            let product = run(&b, &job(op, vec![parent(60, 36)])).await.unwrap();
            assert_eq!(grid_size(&product), (64, 40));
            let (path, body) = mock.last();
            assert_eq!(path, IMG2IMG);
            assert_eq!(body["denoising_strength"], strength);
            assert!(body.get("mask").is_none());
            assert_eq!(unpng(&body["init_images"][0]).width, 64);
        }
    }

    #[tokio::test]
    async fn pan_masks_the_new_strip() {
        let (mock, url) = serve().await;
        let b = backend(&url, json!({}));
        let p = parent(64, 64);
        for (direction, size, new, kept) in [
            (PanDirection::Right, (96, 64), (90, 10), (10, 10)),
            (PanDirection::Left, (96, 64), (5, 10), (90, 10)),
            (PanDirection::Up, (64, 96), (10, 5), (10, 90)),
            (PanDirection::Down, (64, 96), (10, 90), (10, 5)),
        ] {
            let op = Operation::Pan {
                direction,
                source: stored(64, 64),
            };
            let product = run(&b, &job(op, vec![p.clone()])).await.unwrap();
            assert_eq!(grid_size(&product), size, "{direction:?}");
            let (_, body) = mock.last();
            let mask = unpng(&body["mask"]);
            assert_eq!(pixel(&mask, new.0, new.1)[..3], [255, 255, 255]);
            assert_eq!(pixel(&mask, kept.0, kept.1)[..3], [0, 0, 0]);
            assert_eq!(body["inpainting_fill"], 1);
            // The parent is on the canvas as it is.
            let init = unpng(&body["init_images"][0]);
            let (dx, dy) = match direction {
                PanDirection::Left => (32, 0),
                PanDirection::Up => (0, 32),
                _ => (0, 0),
            };
            assert_eq!(pixel(&init, dx + 3, dy + 5), pixel(&p, 3, 5));
        }
    }

    #[tokio::test]
    async fn outpaint_centres_the_smaller_parent() {
        let (mock, url) = serve().await;
        let b = backend(&url, json!({}));
        let op = Operation::Outpaint {
            zoom_ratio: 2.0,
            source: stored(64, 64),
        };
        let product = run(&b, &job(op, vec![parent(64, 64)])).await.unwrap();
        assert_eq!(grid_size(&product), (64, 64));
        let mask = unpng(&mock.last().1["mask"]);
        // The parent at half size in the middle: (16, 16) to (48, 48).
        assert_eq!(pixel(&mask, 32, 32)[..3], [0, 0, 0]);
        assert_eq!(pixel(&mask, 17, 17)[..3], [0, 0, 0]);
        assert_eq!(pixel(&mask, 2, 2)[..3], [255, 255, 255]);
        assert_eq!(pixel(&mask, 60, 32)[..3], [255, 255, 255]);
    }

    #[tokio::test]
    async fn inpaint_sends_easels_mask_in_black_and_white() {
        let (mock, url) = serve().await;
        let b = backend(&url, json!({}));
        let mut mask = RgbaImage::new(64, 64);
        for (i, px) in mask.data.chunks_exact_mut(4).enumerate() {
            if i % 64 >= 32 {
                // Bright green redraws; a transparent white pixel would not.
                px.copy_from_slice(&[0, 255, 0, 255]);
            }
        }
        let op = Operation::Inpaint {
            source: stored(64, 64),
            mask: String::new(),
        };
        let mut j = job(op, vec![parent(64, 64)]);
        j.mask = Some(mask);
        run(&b, &j).await.unwrap();
        let sent = unpng(&mock.last().1["mask"]);
        assert_eq!(pixel(&sent, 40, 3)[..3], [255, 255, 255]);
        assert_eq!(pixel(&sent, 10, 3)[..3], [0, 0, 0]);
        // A mask of another size is refused before anything is sent.
        let requests = mock.seen.lock().unwrap().len();
        j.mask = Some(RgbaImage::new(32, 64));
        assert!(matches!(run(&b, &j).await, Err(GenerateError::Failed(_))));
        j.mask = None;
        assert!(matches!(run(&b, &j).await, Err(GenerateError::Failed(_))));
        assert_eq!(mock.seen.lock().unwrap().len(), requests);
    }

    #[tokio::test]
    async fn upscales() {
        let (mock, url) = serve().await;
        let b = backend(&url, json!({}));
        let p = parent(40, 24);
        // 1x is the image as it is, without a request.
        let op = Operation::Upscale1x {
            index: 1,
            source: stored(40, 24),
        };
        match run(&b, &job(op, vec![p.clone()])).await.unwrap() {
            Product::Single { png, width, height } => {
                assert_eq!((width, height), (40, 24));
                assert_eq!(decode_png(&png).unwrap(), p);
            }
            other => panic!("{other:?}"),
        }
        assert!(mock.seen.lock().unwrap().is_empty());
        let alt = Operation::UpscaleAlt {
            kind: AltKind::Creative,
            source: stored(40, 24),
        };
        let highres = Operation::UpscaleHighres {
            factor: 4,
            index: None,
            image_url: None,
            source: ImageInput::Url { url: "x".into() },
        };
        for (op, factor) in [(alt, 2), (highres, 4)] {
            match run(&b, &job(op, vec![p.clone()])).await.unwrap() {
                Product::Single { width, height, .. } => {
                    assert_eq!((width, height), (40 * factor, 24 * factor))
                }
                other => panic!("{other:?}"),
            }
            let (path, body) = mock.last();
            assert_eq!(path, EXTRA);
            assert_eq!(body["upscaling_resize"], factor);
            assert_eq!(unpng(&body["image"]), p);
        }
    }

    #[tokio::test]
    async fn describe_gives_four_prompts_from_the_caption() {
        let (mock, url) = serve().await;
        let b = backend(&url, json!({}));
        let op = Operation::Describe {
            image_url: "x".into(),
            input: ImageInput::Url { url: "x".into() },
            scene_words: None,
        };
        let Product::Text(prompts) = run(&b, &job(op, vec![parent(64, 36)])).await.unwrap() else {
            panic!("not text")
        };
        assert_eq!(mock.last().0, INTERROGATE);
        let caption = "a red fox in the snow, digital art, trending on artstation";
        assert_eq!(prompts[0], caption);
        assert_eq!(prompts[1], format!("{caption} --ar 16:9"));
        assert_eq!(prompts[2], "a red fox in the snow --ar 16:9");
        assert_eq!(prompts.len(), 4);
        let distinct: std::collections::HashSet<_> = prompts.iter().collect();
        assert_eq!(distinct.len(), 4);
        assert_eq!(simple_ratio(682, 1024), (2, 3));
        assert_eq!(simple_ratio(1024, 1024), (1, 1));
        assert_eq!(simple_ratio(1000, 999), (1, 1));
    }

    #[tokio::test]
    async fn failures_are_sorted() {
        let (mock, url) = serve().await;
        let b = backend(&url, json!({}));
        let j = job(Operation::Imagine, vec![]);
        let transient = |r: Result<Product, GenerateError>| match r {
            Err(GenerateError::Transient {
                message,
                retry_after,
            }) => (message, retry_after),
            other => panic!("not transient: {other:?}"),
        };
        let failed = |r: Result<Product, GenerateError>| match r {
            Err(GenerateError::Failed(message)) => message,
            other => panic!("not failed: {other:?}"),
        };
        mock.set(Mode::TooMany);
        assert_eq!(transient(run(&b, &j).await).1, Some(Duration::from_secs(7)));
        mock.set(Mode::Status(503));
        assert!(transient(run(&b, &j).await).0.contains("503"));
        mock.set(Mode::Drop);
        transient(run(&b, &j).await);
        mock.set(Mode::Status(422));
        assert!(failed(run(&b, &j).await).contains("422"));
        mock.set(Mode::BadJson);
        assert!(failed(run(&b, &j).await).contains("malformed"));
        mock.set(Mode::BadBase64);
        assert!(failed(run(&b, &j).await).contains("not base64"));
        mock.set(Mode::NotImage);
        assert!(failed(run(&b, &j).await).contains("image 2"));
        mock.set(Mode::Count(3));
        assert!(failed(run(&b, &j).await).contains("3 images"));
        mock.set(Mode::Count(0));
        assert!(failed(run(&b, &j).await).contains("0 images"));
        // Nothing listens: transient.
        let gone = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = gone.local_addr().unwrap();
        drop(gone);
        let b = backend(&format!("http://{addr}"), json!({}));
        transient(run(&b, &j).await);
    }

    #[tokio::test]
    async fn wrong_credentials_fail_without_showing_them() {
        let (_mock, url) = serve().await;
        let b = backend(&url, json!({"password": "wrong-password"}));
        let error = run(&b, &job(Operation::Imagine, vec![])).await.unwrap_err();
        let message = error.to_string();
        assert!(matches!(error, GenerateError::Failed(_)), "{message}");
        assert!(message.contains("401"), "{message}");
        assert!(!message.contains("wrong-password"));
        assert!(b.probe().await.unwrap_err().contains("401"));
    }

    #[tokio::test]
    async fn a_job_past_the_timeout_is_interrupted_and_progress_reported() {
        let (mock, url) = serve().await;
        mock.set(Mode::Hang);
        let b = backend(&url, json!({"timeout": "400ms"}));
        let progress = Progress::default();
        let error = b
            .run(&job(Operation::Imagine, vec![]), &progress)
            .await
            .unwrap_err();
        match error {
            GenerateError::Transient { message, .. } => {
                assert!(message.contains("timed out after 400ms"), "{message}")
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(mock.interrupts.load(Ordering::SeqCst), 1);
        assert!(mock.polls.load(Ordering::SeqCst) >= 1);
        assert_eq!(progress.get(), 50);
        // A job that answers in time is not interrupted.
        mock.set(Mode::Normal);
        run(&b, &job(Operation::Imagine, vec![])).await.unwrap();
        assert_eq!(mock.interrupts.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn probe_lists_models_and_checks_the_checkpoint() {
        let (mock, url) = serve().await;
        backend(&url, json!({})).probe().await.unwrap();
        for model in [
            "sd_xl_base_1.0",
            "sd_xl_base_1.0.safetensors",
            "sd_xl_base_1.0.safetensors [31e35c80fc]",
            "31e35c80fc",
        ] {
            backend(&url, json!({ "model": model }))
                .probe()
                .await
                .unwrap();
        }
        let missing = backend(&url, json!({"model": "dreamshaper"}));
        assert!(missing.probe().await.unwrap_err().contains("dreamshaper"));
        // A server without the models list answers its options.
        mock.set(Mode::NoModels);
        backend(&url, json!({})).probe().await.unwrap();
        let gone = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = gone.local_addr().unwrap();
        drop(gone);
        assert!(backend(&format!("http://{addr}"), json!({}))
            .probe()
            .await
            .is_err());
    }

    #[test]
    fn settings_that_cannot_work_are_refused() {
        let url = "http://127.0.0.1:7860";
        let mut c = config(url, json!({"password_env": "EASEL_TEST_SDWEBUI_UNSET"}));
        c.password = None;
        let error = SdWebUi::new(&c).err().unwrap();
        assert!(error.contains("EASEL_TEST_SDWEBUI_UNSET"), "{error}");
        let mut c = config(url, json!({}));
        c.username = None;
        assert!(SdWebUi::new(&c).err().unwrap().contains("username"));
        let mut c = config(url, json!({}));
        c.url = None;
        assert!(SdWebUi::new(&c).err().unwrap().contains("url"));
        c.url = Some("ftp://x".into());
        assert!(SdWebUi::new(&c).err().unwrap().contains("url"));
        // No credentials at all is fine.
        let mut c = config(url, json!({}));
        (c.username, c.password) = (None, None);
        assert!(SdWebUi::new(&c).is_ok());
    }

    #[test]
    fn supports_what_the_webui_can_do_and_the_settings_allow() {
        let b = SdWebUi::new(&config("http://127.0.0.1:7860", json!({}))).unwrap();
        assert_eq!(b.name(), "gpu-a");
        assert!(b.supports(OpKind::Imagine) && b.supports(OpKind::Describe));
        assert!(!b.supports(OpKind::Blend) && !b.supports(OpKind::Faceswap));
        let only = config("http://127.0.0.1:7860", json!({"operations": ["imagine"]}));
        let b = SdWebUi::new(&only).unwrap();
        assert!(b.supports(OpKind::Imagine) && !b.supports(OpKind::Pan));
    }

    #[test]
    fn progress_answers() {
        let p = |v: Value| progress_percent(v.to_string().as_bytes());
        assert_eq!(
            p(json!({"progress": 0.42, "state": {"job_count": 1}})),
            Some(42)
        );
        assert_eq!(
            p(json!({"progress": 1.0, "state": {"job_count": 1}})),
            Some(99)
        );
        assert_eq!(p(json!({"progress": 0.0, "state": {"job_count": 0}})), None);
        assert_eq!(p(json!({"nothing": 1})), None);
    }
}
