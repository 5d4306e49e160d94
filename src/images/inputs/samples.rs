//! Image bytes for the tests of input fetching and decoding: every format, and hostile ones.

use std::io::Cursor;
use std::time::Duration;

use image::{DynamicImage, ImageFormat};

use super::InputLimits;
use crate::images::{self, RgbaImage};

/// A picture whose every pixel differs, so a wrong decode shows.
pub fn pattern(width: u32, height: u32) -> image::RgbaImage {
    image::RgbaImage::from_fn(width, height, |x, y| {
        image::Rgba([(x * 7) as u8, (y * 5) as u8, (x + y) as u8, 255])
    })
}

pub fn png_bytes(width: u32, height: u32) -> Vec<u8> {
    let img = pattern(width, height);
    images::encode_png(&RgbaImage {
        width,
        height,
        data: img.into_raw(),
    })
}

pub fn encode(img: DynamicImage, format: ImageFormat) -> Vec<u8> {
    let mut out = Cursor::new(Vec::new());
    img.write_to(&mut out, format).unwrap();
    out.into_inner()
}

pub fn jpeg_bytes(width: u32, height: u32) -> Vec<u8> {
    encode(
        DynamicImage::ImageRgba8(pattern(width, height))
            .to_rgb8()
            .into(),
        ImageFormat::Jpeg,
    )
}

/// The image crate writes WebP losslessly, so pixels can be compared exactly.
pub fn webp_bytes(width: u32, height: u32) -> Vec<u8> {
    encode(
        DynamicImage::ImageRgba8(pattern(width, height)),
        ImageFormat::WebP,
    )
}

/// Two frames, red then blue.
pub fn gif_bytes(width: u32, height: u32) -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut encoder = image::codecs::gif::GifEncoder::new(&mut out);
        let frames = [[255, 0, 0, 255], [0, 0, 255, 255]].map(|color| {
            image::Frame::new(image::RgbaImage::from_pixel(
                width,
                height,
                image::Rgba(color),
            ))
        });
        encoder.encode_frames(frames).unwrap();
    }
    out
}

pub fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in bytes {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0xedb8_8320 & (crc & 1).wrapping_neg());
        }
    }
    !crc
}

pub fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let start = out.len();
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let crc = crc32(&out[start..]);
    out.extend_from_slice(&crc.to_be_bytes());
}

/// A valid PNG header claiming `width` x `height` RGBA pixels, followed by an IDAT of one
/// zero byte: a few dozen bytes that would need width * height * 4 bytes to decode.
pub fn bomb_png(width: u32, height: u32) -> Vec<u8> {
    // zlib header, one final stored block holding a single 0 byte, Adler-32 of it.
    let idat = [
        0x78, 0x01, 0x01, 0x01, 0x00, 0xfe, 0xff, 0x00, 0x00, 0x01, 0x00, 0x01,
    ];
    rgba_png(width, height, 8, false, &idat)
}

/// A PNG of `width` x `height` RGBA pixels of `depth` bits, `interlaced` (Adam7) or not, whose
/// one IDAT chunk is `zlib`, written as it is.
fn rgba_png(width: u32, height: u32, depth: u8, interlaced: bool, zlib: &[u8]) -> Vec<u8> {
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&width.to_be_bytes());
    ihdr.extend_from_slice(&height.to_be_bytes());
    // Colour type 6 (RGBA), deflate, adaptive filtering, the interlace method.
    ihdr.extend_from_slice(&[depth, 6, 0, 0, u8::from(interlaced)]);
    chunk(&mut out, b"IHDR", &ihdr);
    chunk(&mut out, b"IDAT", zlib);
    chunk(&mut out, b"IEND", &[]);
    out
}

pub fn noise(len: usize, mut seed: u64) -> Vec<u8> {
    (0..len)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed as u8
        })
        .collect()
}

pub fn limits() -> InputLimits {
    InputLimits {
        timeout: Duration::from_secs(10),
        ..InputLimits::default()
    }
}

/// A decoded image of the size expected, with a whole buffer.
pub fn assert_image(img: &RgbaImage, width: u32, height: u32) {
    assert_eq!((img.width, img.height), (width, height));
    assert_eq!(img.data.len(), width as usize * height as usize * 4);
}

/// A 16-bit RGBA PNG of [`pattern`]: each sample's high byte is the pattern's, its low byte
/// noise, so that a decoder that keeps the high byte gives the pattern exactly. Written with the
/// `png` crate (compressed), or, `interlaced`, by hand (Adam7, stored deflate blocks).
pub fn png16_bytes(width: u32, height: u32, interlaced: bool) -> Vec<u8> {
    let img = pattern(width, height);
    let sample = |x: u32, y: u32, c: usize| -> [u8; 2] {
        [img.get_pixel(x, y)[c], (x * 31 + y * 17 + c as u32) as u8]
    };
    let row_of = |y: u32, xs: &mut dyn Iterator<Item = u32>| -> Vec<u8> {
        let mut row = vec![0u8]; // filter type None
        for x in xs {
            (0..4).for_each(|c| row.extend_from_slice(&sample(x, y, c)));
        }
        row
    };
    if !interlaced {
        let mut out = Vec::new();
        let mut encoder = png::Encoder::new(&mut out, width, height);
        encoder.set_color(png::ColorType::Rgba);
        encoder.set_depth(png::BitDepth::Sixteen);
        let mut writer = encoder.write_header().unwrap();
        let data: Vec<u8> = (0..height)
            .flat_map(|y| row_of(y, &mut (0..width))[1..].to_vec())
            .collect();
        writer.write_image_data(&data).unwrap();
        writer.finish().unwrap();
        return out;
    }
    const PASSES: [(u32, u32, u32, u32); 7] = [
        (0, 0, 8, 8),
        (4, 0, 8, 8),
        (0, 4, 4, 8),
        (2, 0, 4, 4),
        (0, 2, 2, 4),
        (1, 0, 2, 2),
        (0, 1, 1, 2),
    ];
    let mut raw = Vec::new();
    for (x0, y0, dx, dy) in PASSES {
        if x0 >= width {
            continue;
        }
        for y in (y0..height).step_by(dy as usize) {
            raw.extend(row_of(y, &mut (x0..width).step_by(dx as usize)));
        }
    }
    // zlib: a header, stored blocks of at most 65535 bytes, the Adler-32 of the data.
    let mut zlib = vec![0x78, 0x01];
    let blocks: Vec<&[u8]> = raw.chunks(65_535).collect();
    for (i, block) in blocks.iter().enumerate() {
        zlib.push(u8::from(i + 1 == blocks.len()));
        let len = block.len() as u16;
        zlib.extend_from_slice(&len.to_le_bytes());
        zlib.extend_from_slice(&(!len).to_le_bytes());
        zlib.extend_from_slice(block);
    }
    let (mut a, mut b) = (1u32, 0u32);
    for &byte in &raw {
        a = (a + u32::from(byte)) % 65_521;
        b = (b + a) % 65_521;
    }
    zlib.extend_from_slice(&((b << 16) | a).to_be_bytes());
    rgba_png(width, height, 16, true, &zlib)
}
