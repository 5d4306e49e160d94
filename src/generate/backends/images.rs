//! Image work every backend kind shares: the canvases and masks of the edits that draw around or
//! over a parent (pan, outpaint, inpaint), reading the images a backend answers with (kept as
//! sent, less their metadata, checked side by side), and running that CPU work off the async
//! runtime.

use std::borrow::Cow;

use crate::generate::grid::side_by_side;
use crate::generate::inputs::{decode, probe, InputLimits};
use crate::generate::ops::{self, Direction};
use crate::generate::raster::{dimensions, RgbaImage};
use crate::generate::stored::{self, Kept, StoredImage};
use crate::generate::{Answered, GenerateError, Job};

/// Denoising strengths of the Stable Diffusion servers' img2img (how much of the start image is
/// redrawn), by what the job does: a subtle or strong variation, the new area of a pan or
/// outpaint (started from a continuation of the parent), an inpaint's masked area.
pub mod strength {
    pub const SUBTLE: f64 = 0.45;
    /// A strong variation, and a variation of one image of a grid (as Midjourney's V buttons).
    pub const STRONG: f64 = 0.7;
    pub const EXTEND: f64 = 0.9;
    pub const INPAINT: f64 = 0.75;

    use crate::domain::image_prompts::IMAGE_WEIGHT_DEFAULT;
    use crate::domain::operation::VariationOf;
    use crate::generate::Job;

    /// A variation's strength: subtle, or strong (a grid's image varies strongly, as
    /// Midjourney's V buttons do).
    pub fn of_variation(of: &VariationOf) -> f64 {
        match of {
            VariationOf::Subtle => SUBTLE,
            VariationOf::Index(_) | VariationOf::Strong => STRONG,
        }
    }

    /// How much an img2img from a job's image prompts redraws: as much of them kept as `--iw`
    /// asks.
    pub fn of_image_prompts(job: &Job) -> f64 {
        let iw = job.extras.parameters.iw.unwrap_or(IMAGE_WEIGHT_DEFAULT);
        crate::generate::ops::image_prompt_denoising(iw)
    }
}

/// A `w` x `h` image of one colour.
pub fn filled(w: u32, h: u32, rgba: [u8; 4]) -> RgbaImage {
    RgbaImage {
        width: w,
        height: h,
        data: rgba.repeat(w as usize * h as usize),
    }
}

/// Copy `src` onto `dst` with its top-left corner at (`x`, `y`), clipped to `dst`.
pub fn paste(dst: &mut RgbaImage, src: &RgbaImage, x: u32, y: u32) {
    let (dw, sw) = (dst.width as usize, src.width as usize);
    let n = sw.min(dw.saturating_sub(x as usize)) * 4;
    for row in 0..src.height.min(dst.height.saturating_sub(y)) as usize {
        let from = row * sw * 4;
        let to = ((y as usize + row) * dw + x as usize) * 4;
        dst.data[to..to + n].copy_from_slice(&src.data[from..from + n]);
    }
}

/// Where a `pw` x `ph` parent sits on the `cw` x `ch` canvas of a pan toward `direction`: on the
/// side away from the new strip.
pub fn pan_offset((pw, ph): (u32, u32), (cw, ch): (u32, u32), direction: Direction) -> (u32, u32) {
    match direction {
        Direction::Left => (cw.saturating_sub(pw), 0),
        Direction::Up => (0, ch.saturating_sub(ph)),
        Direction::Right | Direction::Down => (0, 0),
    }
}

/// A `w` x `h` mask: `keep` inside the rectangle (`x`, `y`, `kw`, `kh`), `redraw` outside it.
pub fn rect_mask(
    (w, h): (u32, u32),
    (x, y, kw, kh): (u32, u32, u32, u32),
    keep: [u8; 4],
    redraw: [u8; 4],
) -> RgbaImage {
    let mut mask = filled(w, h, redraw);
    for (i, px) in mask.data.chunks_exact_mut(4).enumerate() {
        let (px_x, px_y) = ((i % w as usize) as u32, (i / w as usize) as u32);
        if (x..x.saturating_add(kw)).contains(&px_x) && (y..y.saturating_add(kh)).contains(&px_y) {
            px.copy_from_slice(&keep);
        }
    }
    mask
}

