//! Where an image file ends, by its own structure: an upload must end there. Bytes after the
//! end are how polyglots are made (a ZIP or a script appended to a valid image, which other
//! programs read from its other end), and a file that stops before it is truncated; easel keeps
//! and serves an upload's bytes as they came, so it refuses both.

use image::ImageFormat;

use super::InputError;

/// `Ok` when `bytes`, a file of `format` (sniffed), ends exactly where its structure does.
pub fn check_whole(bytes: &[u8], format: ImageFormat) -> Result<(), InputError> {
    let end = match format {
        ImageFormat::Png => png_end(bytes),
        ImageFormat::Jpeg => jpeg_end(bytes),
        ImageFormat::Gif => gif_end(bytes),
        ImageFormat::WebP => webp_end(bytes),
        _ => return Err(InputError::UnsupportedFormat),
    };
    match end {
        None => Err(InputError::Decode("the data is truncated".into())),
        Some(end) if end < bytes.len() => Err(InputError::Decode(format!(
            "{} bytes follow the end of the image (a file hidden in an image is refused)",
            bytes.len() - end
        ))),
        Some(_) => Ok(()),
    }
}

fn be32(bytes: &[u8], at: usize) -> Option<usize> {
    let b = bytes.get(at..at + 4)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
}

/// After the `IEND` chunk: chunks are length, type, data and CRC, from byte 8.
fn png_end(bytes: &[u8]) -> Option<usize> {
    let mut at = 8;
    loop {
        let len = be32(bytes, at)?;
        let kind = bytes.get(at + 4..at + 8)?;
        let next = at.checked_add(12)?.checked_add(len)?;
        if next > bytes.len() {
            return None;
        }
        if kind == b"IEND" {
            return Some(next);
        }
        at = next;
    }
}

/// After the last end-of-image marker, when the last scan comes before it (the decoder's
/// `jpeg_is_complete` rule); scan data never holds 0xFF 0xD9, so the last one is the end.
fn jpeg_end(bytes: &[u8]) -> Option<usize> {
    let last = |marker: u8| bytes.windows(2).rposition(|w| w == [0xff, marker]);
    match (last(0xda), last(0xd9)) {
        (Some(scan), Some(end)) if end > scan => Some(end + 2),
        _ => None,
    }
}

/// After the trailer (0x3B): the header, the global colour table, then blocks (images and
/// extensions, each ending with an empty sub-block).
fn gif_end(bytes: &[u8]) -> Option<usize> {
    let table = |flags: u8| {
        if flags & 0x80 != 0 {
            3usize << ((flags & 7) + 1)
        } else {
            0
        }
    };
    let mut at = 13 + table(*bytes.get(10)?);
    let sub_blocks = |mut at: usize| -> Option<usize> {
        loop {
            let len = *bytes.get(at)? as usize;
            at += 1 + len;
            if len == 0 {
                return Some(at);
            }
        }
    };
    loop {
        match *bytes.get(at)? {
            0x3b => return Some(at + 1),
            0x21 => at = sub_blocks(at + 2)?,
            0x2c => {
                let flags = *bytes.get(at + 9)?;
                // The descriptor, the local colour table, the LZW code size, then the data.
                at = sub_blocks(at + 10 + table(flags) + 1)?;
            }
            _ => return None,
        }
    }
}

/// The RIFF container's own length: 8 bytes of header and the size it declares.
fn webp_end(bytes: &[u8]) -> Option<usize> {
    let b = bytes.get(4..8)?;
    let size = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
    let end = size.checked_add(8)?;
    (end <= bytes.len()).then_some(end)
}

#[cfg(test)]
mod tests {
    use super::super::samples::*;
    use super::*;

    #[test]
    fn whole_files_pass_and_cut_or_extended_ones_do_not() {
        for (format, bytes) in [
            (ImageFormat::Png, png_bytes(12, 10)),
            (ImageFormat::Jpeg, jpeg_bytes(12, 10)),
            (ImageFormat::Gif, gif_bytes(12, 10)),
            (ImageFormat::WebP, webp_bytes(12, 10)),
        ] {
            check_whole(&bytes, format).unwrap_or_else(|e| panic!("{format:?}: {e}"));
            for len in [bytes.len() - 1, bytes.len() / 2, 20] {
                let err = check_whole(&bytes[..len], format).unwrap_err();
                assert_eq!(
                    err.to_string(),
                    "could not be decoded: the data is truncated"
                );
            }
            let mut polyglot = bytes.clone();
            polyglot.extend_from_slice(b"PK\x03\x04 a zip file follows");
            let err = check_whole(&polyglot, format).unwrap_err();
            assert!(
                err.to_string().contains("23 bytes follow the end"),
                "{format:?}: {err}"
            );
        }
    }
}
