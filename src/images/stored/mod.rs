//! What easel stores of an image: the encoded bytes and their format. A backend's PNG or JPEG is
//! kept as it was sent, less its metadata (a ComfyUI workflow, a WebUI's parameters, Exif with a
//! place, XMP), so that no pixel is decoded and encoded again and no quality is lost; anything
//! else is decoded and stored as PNG.

#[cfg(test)]
mod damaged;
mod jpeg_markers;
mod png_chunks;
mod spans;

use std::borrow::Cow;

use image::metadata::Orientation;

use super::{encode_png, RgbaImage};

pub use jpeg_markers::header_markers as jpeg_header_markers;
pub use png_chunks::chunk_types as png_chunk_types;

/// How a stored image is encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Png,
    Jpeg,
}

impl Format {
    /// The extension of its file name (`0.png`, `grid.jpg`).
    pub fn extension(self) -> &'static str {
        match self {
            Format::Png => "png",
            Format::Jpeg => "jpg",
        }
    }
}

/// An encoded image, as it is written to the blob store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredImage {
    pub bytes: Vec<u8>,
    pub format: Format,
}

/// The quality of a JPEG easel encodes (a grid of JPEG answers): high enough that the grid's
/// halving shows no blocks, the file a fraction of a PNG's.
pub const JPEG_QUALITY: u8 = 90;

impl StoredImage {
    /// `image` as PNG ([`encode_png`]'s fast settings); empty bytes only for a degenerate image.
    pub fn png(image: &RgbaImage) -> StoredImage {
        StoredImage {
            bytes: encode_png(image),
            format: Format::Png,
        }
    }

