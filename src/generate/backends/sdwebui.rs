//! AUTOMATIC1111's stable-diffusion-webui API (`/sdapi/v1`), which Forge, SD.Next and
//! stable-diffusion.cpp's server answer too. New pictures come from `txt2img`; variations, pan,
//! outpaint and inpaint are `img2img` on the parent (with a mask where part of it is redrawn);
//! upscales are `extra-single-image`; describe is `interrogate`. The WebUI reports progress at
//! `progress`, polled while a job runs, and stops a job at `interrupt`, called when one runs past
//! the backend's timeout.

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
use crate::domain::operation::{PanDirection, VariationOf};
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
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| format!("backends.{name}: cannot build an HTTP client: {e}"))?;
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
            tracing::warn!(backend = %self.config.name, "could not interrupt a timed-out job: {e}");
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
                blocking(move || images_product(&answer, &name)).await
            }
            Call::Upscale { body } => {
                let answer = self.post_job(EXTRA, body, progress).await?;
                blocking(move || upscale_product(&answer)).await
            }
            Call::Describe {
                body,
                width,
                height,
            } => {
                let answer = self.post_job(INTERROGATE, body, progress).await?;
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
            match tokio::time::timeout(self.config.timeout, self.perform(job, progress)).await {
                Ok(result) => result,
                Err(_) => {
                    self.interrupt().await;
                    Err(GenerateError::transient(format!(
                        "timed out after {}",
                        humantime::format_duration(self.config.timeout)
                    )))
                }
            }
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
            let direction = match direction {
                PanDirection::Up => Direction::Up,
                PanDirection::Down => Direction::Down,
                PanDirection::Left => Direction::Left,
                PanDirection::Right => Direction::Right,
            };
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
