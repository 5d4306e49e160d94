//! The images a ComfyUI job uploads: the parent on its canvas, with the area to redraw as a mask.

use crate::domain::Operation;
use crate::generate::backends::edits;
use crate::generate::ops::{self, Direction};
use crate::generate::{GenerateError, Job};
use crate::images::{dimensions, encode_png, RgbaImage};

/// The files a job uploads: its input images (pan and outpaint: the parent on its larger
/// canvas; inpaint: the parent), with the area to redraw transparent, and that area as a mask.
pub(super) struct Prepared {
    pub(super) images: Vec<Vec<u8>>,
    /// The size of the first image.
    pub(super) size: Option<(u32, u32)>,
    pub(super) mask: Option<Vec<u8>>,
}

/// The mask's pixels: white and transparent where the model draws, opaque black where it keeps,
/// so that LoadImage (its mask is the inverted alpha) and LoadImageMask (red channel, or
/// inverted alpha) all read the same area.
pub(super) const REDRAW: [u8; 4] = [255, 255, 255, 0];
pub(super) const KEEP: [u8; 4] = [0, 0, 0, 255];

/// The mid-grey a canvas starts as around the parent.
const GREY: [u8; 4] = [128, 128, 128, 255];

pub(super) fn prepare_inputs(job: &Job) -> Result<Prepared, GenerateError> {
    // The image goes up with the area to redraw transparent, beside the mask itself.
    let with_mask = |mut image: RgbaImage, mask: RgbaImage| {
        for (px, m) in image
            .data
            .chunks_exact_mut(4)
            .zip(mask.data.chunks_exact(4))
        {
            if m == REDRAW {
                px[3] = 0;
            }
        }
        Prepared {
            size: Some((image.width, image.height)),
            images: vec![encode_png(&image)],
            mask: Some(encode_png(&mask)),
        }
    };
    // `placed` on a `w` x `h` grey canvas at (x, y), to be drawn around.
    let around = |placed: &RgbaImage, (w, h): (u32, u32), (x, y): (u32, u32)| {
        let mut canvas = edits::filled(w, h, GREY);
        edits::paste(&mut canvas, placed, x, y);
        let kept = (x, y, placed.width, placed.height);
        with_mask(canvas, edits::rect_mask((w, h), kept, KEEP, REDRAW))
    };
    let prepared = match &job.operation {
        Operation::Inpaint { .. } => {
            let parent = job.input(0)?;
            let mask = job.mask()?;
            if (mask.width, mask.height) != (parent.width, parent.height)
                || mask.data.len() != parent.data.len()
            {
                return Err(GenerateError::Failed(
                    "the mask does not have the image's size".into(),
                ));
            }
            with_mask(parent.clone(), edits::recolour_mask(mask, KEEP, REDRAW))
        }
        Operation::Pan { direction, .. } => {
            let parent = job.input(0)?;
            let dir = Direction::from(*direction);
            let size = ops::pan_size(parent.width, parent.height, dir);
            let at = edits::pan_offset((parent.width, parent.height), size, dir);
            around(parent, size, at)
        }
        Operation::Outpaint { zoom_ratio, .. } => {
            let parent = job.input(0)?;
            let long = parent.width.max(parent.height);
            let (w, h) = dimensions(job.aspect.width, job.aspect.height, long);
            let (x0, y0, sw, sh) =
                ops::outpaint_placement(parent.width, parent.height, w, h, *zoom_ratio);
            around(&ops::resize(parent, sw, sh), (w, h), (x0, y0))
        }
        // Image prompts: one image at the new image's size, which the graph encodes.
        Operation::Imagine | Operation::Reroll if !job.inputs.is_empty() => {
            let (w, h) = edits::size_for(job, 8);
            Prepared {
                size: Some((w, h)),
                images: vec![encode_png(&ops::image_prompt_canvas(
                    &job.inputs,
                    w,
                    h,
                    job.seed,
                ))],
                mask: None,
            }
        }
        _ => Prepared {
            size: job.inputs.first().map(|i| (i.width, i.height)),
            images: job.inputs.iter().map(encode_png).collect(),
            mask: None,
        },
    };
    Ok(prepared)
}
