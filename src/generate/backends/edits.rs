//! The canvases and masks of the edits every backend kind draws around or over a parent (pan,
//! outpaint, inpaint), the size to ask a backend for, and how strongly an img2img redraws.

use crate::generate::ops::{self, Direction};
use crate::generate::Job;
use crate::images::{dimensions, RgbaImage};

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
