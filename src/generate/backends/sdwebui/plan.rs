//! What a job asks of the WebUI: the endpoint and the JSON body of each operation, with its
//! images (the parent on a canvas, easel's mask in the WebUI's black and white) at sides the
//! model works at.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde_json::{json, Value};

use crate::config::samplers::sampler;
use crate::domain::Operation;
use crate::generate::backends::edits::strength::{self, EXTEND, INPAINT};
pub use crate::generate::backends::edits::strength::{STRONG, SUBTLE};
use crate::generate::backends::edits::{self, size_for};
use crate::generate::backends::sdcpp::neutralize;
use crate::generate::ops::{self, Direction};
use crate::generate::{GenerateError, Job, Product};
use crate::images::{dimensions, encode_png, RgbaImage};

/// The WebUI's path for new pictures.
pub const TXT2IMG: &str = "/sdapi/v1/txt2img";
/// The WebUI's path for pictures from a parent: variations, pan, outpaint, inpaint.
pub const IMG2IMG: &str = "/sdapi/v1/img2img";
/// The WebUI's path for upscales.
pub const EXTRA: &str = "/sdapi/v1/extra-single-image";
/// The WebUI's path for describe.
pub const INTERROGATE: &str = "/sdapi/v1/interrogate";

/// Images per grid task, made in one batch.
pub(super) const BATCH: usize = 4;
/// How far `--chaos 100` moves each image of a batch from the seed's: the WebUI's variation
/// seed (`subseed`) mixed in at this strength times chaos / 100.
pub const CHAOS_SUBSEED_MOST: f64 = 0.8;
/// The upscaler the WebUI ships with (Real-ESRGAN's general model).
pub(super) const UPSCALER: &str = "R-ESRGAN 4x+";
/// The WebUI's mask pixels: white where it redraws, black where it keeps.
const REDRAW: [u8; 4] = [255, 255, 255, 255];
const KEEP: [u8; 4] = [0, 0, 0, 255];

