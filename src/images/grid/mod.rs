//! The 2x2 grid of a task's four images, in one place: composed from pixels ([`compose_grid`],
//! the procedural generator's grids), made from their stored files ([`make`]: after the task is
//! recorded, or when the grid is asked for before it is there), and the grid that follows its
//! task or is made on request ([`follow`], which the worker and `GET /files` both call). Making
//! it from files decodes all four, so it is most of a task's own CPU time at model sizes; a task
//! whose grid follows it is finished as soon as its four files are stored.

pub mod follow;

use super::inputs::{decode, InputLimits};
use super::parallel::side_by_side;
use super::resize::{resize, Filter};
use super::stored::{Format, StoredImage};
use super::RgbaImage;

/// 2x2 grid of the four images in reading order (0 top-left, 1 top-right,
/// 2 bottom-left, 3 bottom-right).
///
/// The grid has the same pixel size as the first image. When every image has
/// that (even) size, each cell is its image scaled down by exactly 2 with a
/// 2x2 box average. Images of any other size are resampled straight to the
/// cell size (bilinear, widened to an area average when shrinking), which is
/// what resizing to the first image's size and then halving approximates.
/// Averaging is alpha-weighted, so transparent pixels do not bleed colour.
/// Malformed images (data length not matching the size) give a black cell.
pub fn compose_grid(images: &[RgbaImage; 4]) -> RgbaImage {
    let (w, h) = (images[0].width, images[0].height);
    let mut out = RgbaImage::new(w, h);
    if w == 0 || h == 0 {
        return out;
    }
    let left_w = w / 2;
    let top_h = h / 2;
    let cells = [
        (0, 0, left_w, top_h),
        (left_w, 0, w - left_w, top_h),
        (0, top_h, left_w, h - top_h),
        (left_w, top_h, w - left_w, h - top_h),
    ];
    for (img, &(x0, y0, cw, ch)) in images.iter().zip(cells.iter()) {
        if cw == 0 || ch == 0 || img.width == 0 || img.height == 0 || !img.is_well_formed() {
            continue; // stays opaque black
        }
        let cell = if img.width == cw * 2 && img.height == ch * 2 {
            halve(img)
        } else {
            resize(img, cw, ch, Filter::Triangle)
        };
        blit(&mut out, &cell, x0, y0);
    }
    out
}

/// Copy `src` into `dst` with its top-left corner at (x0, y0); clipped to `dst`.
fn blit(dst: &mut RgbaImage, src: &RgbaImage, x0: u32, y0: u32) {
    let dw = dst.width as usize;
    let (x0, y0) = (x0 as usize, y0 as usize);
    let copy_w = (src.width as usize).min(dw.saturating_sub(x0));
    let copy_h = (src.height as usize).min((dst.height as usize).saturating_sub(y0));
    for y in 0..copy_h {
        let s = y * src.width as usize * 4;
        let d = ((y0 + y) * dw + x0) * 4;
        dst.data[d..d + copy_w * 4].copy_from_slice(&src.data[s..s + copy_w * 4]);
    }
}

/// Exact 2x2 box average of a well-formed image with even width and height.
fn halve(img: &RgbaImage) -> RgbaImage {
    let (nw, nh) = (img.width / 2, img.height / 2);
    let sw = img.width as usize;
    let mut out = RgbaImage::new(nw, nh);
    for y in 0..nh as usize {
        for x in 0..nw as usize {
            let i = [
                ((2 * y) * sw + 2 * x) * 4,
                ((2 * y) * sw + 2 * x + 1) * 4,
                ((2 * y + 1) * sw + 2 * x) * 4,
                ((2 * y + 1) * sw + 2 * x + 1) * 4,
            ];
            let d = &img.data;
            let a_sum: u32 = i.iter().map(|&k| u32::from(d[k + 3])).sum();
            let o = (y * nw as usize + x) * 4;
            if a_sum == 4 * 255 {
                for c in 0..3 {
                    let s: u32 = i.iter().map(|&k| u32::from(d[k + c])).sum();
                    out.data[o + c] = ((s + 2) / 4) as u8;
                }
                out.data[o + 3] = 255;
            } else {
                // Alpha-weighted colour; a fully transparent block stays transparent black.
                for c in 0..3 {
                    let s: u32 = i
                        .iter()
                        .map(|&k| u32::from(d[k + c]) * u32::from(d[k + 3]))
                        .sum();
                    let v = (s + a_sum / 2).checked_div(a_sum).unwrap_or(0);
                    out.data[o + c] = v.min(255) as u8;
                }
                out.data[o + 3] = ((a_sum + 2) / 4) as u8;
            }
        }
    }
    out
}