/// easel's inpaint mask in a backend's colours: `redraw` where it redraws, `keep` elsewhere.
pub fn recolour_mask(mask: &RgbaImage, keep: [u8; 4], redraw: [u8; 4]) -> RgbaImage {
    let mut out = filled(mask.width, mask.height, keep);
    for (o, px) in out.data.chunks_exact_mut(4).zip(mask.data.chunks_exact(4)) {
        if ops::mask_redraws([px[0], px[1], px[2], px[3]]) {
            o.copy_from_slice(&redraw);
        }
    }
    out
}

/// The size to ask a backend for: the job's new-image size with both sides rounded to a multiple
/// of `multiple` (at least one multiple).
pub fn size_for(job: &Job, multiple: u32) -> (u32, u32) {
    let (w, h) = dimensions(job.aspect.width, job.aspect.height, job.image_size);
    let round = |v: u32| ((v + multiple / 2) / multiple).max(1) * multiple;
    (round(w), round(h))
}

/// Decode an image a backend made, under the input limits: a malformed one is the backend's
/// fault, never a panic.
pub fn decode_output(bytes: &[u8], what: &str) -> Result<RgbaImage, GenerateError> {
    decode(bytes, &InputLimits::default())
        .map_err(|e| GenerateError::Failed(format!("{what} from the backend: {e}")))
}

/// An image a backend made, as easel stores it ([`stored::keep`]: a PNG or JPEG less its
/// metadata, anything else as PNG), with its size. A kept file's chunks or segments have parsed
/// and its header is read (its size within the input limits); its pixels are decoded when its
/// task's grid is made ([`crate::generate::grid`]). A malformed file fails the task, never a
/// panic.
pub fn keep_output(bytes: Cow<'_, [u8]>, what: &str) -> Result<Answered, GenerateError> {
    let failed = |e: String| GenerateError::Failed(format!("{what} from the backend: {e}"));
    match stored::keep(bytes).map_err(failed)? {
        Kept::File(stored) => {
            let header =
                probe(&stored.bytes, &InputLimits::default()).map_err(|e| failed(e.to_string()))?;
            Ok(Answered {
                width: header.width,
                height: header.height,
                stored,
            })
        }
        Kept::Reencode { bytes, orientation } => {
            let pixels = stored::orient(decode_output(&bytes, what)?, orientation);
            Ok(Answered {
                stored: StoredImage::png(&pixels),
                width: pixels.width,
                height: pixels.height,
            })
        }
    }
}

/// [`keep_output`] of each file, side by side ([`side_by_side`]), in order; the first
/// failure by position when any fails. Call it from a blocking thread.
pub fn keep_outputs(files: &[&[u8]]) -> Result<Vec<Answered>, GenerateError> {
    keep_each(files, |file, _| Ok(Cow::Borrowed(*file)))
}

/// [`keep_output`] of each of `files`, side by side ([`side_by_side`]; each reads its
/// whole file, and one that is not PNG or JPEG is decoded), where `bytes` gives a file's bytes
/// on its thread (decoding the base64 an answer carries, say); in order, the first failure by
/// position when any fails. Call it from a blocking thread.
pub fn keep_each<T: Sync>(
    files: &[T],
    bytes: impl for<'a> Fn(&'a T, &str) -> Result<Cow<'a, [u8]>, GenerateError> + Sync,
) -> Result<Vec<Answered>, GenerateError> {
    side_by_side(files, |i, file| {
        let what = format!("image {}", i + 1);
        keep_output(bytes(file, &what)?, &what)
    })
    .into_iter()
    .collect()
}

/// `images` decoded, resized to `w` x `h` and encoded as PNG, side by side: a
/// backend's images of another size than asked, made the size asked (their files cannot be
/// kept). The first failure by position when one does not decode.
pub fn resize_all(
    images: Vec<Answered>,
    (w, h): (u32, u32),
) -> Result<Vec<Answered>, GenerateError> {
    side_by_side(&images, |i, image| {
        let what = format!("image {}", i + 1);
        let pixels = ops::resize(&decode_output(&image.stored.bytes, &what)?, w, h);
        Ok(Answered {
            stored: StoredImage::png(&pixels),
            width: pixels.width,
            height: pixels.height,
        })
    })
    .into_iter()
    .collect()
}

/// CPU work (resampling, PNG coding) off the async runtime.
pub async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, GenerateError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| GenerateError::Failed(format!("image work crashed: {e}")))
}