    /// `image` as a baseline JPEG at [`JPEG_QUALITY`], its alpha dropped (JPEG has none); an
    /// error for a degenerate image or one over JPEG's 65535 px sides.
    pub fn jpeg(image: &RgbaImage) -> Result<StoredImage, String> {
        let (w, h) = (
            u16::try_from(image.width).map_err(|_| "too wide for JPEG")?,
            u16::try_from(image.height).map_err(|_| "too tall for JPEG")?,
        );
        if w == 0 || h == 0 || image.data.len() != usize::from(w) * usize::from(h) * 4 {
            return Err("a degenerate image".into());
        }
        let mut bytes = Vec::with_capacity(image.data.len() / 8);
        let mut encoder = jpeg_encoder::Encoder::new(&mut bytes, JPEG_QUALITY);
        // Colour at half resolution both ways (4:2:0), as cameras and most encoders write it;
        // the crate would keep it whole at this quality, for a larger, slower file.
        encoder.set_sampling_factor(jpeg_encoder::SamplingFactor::F_2_2);
        encoder
            .encode(&image.data, w, h, jpeg_encoder::ColorType::Rgba)
            .map_err(|e| format!("JPEG encoding failed: {e}"))?;
        Ok(StoredImage {
            bytes,
            format: Format::Jpeg,
        })
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// What to do with an image file a backend sent.
#[derive(Debug, PartialEq, Eq)]
pub enum Kept<'a> {
    /// The file less its metadata: store it as it is (its pixels are decoded for the grid).
    File(StoredImage),
    /// Decode it, turn it as `orientation` says, and store it as PNG: a format easel does not
    /// keep (WebP, GIF), or a JPEG whose Exif orientation turns it. Exif goes with the rest of
    /// the metadata, so such a JPEG kept as it is would show on its side; turned pixels show as
    /// the backend meant, in the stored file and in the grid alike. `bytes`: the file to decode
    /// (a JPEG less its metadata, anything else as it came).
    Reencode {
        bytes: Cow<'a, [u8]>,
        orientation: Orientation,
    },
}

/// What to store of `bytes`, an image file from a backend. An error when a PNG's chunks or a
/// JPEG's markers do not parse (cut short, a bad CRC, a length past the end). Cheap next to
/// decoding, but run it where decoding runs: it reads the whole file, and copies it unless it
/// is owned (then what is dropped is cut out in place).
pub fn keep(bytes: Cow<'_, [u8]>) -> Result<Kept<'_>, String> {
    if bytes.starts_with(&png_chunks::SIGNATURE) {
        let bytes = match bytes {
            Cow::Borrowed(bytes) => png_chunks::strip(bytes)?,
            Cow::Owned(bytes) => png_chunks::strip_owned(bytes)?,
        };
        return Ok(Kept::File(StoredImage {
            bytes,
            format: Format::Png,
        }));
    }
    if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        let stripped = match bytes {
            Cow::Borrowed(bytes) => jpeg_markers::strip(bytes)?,
            Cow::Owned(bytes) => jpeg_markers::strip_owned(bytes)?,
        };
        return match stripped {
            (bytes, Some(orientation)) if orientation != Orientation::NoTransforms => {
                Ok(Kept::Reencode {
                    bytes: Cow::Owned(bytes),
                    orientation,
                })
            }
            (bytes, _) => Ok(Kept::File(StoredImage {
                bytes,
                format: Format::Jpeg,
            })),
        };
    }
    Ok(Kept::Reencode {
        bytes,
        orientation: Orientation::NoTransforms,
    })
}

/// `image` turned as `orientation` says (the image crate's transforms, on easel's pixels).
pub fn orient(image: RgbaImage, orientation: Orientation) -> RgbaImage {
    if orientation == Orientation::NoTransforms {
        return image;
    }
    let RgbaImage {
        width,
        height,
        data,
    } = image;
    let Some(buffer) = image::RgbaImage::from_raw(width, height, data) else {
        // Not width x height x 4 bytes: nothing to turn.
        return RgbaImage::new(0, 0);
    };
    let mut dynamic = image::DynamicImage::ImageRgba8(buffer);
    dynamic.apply_orientation(orientation);
    let turned = dynamic.into_rgba8();
    RgbaImage {
        width: turned.width(),
        height: turned.height(),
        data: turned.into_raw(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_are_told_apart() {
        let png = encode_png(&RgbaImage::new(4, 2));
        assert!(matches!(
            keep(Cow::Borrowed(&png)),
            Ok(Kept::File(StoredImage {
                format: Format::Png,
                ..
            }))
        ));
        let jpeg = StoredImage::jpeg(&RgbaImage::new(4, 2)).unwrap();
        assert!(jpeg.bytes.starts_with(&[0xFF, 0xD8]));
        assert_eq!(
            keep(Cow::Borrowed(&jpeg.bytes)),
            Ok(Kept::File(jpeg.clone()))
        );
        assert_eq!(keep(Cow::Owned(jpeg.bytes.clone())), Ok(Kept::File(jpeg)));
        let webp = b"RIFF\0\0\0\0WEBPVP8 ";
        let not_kept = |bytes: &'static [u8]| Kept::Reencode {
            bytes: Cow::Borrowed(bytes),
            orientation: Orientation::NoTransforms,
        };
        assert_eq!(keep(Cow::Borrowed(webp)).unwrap(), not_kept(webp));
        assert_eq!(keep(Cow::Borrowed(b"")).unwrap(), not_kept(b""));
        assert!(keep(Cow::Borrowed(&png[..png.len() - 1])).is_err());
        assert!(keep(Cow::Owned(png[..png.len() - 1].to_vec())).is_err());
    }

    #[test]
    fn orient_turns_the_pixels() {
        let mut image = RgbaImage::new(2, 1);
        image.data[..4].copy_from_slice(&[255, 0, 0, 255]);
        let turned = orient(image.clone(), Orientation::Rotate90);
        assert_eq!((turned.width, turned.height), (1, 2));
        // Turned clockwise: the left pixel ends on top.
        assert_eq!(&turned.data[..4], &[255, 0, 0, 255]);
        let turned = orient(image.clone(), Orientation::Rotate270);
        assert_eq!(&turned.data[4..], &[255, 0, 0, 255]);
        assert_eq!(orient(image.clone(), Orientation::NoTransforms), image);
    }
}
