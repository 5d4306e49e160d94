//! A JPEG as the backend sent it, less the segments that do not draw it.

use image::metadata::Orientation;

use super::spans::Spans;

/// `bytes` with only the segments a decoder needs, copied byte for byte in their order: SOI,
/// the tables (DQT, DHT, DAC, DRI, DNL), the frame header (SOFn), every scan (SOS and its
/// entropy-coded data, restart markers included), EOI; and of the application segments only
/// JFIF's APP0, the ICC profile's APP2 and Adobe's APP14 (its colour transform flag says whether
/// the three components are YCbCr or RGB). Exif and XMP (APP1), IPTC (APP13), comments and every
/// other APPn go; so does whatever follows EOI (a phone's second picture, a trailer).
///
/// Also returns the orientation an Exif segment gave, if any: dropping Exif changes how a
/// viewer turns the picture, so the caller decides what to do with one that is not upright.
/// An error when the markers do not parse or the file ends before EOI.
pub fn strip(bytes: &[u8]) -> Result<(Vec<u8>, Option<Orientation>), String> {
    let (spans, orientation) = kept(bytes)?;
    Ok((spans.gather(bytes), orientation))
}

/// [`strip`] of a file easel owns: the segments dropped by moving the rest down in place, so
/// that a decoded answer is not copied again.
pub fn strip_owned(bytes: Vec<u8>) -> Result<(Vec<u8>, Option<Orientation>), String> {
    let (spans, orientation) = kept(&bytes)?;
    Ok((spans.compact(bytes), orientation))
}

/// Where [`strip`]'s segments lie in `bytes`, and the Exif orientation.
fn kept(bytes: &[u8]) -> Result<(Spans, Option<Orientation>), String> {
    if !bytes.starts_with(&[0xFF, 0xD8]) {
        return Err("not a JPEG (no start-of-image marker)".into());
    }
    let truncated = || "truncated JPEG: the file ends before its end-of-image marker".to_string();
    let mut spans = Spans::default();
    spans.keep(0..2);
    let mut orientation = None;
    let mut i = 2;
    loop {
        if bytes.get(i) != Some(&0xFF) {
            return Err(format!("malformed JPEG: no marker at byte {i}"));
        }
        // A marker may be preceded by any number of 0xFF fill bytes; the last one is kept.
        while bytes.get(i) == Some(&0xFF) {
            i += 1;
        }
        let marker = *bytes.get(i).ok_or_else(truncated)?;
        let at = i - 1;
        i += 1;
        match marker {
            0xD9 => {
                spans.keep(at..i);
                return Ok((spans, orientation));
            }
            // Markers without a length have no place outside a scan.
            0x00 | 0x01 | 0xD0..=0xD8 => {
                return Err(format!(
                    "malformed JPEG: marker {marker:#04X} outside a scan"
                ));
            }
            _ => {}
        }
        let length = match bytes.get(i..i + 2) {
            Some(&[a, b]) => usize::from(u16::from_be_bytes([a, b])),
            _ => return Err(truncated()),
        };
        if length < 2 {
            return Err(format!("malformed JPEG: a segment length of {length}"));
        }
        let segment = bytes.get(i..i + length).ok_or_else(truncated)?;
        let payload = &segment[2..];
        let keep = match marker {
            // SOFn, DHT (C4) and DAC (CC); DQT, DNL, DRI; SOS.
            0xC0..=0xCF | 0xDA..=0xDD => true,
            0xE0 => payload.starts_with(b"JFIF\0"),
            0xE2 => payload.starts_with(b"ICC_PROFILE\0"),
            0xEE => payload.starts_with(b"Adobe"),
            0xE1 => {
                if orientation.is_none() {
                    orientation = payload
                        .strip_prefix(b"Exif\0\0")
                        .and_then(Orientation::from_exif_chunk);
                }
                false
            }
            _ => false,
        };
        if keep {
            spans.keep(at..i + length);
        }
        i += length;
        if marker == 0xDA {
            // The scan's entropy-coded data runs to the next marker that is neither a stuffed
            // zero nor a restart marker. memchr: a byte at a time, this search was the most
            // CPU a kept JPEG took before its commit.
            let start = i;
            loop {
                let ff = memchr::memchr(0xFF, &bytes[i..])
                    .map(|p| i + p)
                    .ok_or_else(truncated)?;
                match bytes.get(ff + 1) {
                    None => return Err(truncated()),
                    Some(0x00 | 0xD0..=0xD7) => i = ff + 2,
                    Some(0xFF) => i = ff + 1,
                    Some(_) => {
                        i = ff;
                        break;
                    }
                }
            }
            spans.keep(start..i);
        }
    }
}

/// The markers of `bytes`' segments before its first scan, in order (tests and checks).
pub fn header_markers(bytes: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut found = Vec::new();
    let mut i = 2;
    while let (Some(0xFF), Some(&marker)) = (bytes.get(i), bytes.get(i + 1)) {
        let Some(&[a, b]) = bytes.get(i + 2..i + 4) else {
            break;
        };
        let length = usize::from(u16::from_be_bytes([a, b]));
        let payload = bytes.get(i + 4..i + 2 + length).unwrap_or_default();
        found.push((marker, payload.to_vec()));
        if marker == 0xDA {
            break;
        }
        i += 2 + length;
    }
    found
}

