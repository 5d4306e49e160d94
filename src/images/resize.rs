//! Resampling an image to another size.

use super::RgbaImage;

/// How [`resize`] interpolates: `Nearest` copies source pixels (a mask stays two-valued),
/// `Triangle` is bilinear (an area average when shrinking), `CatmullRom` a sharper cubic.
pub use image::imageops::FilterType as Filter;

/// `img` resampled to `w` x `h` (both > 0) with `filter`, by the `image` crate. Colour is
/// filtered premultiplied by alpha, so transparent pixels do not bleed their colour, and a
/// pixel left with next to no alpha comes out transparent black. `img` must be well-formed.
pub fn resize(img: &RgbaImage, w: u32, h: u32, filter: Filter) -> RgbaImage {
    debug_assert!(img.is_well_formed() && w > 0 && h > 0);
    let opaque = img.data.chunks_exact(4).all(|p| p[3] == 255);
    if filter == Filter::Nearest || opaque {
        // Nothing to premultiply: the pixels are filtered as they are, read in place (an input
        // may be 25 megapixels).
        let src = image::ImageBuffer::<image::Rgba<u8>, _>::from_raw(
            img.width,
            img.height,
            img.data.as_slice(),
        )
        .expect("a well-formed image");
        let out = image::imageops::resize(&src, w, h, filter);
        return RgbaImage {
            width: w,
            height: h,
            data: out.into_raw(),
        };
    }
    // Premultiplied in 16 bits: colour keeps its precision where alpha is low.
    let premultiplied: Vec<u16> = img
        .data
        .chunks_exact(4)
        .flat_map(|p| {
            let a = u32::from(p[3]);
            let mul = |c: u8| ((u32::from(c) * a * 65535 + 32512) / 65025) as u16;
            [mul(p[0]), mul(p[1]), mul(p[2]), (a * 257) as u16]
        })
        .collect();
    let src =
        image::ImageBuffer::<image::Rgba<u16>, _>::from_raw(img.width, img.height, premultiplied)
            .expect("a well-formed image");
    let out = image::imageops::resize(&src, w, h, filter);
    let mut data = Vec::with_capacity(w as usize * h as usize * 4);
    for p in out.pixels() {
        let a = u32::from(p.0[3]);
        if a < 129 {
            data.extend_from_slice(&[0, 0, 0, 0]);
            continue;
        }
        let straight = |c: u16| ((u32::from(c) * 255 + a / 2) / a).min(255) as u8;
        data.extend_from_slice(&[
            straight(p.0[0]),
            straight(p.0[1]),
            straight(p.0[2]),
            ((a + 128) / 257) as u8,
        ]);
    }
    RgbaImage {
        width: w,
        height: h,
        data,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::images::testing::solid;

    #[test]
    fn resize_filters_premultiplied_and_nearest_copies_pixels() {
        // Half-transparent red beside fully transparent green: no green bleeds in.
        let mut img = solid(4, 4, [255, 0, 0, 128]);
        for px in img.data.chunks_exact_mut(8) {
            px[4..8].copy_from_slice(&[0, 255, 0, 0]);
        }
        for filter in [Filter::Triangle, Filter::CatmullRom, Filter::Lanczos3] {
            let r = resize(&img, 2, 3, filter);
            assert_eq!((r.width, r.height, r.data.len()), (2, 3, 24));
            for p in r.data.chunks_exact(4) {
                assert!(p[3] == 0 || p[..3] == [255, 0, 0], "{filter:?}: {p:?}");
            }
        }
        // Nearest neighbour keeps a two-valued mask two-valued.
        let mut mask = solid(6, 6, [0, 0, 0, 0]);
        for (i, px) in mask.data.chunks_exact_mut(4).enumerate() {
            if (i % 6 + i / 6) % 2 == 0 {
                px.copy_from_slice(&[255, 255, 255, 255]);
            }
        }
        let r = resize(&mask, 7, 11, Filter::Nearest);
        assert!(r
            .data
            .chunks_exact(4)
            .all(|p| p == [0, 0, 0, 0] || p == [255, 255, 255, 255]));
    }
}