/// What a job asks of the server, with its body encoded.
pub(super) enum Call {
    /// Nothing: the product is already made.
    Done(Product),
    /// txt2img or img2img, answered with images of `size`.
    Images {
        path: &'static str,
        body: Vec<u8>,
        size: (u32, u32),
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

pub(super) fn plan(job: &Job, model: Option<&str>) -> Result<Call, GenerateError> {
    let call = match &job.operation {
        Operation::Imagine | Operation::Reroll => {
            let (width, height) = size_for(job, 8);
            if job.inputs.is_empty() {
                Call::Images {
                    path: TXT2IMG,
                    body: encode(&generation(job, model, width, height)),
                    size: (width, height),
                }
            } else {
                // Image prompts: img2img from them, as much of them kept as `--iw` asks.
                let init = ops::image_prompt_canvas(&job.inputs, width, height, job.seed);
                img2img(job, model, &init, None, strength::of_image_prompts(job))?
            }
        }
        Operation::Variations { of, .. } => {
            let strength = strength::of_variation(of);
            let init = fit8(job.input(0)?);
            img2img(job, model, &init, None, strength)?
        }
        Operation::Pan { direction, .. } => {
            let parent = job.input(0)?;
            let direction = Direction::from(*direction);
            // The new strip starts as a continuation of the parent (ops::pan), then is redrawn.
            let canvas = ops::pan(parent, direction, None, job.seed, 0);
            let (pw, ph) = (parent.width, parent.height);
            let size = (canvas.width, canvas.height);
            let (x, y) = edits::pan_offset((pw, ph), size, direction);
            let mask = edits::rect_mask(size, (x, y, pw, ph), KEEP, REDRAW);
            img2img(job, model, &fit8(&canvas), Some(&fit8_mask(&mask)), EXTEND)?
        }
        Operation::Outpaint { zoom_ratio, .. } => {
            let parent = job.input(0)?;
            let long = parent.width.max(parent.height);
            let (w, h) = dimensions(job.aspect.width, job.aspect.height, long);
            let canvas = ops::outpaint(parent, w, h, *zoom_ratio, None, job.seed, 0);
            let (x, y, sw, sh) =
                ops::outpaint_placement(parent.width, parent.height, w, h, *zoom_ratio);
            let mask = edits::rect_mask((w, h), (x, y, sw, sh), KEEP, REDRAW);
            img2img(job, model, &fit8(&canvas), Some(&fit8_mask(&mask)), EXTEND)?
        }
        Operation::Inpaint { .. } => {
            let parent = job.input(0)?;
            let mask = job.mask()?;
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
        Operation::Upscale1x { .. } => Call::Done(Product::single(job.input(0)?)),
        Operation::UpscaleAlt { .. } => upscale(job.input(0)?, 2)?,
        Operation::UpscaleHighres { factor, .. } => upscale(job.input(0)?, u32::from(*factor))?,
        Operation::Describe { .. } => {
            let image = job.input(0)?;
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

/// The fields txt2img and img2img share: the task's settings as resolved at submit (the model's
/// defaults included), so that the WebUI's own defaults apply only to a task stored without
/// them. `model` is the checkpoint to switch to.
pub(super) fn generation(job: &Job, model: Option<&str>, width: u32, height: u32) -> Value {
    let settings = &job.extras.settings;
    let parameters = &job.extras.parameters;
    // `::` weights in the WebUI's `(text:w)`.
    let prompt = parameters.weighted_prompt(&job.prompt);
    let mut body = json!({
        // stable-diffusion.cpp's server reads settings from tags in a prompt: none from a caller.
        "prompt": neutralize(&prompt),
        // The prompt's `--no` words are in the settings' negative prompt, not the job's text.
        "negative_prompt": neutralize(settings.negative_prompt.as_deref().unwrap_or("")),
        "seed": job.seed,
        "width": width,
        "height": height,
        "batch_size": BATCH,
        "n_iter": 1,
        "send_images": true,
        "save_images": false,
        "tiling": parameters.tile,
    });
    if let Some(steps) = settings.steps {
        body["steps"] = json!(steps);
    }
    if let Some(cfg) = settings.cfg_scale {
        body["cfg_scale"] = json!(cfg);
    }
    if let Some(name) = settings.sampler.as_deref().and_then(sampler) {
        // Known to the WebUI: checked at submit against the model's backends.
        if let Some(webui) = name.webui {
            body["sampler_name"] = json!(webui);
        }
    }
    if let Some(chaos) = parameters.chaos.filter(|c| *c > 0) {
        // The batch's images take subseeds subseed, subseed + 1, ...: mixed in, they spread.
        body["subseed"] = json!(job.seed.wrapping_add(1) & 0xffff_ffff);
        body["subseed_strength"] = json!(f64::from(chaos.min(100)) / 100.0 * CHAOS_SUBSEED_MOST);
    }
    if let Some(model) = model {
        body["override_settings"] = json!({ "sd_model_checkpoint": model });
    }
    body
}

/// img2img from `init` (whose size is the output's), repainting where `mask` is white.
pub(super) fn img2img(
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
        size: (init.width, init.height),
    })
}

pub(super) fn upscale(image: &RgbaImage, factor: u32) -> Result<Call, GenerateError> {
    Ok(Call::Upscale {
        body: encode(&json!({
            "image": base64_png(image)?,
            "resize_mode": 0,
            "upscaling_resize": factor,
            "upscaler_1": UPSCALER,
        })),
    })
}

pub(super) fn encode(body: &Value) -> Vec<u8> {
    serde_json::to_vec(body).expect("JSON values serialize")
}

pub(super) fn base64_png(image: &RgbaImage) -> Result<String, GenerateError> {
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
pub(super) fn round8(v: u32) -> u32 {
    (v.saturating_add(4) / 8).max(1) * 8
}

/// The image at sides that are multiples of 8, resized when they are not, so that the size
/// sent is the size the server works at.
pub(super) fn fit8(image: &RgbaImage) -> RgbaImage {
    let (w, h) = (round8(image.width), round8(image.height));
    if (w, h) == (image.width, image.height) {
        image.clone()
    } else {
        ops::resize(image, w, h)
    }
}

/// A black-and-white mask at sides that are multiples of 8.
pub(super) fn fit8_mask(mask: &RgbaImage) -> RgbaImage {
    let resized = fit8(mask);
    if resized.width == mask.width && resized.height == mask.height {
        resized
    } else {
        binary_mask(&resized)
    }
}

/// The WebUI's mask: white where easel's mask redraws, black elsewhere.
pub(super) fn binary_mask(mask: &RgbaImage) -> RgbaImage {
    edits::recolour_mask(mask, KEEP, REDRAW)
}