#[cfg(test)]
mod tests {
    use super::super::damaged::assert_damage_answered;
    use super::*;

    /// A 16 x 8 baseline JPEG made by the `image` crate, and the same with `segments` (marker,
    /// payload) put in after SOI.
    fn jpeg_with(segments: &[(u8, &[u8])]) -> (Vec<u8>, Vec<u8>) {
        let pixels: Vec<u8> = (0..16 * 8 * 3).map(|i| (i * 7 % 251) as u8).collect();
        let mut plain = Vec::new();
        image::codecs::jpeg::JpegEncoder::new_with_quality(&mut plain, 90)
            .encode(&pixels, 16, 8, image::ExtendedColorType::Rgb8)
            .unwrap();
        let mut with = plain[..2].to_vec();
        for (marker, payload) in segments {
            with.extend_from_slice(&[0xFF, *marker]);
            with.extend_from_slice(&(payload.len() as u16 + 2).to_be_bytes());
            with.extend_from_slice(payload);
        }
        with.extend_from_slice(&plain[2..]);
        (with, plain)
    }

    /// Exif with IFD0 holding one entry: the orientation `value` (big-endian TIFF).
    fn exif(value: u16) -> Vec<u8> {
        let mut e = b"Exif\0\0MM\0\x2a\0\0\0\x08\0\x01".to_vec();
        e.extend_from_slice(&[0x01, 0x12, 0, 3, 0, 0, 0, 1]);
        e.extend_from_slice(&value.to_be_bytes());
        e.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
        e
    }

    #[test]
    fn metadata_goes_and_the_picture_stays_byte_identical() {
        let exif = exif(1);
        let (with, plain) = jpeg_with(&[
            (0xE1, exif.as_slice()),
            (
                0xE1,
                b"http://ns.adobe.com/xap/1.0/\0<x:xmpmeta/>".as_slice(),
            ),
            (0xED, b"Photoshop 3.0\08BIM".as_slice()),
            (0xFE, b"a comment".as_slice()),
            (0xE2, b"ICC_PROFILE\0\x01\x01profile".as_slice()),
            (0xE2, b"MPF\0multi-picture".as_slice()),
            (0xEE, b"Adobe\0\x64\0\0\0\0\x01".as_slice()),
        ]);
        let (stripped, orientation) = strip(&with).unwrap();
        assert_eq!(
            strip_owned(with.clone()).unwrap(),
            (stripped.clone(), orientation)
        );
        assert_eq!(orientation, Some(Orientation::NoTransforms));
        let markers: Vec<u8> = header_markers(&stripped).iter().map(|m| m.0).collect();
        assert!(!markers.contains(&0xE1) && !markers.contains(&0xED) && !markers.contains(&0xFE));
        assert_eq!(&markers[..2], &[0xE2, 0xEE], "{markers:X?}");
        // The encoder's own segments (JFIF, tables, frame, scan) follow as they were.
        let mut want = plain[..2].to_vec();
        want.extend_from_slice(b"\xFF\xE2\0\x17ICC_PROFILE\0\x01\x01profile");
        want.extend_from_slice(b"\xFF\xEE\0\x0EAdobe\0\x64\0\0\0\0\x01");
        want.extend_from_slice(&plain[2..]);
        assert_eq!(stripped, want);
        // A clean file comes back as it was; what follows EOI is dropped.
        assert_eq!(strip(&plain).unwrap(), (plain.clone(), None));
        let mut trailing = plain.clone();
        trailing.extend_from_slice(b"\xFF\xD8 a second picture");
        assert_eq!(strip(&trailing).unwrap().0, plain);
    }

    #[test]
    fn the_exif_orientation_is_reported() {
        let (with, _) = jpeg_with(&[(0xE1, exif(6).as_slice())]);
        assert_eq!(strip(&with).unwrap().1, Some(Orientation::Rotate90));
    }

    #[test]
    fn malformed_files_are_errors() {
        let (good, _) = jpeg_with(&[(0xFE, b"comment".as_slice())]);
        assert!(strip(b"").is_err());
        assert!(strip(&good[1..]).is_err());
        for cut in [2, 3, 5, 12, good.len() / 2, good.len() - 2, good.len() - 1] {
            assert!(strip(&good[..cut]).is_err(), "cut at {cut}");
        }
        // A segment length past the end, and one below its own two bytes.
        for length in [0xFFFFu16, 1] {
            let mut bad = good.clone();
            bad[4..6].copy_from_slice(&length.to_be_bytes());
            assert!(strip(&bad).is_err(), "length {length}");
        }
        // Not a marker where one must be.
        let mut bad = good.clone();
        bad[2] = 0x12;
        assert!(strip(&bad).is_err());
    }

    #[test]
    fn any_cut_or_flipped_byte_is_an_answer_not_a_panic() {
        let exif = exif(3);
        let (good, _) = jpeg_with(&[(0xE1, exif.as_slice()), (0xFE, b"c".as_slice())]);
        assert_damage_answered(&good, strip, strip_owned, |bad| {
            let _ = header_markers(bad);
        });
    }
}
