//! The pixels of an edit: the parent on its canvas, the mask OpenAI's edits read, and the grid of
//! the answered images.

use super::client::Sent;
use crate::generate::backends::answers::keep_each;
use crate::generate::backends::edits;
use crate::generate::ops::{self, Direction};
use crate::generate::{Answered, GenerateError, Product};
use crate::images::{self, Filter, RgbaImage};

/// An edit mask's pixel over what is kept: opaque black. OpenAI reads only the alpha (opaque:
/// kept); stable-diffusion.cpp's server reads the mask as grey, ignoring alpha, and keeps black.
const KEEP: [u8; 4] = [0, 0, 0, 255];
/// An edit mask's pixel where the model draws: fully transparent for OpenAI, white for
/// stable-diffusion.cpp (its mask is the WebUI's, white redrawn), so one mask means the same to
/// both.
const REDRAW: [u8; 4] = [255, 255, 255, 0];

/// The four files kept (less their metadata) and decoded, checked to be one size, and their
/// grid.
pub(super) fn grid(files: &[Sent]) -> Result<Product, GenerateError> {
    if files.len() != 4 {
        return Err(GenerateError::Failed(format!(
            "the backend made {} images, not 4",
            files.len()
        )));
    }
    let images: [Answered; 4] = keep_each(files, Sent::len, |file, _| file.bytes())?
        .try_into()
        .map_err(|_| GenerateError::Failed("the backend made too few images".into()))?;
    let size = Answered::size;
    if images.iter().any(|a| size(a) != size(&images[0])) {
        return Err(GenerateError::Failed(
            "the backend made images of different sizes".into(),
        ));
    }
    Ok(Product::from_answers(images))
}

/// `parent` resized into the rectangle (`x`, `y`, `w`, `h`) of a transparent canvas of `size`,
/// and the edit mask: opaque over the parent, transparent (to be drawn) everywhere else.
fn place_on_canvas(
    parent: &RgbaImage,
    (x, y, w, h): (u32, u32, u32, u32),
    (tw, th): (u32, u32),
) -> (RgbaImage, RgbaImage) {
    let mut canvas = edits::filled(tw, th, [0, 0, 0, 0]);
    edits::paste(&mut canvas, &ops::resize(parent, w, h), x, y);
    let mask = edits::rect_mask((tw, th), (x, y, w, h), KEEP, REDRAW);
    (canvas, mask)
}

/// Pan: the parent on a canvas extended by half toward `direction`, scaled to `size`.
pub(super) fn pan_canvas(
    parent: &RgbaImage,
    direction: Direction,
    size: (u32, u32),
) -> (RgbaImage, RgbaImage) {
    let (pw, ph) = (parent.width.max(1), parent.height.max(1));
    let (cw, ch) = ops::pan_size(pw, ph, direction);
    let (x, y) = edits::pan_offset((pw, ph), (cw, ch), direction);
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
pub(super) fn outpaint_canvas(
    parent: &RgbaImage,
    zoom: f64,
    size: (u32, u32),
) -> (RgbaImage, RgbaImage) {
    let placement = ops::outpaint_placement(parent.width, parent.height, size.0, size.1, zoom);
    place_on_canvas(parent, placement, size)
}

/// easel's inpaint mask as OpenAI's, at `w` x `h`: redrawn pixels fully transparent, the others
/// opaque. Scaled by nearest neighbour, so that every pixel stays one or the other.
pub(super) fn edit_mask(mask: &RgbaImage, w: u32, h: u32) -> RgbaImage {
    let well_formed = mask.data.len() == mask.width as usize * mask.height as usize * 4;
    if !well_formed || mask.width == 0 || mask.height == 0 || w == 0 || h == 0 {
        return edits::filled(w, h, REDRAW);
    }
    images::resize(
        &edits::recolour_mask(mask, KEEP, REDRAW),
        w,
        h,
        Filter::Nearest,
    )
}
