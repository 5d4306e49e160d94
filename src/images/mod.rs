//! Images as pixels and as files, below the generators and above nothing of easel's: an owned
//! straight-alpha RGBA8 image type and aspect-ratio sizing (here), PNG encoding and decoding
//! ([`png_codec`]), resampling ([`resize`]), the 2x2 grid in all its forms ([`grid`]), the files
//! easel keeps (a backend's PNG or JPEG less its metadata, [`stored`]), previews ([`preview`]),
//! and images from callers: fetched, sniffed and decoded under limits ([`inputs`]). Nothing in
//! here knows anything about prompts or pictures.

pub mod convert;
pub mod grid;
pub mod inputs;
pub mod parallel;
pub mod png_codec;
pub mod preview;
pub mod resize;
pub mod stored;

pub use grid::compose_grid;
pub use png_codec::{decode_png, encode_png, MAX_DECODE_SIDE};
pub use preview::PreviewImage;
pub use resize::{resize, Filter};

/// Straight (non-premultiplied) RGBA8 image, row-major, width*height*4 bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RgbaImage {
    pub width: u32,
    pub height: u32,
    pub data: Vec<u8>,
}

impl RgbaImage {
    /// A `width` x `height` image filled with opaque black.
    pub fn new(width: u32, height: u32) -> Self {
        let len = width as usize * height as usize;
        let mut data = vec![0u8; len * 4];
        for px in data.chunks_exact_mut(4) {
            px[3] = 255;
        }
        RgbaImage {
            width,
            height,
            data,
        }
    }

    /// True when `data` holds exactly `width * height * 4` bytes.
    fn is_well_formed(&self) -> bool {
        self.data.len() == self.width as usize * self.height as usize * 4
    }
}

/// Pixel size for an aspect ratio W:H whose long side is `long_side` px.
/// Both results are even and >= 2: the long side is `long_side` rounded to the
/// nearest even number, the short side is the exact proportion rounded to the
/// nearest even number. A zero ratio term is treated as 1.
///
/// e.g. (1,1,1024)->(1024,1024); (16,9,1024)->(1024,576); (2,3,1024)->(682,1024)
pub fn dimensions(aspect_w: u32, aspect_h: u32, long_side: u32) -> (u32, u32) {
    let aw = u128::from(aspect_w.max(1));
    let ah = u128::from(aspect_h.max(1));
    // Nearest even number, at least 2 (u32::MAX rounds down, not up past the type).
    let long = (u128::from(long_side).div_ceil(2) * 2).clamp(2, u128::from(u32::MAX - 1));
    let (big, small) = if aw >= ah { (aw, ah) } else { (ah, aw) };
    // 2 * round(long * small / (2 * big)), in integers.
    let short = ((long * small + big) / (2 * big) * 2).clamp(2, long);
    let (long, short) = (long as u32, short as u32);
    if aw >= ah {
        (long, short)
    } else {
        (short, long)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_is_opaque_black() {
        let img = RgbaImage::new(3, 2);
        assert_eq!(img.data.len(), 24);
        assert!(img.data.chunks(4).all(|p| p == [0, 0, 0, 255]));
    }

    #[test]
    fn dimensions_table() {
        let cases = [
            ((1, 1, 1024), (1024, 1024)),
            ((16, 9, 1024), (1024, 576)),
            ((9, 16, 1024), (576, 1024)),
            ((2, 3, 1024), (682, 1024)),
            ((3, 2, 1024), (1024, 682)),
            ((4, 3, 1024), (1024, 768)),
            ((21, 9, 1024), (1024, 438)),
            ((1, 1, 1023), (1024, 1024)),
            ((1, 1, 1), (2, 2)),
            ((1, 1, 0), (2, 2)),
            ((100, 1, 64), (64, 2)),
            ((0, 0, 512), (512, 512)),
            ((1, 1, u32::MAX), (u32::MAX - 1, u32::MAX - 1)),
        ];
        for ((aw, ah, long), want) in cases {
            let got = dimensions(aw, ah, long);
            assert_eq!(got, want, "dimensions({aw}, {ah}, {long})");
            assert!(got.0 % 2 == 0 && got.1 % 2 == 0 && got.0 >= 2 && got.1 >= 2);
        }
    }
}

/// Pictures for the tests of the parts of this module.
#[cfg(test)]
pub(crate) mod testing {
    use super::RgbaImage;

    pub fn pattern(w: u32, h: u32, alpha: bool) -> RgbaImage {
        let mut img = RgbaImage::new(w, h);
        for y in 0..h {
            for x in 0..w {
                let o = ((y * w + x) * 4) as usize;
                img.data[o] = (x * 7 + y) as u8;
                img.data[o + 1] = (y * 13) as u8;
                img.data[o + 2] = (x ^ y) as u8;
                img.data[o + 3] = if alpha { (x * 31 + y * 3) as u8 } else { 255 };
            }
        }
        img
    }

    pub fn pixel(img: &RgbaImage, x: u32, y: u32) -> [u8; 4] {
        let o = ((y * img.width + x) * 4) as usize;
        [
            img.data[o],
            img.data[o + 1],
            img.data[o + 2],
            img.data[o + 3],
        ]
    }

    pub fn solid(w: u32, h: u32, rgba: [u8; 4]) -> RgbaImage {
        RgbaImage {
            width: w,
            height: h,
            data: rgba.repeat(w as usize * h as usize),
        }
    }
}