/// The grid's format for images of `formats`: JPEG when all are JPEG (a lossless grid of lossy
/// pictures buys nothing and weighs ten times as much), PNG otherwise.
pub fn format_for(formats: impl IntoIterator<Item = Format>) -> Format {
    let mut formats = formats.into_iter().peekable();
    if formats.peek().is_some() && formats.all(|f| f == Format::Jpeg) {
        Format::Jpeg
    } else {
        Format::Png
    }
}

/// The format a stored image's key names by its extension (`0.jpg`), if it is one easel writes.
pub fn format_of_key(key: &str) -> Option<Format> {
    match key.rsplit_once('.')?.1 {
        "png" => Some(Format::Png),
        "jpg" => Some(Format::Jpeg),
        _ => None,
    }
}

/// The grid of four stored images (PNG or JPEG files, all the same size), encoded as `format`.
/// They are decoded side by side ([`side_by_side`](super::parallel::side_by_side)); a file that does not decode is an
/// error naming it. CPU work: call it from a blocking thread.
pub fn make(files: [&[u8]; 4], format: Format) -> Result<StoredImage, String> {
    let decoded = side_by_side(&files, |i, bytes| {
        decode(bytes, &InputLimits::default())
            .map_err(|e| format!("image {} does not decode: {e}", i + 1))
    });
    let pixels: Vec<RgbaImage> = decoded.into_iter().collect::<Result<_, _>>()?;
    let pixels: [RgbaImage; 4] = pixels.try_into().expect("four files, four images");
    let grid = compose_grid(&pixels);
    drop(pixels);
    // The key already names the format: a grid that cannot be a JPEG is an error, not a PNG
    // under a `.jpg` name (four JPEGs of one size always make one).
    match format {
        Format::Jpeg => {
            StoredImage::jpeg(&grid).map_err(|e| format!("images make no JPEG grid: {e}"))
        }
        Format::Png => Ok(StoredImage::png(&grid)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::images::testing::{pattern, pixel, solid};

    fn picture(w: u32, h: u32, shade: u8) -> RgbaImage {
        let mut image = RgbaImage::new(w, h);
        for (i, px) in image.data.chunks_exact_mut(4).enumerate() {
            px.copy_from_slice(&[shade, (i % 251) as u8, 255 - shade, 255]);
        }
        image
    }

    #[test]
    fn the_grid_of_jpeg_files_is_jpeg_and_of_any_png_is_png() {
        use Format::*;
        assert_eq!(format_for([Jpeg, Jpeg, Jpeg, Jpeg]), Jpeg);
        assert_eq!(format_for([Jpeg, Png, Jpeg, Jpeg]), Png);
        assert_eq!(format_for([Png; 4]), Png);
        assert_eq!(format_for([]), Png);
        assert_eq!(format_of_key("t/f/grid.jpg"), Some(Jpeg));
        assert_eq!(format_of_key("t/f/0.png"), Some(Png));
        assert_eq!(format_of_key("t/f/0.webp"), None);
    }

    #[test]
    fn a_grid_is_the_first_images_size_with_each_image_in_its_quarter() {
        let files: Vec<StoredImage> = [10u8, 80, 160, 240]
            .iter()
            .map(|&shade| StoredImage::png(&picture(64, 48, shade)))
            .collect();
        let grid = make(
            std::array::from_fn(|i| files[i].bytes.as_slice()),
            Format::Png,
        )
        .unwrap();
        assert_eq!(grid.format, Format::Png);
        let pixels = decode(&grid.bytes, &InputLimits::default()).unwrap();
        assert_eq!((pixels.width, pixels.height), (64, 48));
        // The red channel of each quarter's middle is its image's shade.
        for (k, (x, y)) in [(16, 12), (48, 12), (16, 36), (48, 36)].iter().enumerate() {
            let at = ((y * 64 + x) * 4) as usize;
            assert_eq!(pixels.data[at], [10u8, 80, 160, 240][k], "quarter {k}");
        }
        let jpeg = make(
            std::array::from_fn(|i| files[i].bytes.as_slice()),
            Format::Jpeg,
        )
        .unwrap();
        assert_eq!(jpeg.format, Format::Jpeg);
    }

    #[test]
    fn a_file_that_does_not_decode_is_named() {
        let good = StoredImage::png(&picture(8, 8, 1));
        let mut bad = good.bytes.clone();
        let half = bad.len() / 2;
        bad.truncate(half);
        let e = make([&good.bytes, &good.bytes, &bad, &good.bytes], Format::Png).unwrap_err();
        assert!(e.contains("image 3"), "{e}");
    }

    #[test]
    fn grid_places_quadrants() {
        let colors = [
            [255, 0, 0, 255],
            [0, 255, 0, 255],
            [0, 0, 255, 255],
            [255, 255, 0, 255],
        ];
        let imgs = colors.map(|c| solid(64, 48, c));
        let grid = compose_grid(&imgs);
        assert_eq!((grid.width, grid.height), (64, 48));
        assert_eq!(grid.data.len(), 64 * 48 * 4);
        for (i, c) in colors.iter().enumerate() {
            let (qx, qy) = ((i % 2) as u32 * 32, (i / 2) as u32 * 24);
            for (x, y) in [(0, 0), (31, 0), (0, 23), (31, 23), (15, 11)] {
                assert_eq!(
                    &pixel(&grid, qx + x, qy + y),
                    c,
                    "quadrant {i} at ({x},{y})"
                );
            }
        }
    }

    #[test]
    fn grid_is_exact_box_average() {
        let imgs = [
            pattern(8, 6, false),
            pattern(8, 6, false),
            pattern(8, 6, false),
            pattern(8, 6, false),
        ];
        let grid = compose_grid(&imgs);
        let src = &imgs[0];
        for y in 0..3 {
            for x in 0..4 {
                let got = pixel(&grid, x, y);
                for (c, channel) in got.iter().enumerate().take(3) {
                    let s: u32 = [(0, 0), (1, 0), (0, 1), (1, 1)]
                        .iter()
                        .map(|&(dx, dy)| u32::from(pixel(src, 2 * x + dx, 2 * y + dy)[c]))
                        .sum();
                    assert_eq!(u32::from(*channel), (s + 2) / 4);
                }
            }
        }
    }

    #[test]
    fn grid_handles_mismatched_sizes() {
        let imgs = [
            solid(100, 80, [10, 20, 30, 255]),
            solid(37, 41, [200, 0, 0, 255]),
            solid(301, 7, [0, 200, 0, 255]),
            solid(1, 1, [0, 0, 200, 255]),
        ];
        let grid = compose_grid(&imgs);
        assert_eq!((grid.width, grid.height), (100, 80));
        assert_eq!(pixel(&grid, 10, 10), [10, 20, 30, 255]);
        assert_eq!(pixel(&grid, 75, 20), [200, 0, 0, 255]);
        assert_eq!(pixel(&grid, 25, 60), [0, 200, 0, 255]);
        assert_eq!(pixel(&grid, 99, 79), [0, 0, 200, 255]);
        // Odd sizes and degenerate inputs don't panic.
        let odd = [
            solid(5, 3, [1, 2, 3, 255]),
            RgbaImage::new(0, 0),
            RgbaImage {
                width: 9,
                height: 9,
                data: vec![],
            },
            solid(2, 2, [0, 0, 0, 0]),
        ];
        let g = compose_grid(&odd);
        assert_eq!((g.width, g.height, g.data.len()), (5, 3, 60));
        assert_eq!(
            compose_grid(&[
                RgbaImage::new(0, 0),
                RgbaImage::new(0, 0),
                RgbaImage::new(0, 0),
                RgbaImage::new(0, 0),
            ])
            .data
            .len(),
            0
        );
    }

    #[test]
    fn grid_transparency_does_not_bleed() {
        // Half-transparent-white / fully transparent-red checker: the average must stay white.
        let mut img = RgbaImage::new(4, 4);
        for (i, px) in img.data.chunks_exact_mut(4).enumerate() {
            if i % 2 == 0 {
                px.copy_from_slice(&[255, 255, 255, 128]);
            } else {
                px.copy_from_slice(&[255, 0, 0, 0]);
            }
        }
        let grid = compose_grid(&[img.clone(), img.clone(), img.clone(), img]);
        assert_eq!(pixel(&grid, 0, 0), [255, 255, 255, 64]);
    }
}
