//! A PNG as the backend sent it, less the chunks that do not draw it.

use super::spans::Spans;

/// The eight bytes every PNG starts with.
pub const SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a];

/// The chunks kept: those that make the pixels (header, palette, data, end, transparency) and
/// those that say how to show them (gamma, chromaticities, sRGB, ICC profile, significant bits,
/// coding-independent code points, physical pixel size). Everything else goes: text of any kind
/// (a ComfyUI workflow and prompt, a WebUI's `parameters`), Exif, times, background colours,
/// histograms, APNG's frames, private chunks.
const KEPT: [&[u8; 4]; 12] = [
    b"IHDR", b"PLTE", b"IDAT", b"IEND", b"tRNS", b"gAMA", b"cHRM", b"sRGB", b"iCCP", b"sBIT",
    b"cICP", b"pHYs",
];

/// PNG's limit on a chunk's length.
const MAX_CHUNK: u32 = (1 << 31) - 1;

/// `bytes` without the chunks not in [`KEPT`], the others copied byte for byte in their order.
/// An error when the chunks do not parse: a length
/// past the end or over PNG's limit, a bad CRC, a first chunk other than IHDR, no IEND. What
/// follows IEND is not part of the image and is dropped.
pub fn strip(bytes: &[u8]) -> Result<Vec<u8>, String> {
    Ok(kept(bytes)?.gather(bytes))
}

/// [`strip`] of a file easel owns: the chunks dropped by moving the rest down in place, so that
/// a decoded answer is not copied again.
pub fn strip_owned(bytes: Vec<u8>) -> Result<Vec<u8>, String> {
    Ok(kept(&bytes)?.compact(bytes))
}

/// Where [`strip`]'s chunks lie in `bytes`.
fn kept(bytes: &[u8]) -> Result<Spans, String> {
    let mut rest = bytes
        .strip_prefix(&SIGNATURE)
        .ok_or("not a PNG (no signature)")?;
    let mut spans = Spans::default();
    spans.keep(0..SIGNATURE.len());
    let mut at = SIGNATURE.len();
    let mut first = true;
    loop {
        if rest.len() < 12 {
            return Err("truncated PNG: a chunk is cut short (no IEND)".into());
        }
        let length = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]);
        if length > MAX_CHUNK {
            return Err(format!("malformed PNG: a chunk length of {length}"));
        }
        let end = 12 + length as usize;
        let chunk = rest
            .get(..end)
            .ok_or("truncated PNG: a chunk runs past the end of the file")?;
        let kind: &[u8; 4] = chunk[4..8].try_into().expect("four bytes");
        if !kind.iter().all(u8::is_ascii_alphabetic) {
            return Err("malformed PNG: a chunk type that is not four letters".into());
        }
        let stored_crc = u32::from_be_bytes(chunk[end - 4..].try_into().expect("four bytes"));
        if crc32fast::hash(&chunk[4..end - 4]) != stored_crc {
            return Err(format!(
                "corrupt PNG: the CRC of a {} chunk is wrong",
                String::from_utf8_lossy(kind)
            ));
        }
        if first && kind != b"IHDR" {
            return Err("malformed PNG: the first chunk is not IHDR".into());
        }
        first = false;
        if KEPT.contains(&kind) {
            spans.keep(at..at + end);
        }
        rest = &rest[end..];
        at += end;
        if kind == b"IEND" {
            break;
        }
    }
    Ok(spans)
}

/// The types of `bytes`' chunks in order, for tests and checks; `None` when they do not parse.
pub fn chunk_types(bytes: &[u8]) -> Option<Vec<[u8; 4]>> {
    let mut rest = bytes.strip_prefix(&SIGNATURE)?;
    let mut types = Vec::new();
    while rest.len() >= 12 {
        let length = u32::from_be_bytes(rest[..4].try_into().ok()?) as usize;
        types.push(rest[4..8].try_into().ok()?);
        rest = rest.get(12 + length..)?;
    }
    rest.is_empty().then_some(types)
}

#[cfg(test)]
mod tests {
    use super::super::damaged::assert_damage_answered;
    use super::*;

    /// A chunk as PNG writes it: length, type, data, CRC of type and data.
    fn chunk(kind: &[u8; 4], data: &[u8]) -> Vec<u8> {
        let mut out = (data.len() as u32).to_be_bytes().to_vec();
        out.extend_from_slice(kind);
        out.extend_from_slice(data);
        let crc = crc32fast::hash(&out[4..]);
        out.extend_from_slice(&crc.to_be_bytes());
        out
    }

    /// A real 3 x 2 PNG (from the `png` crate) with `extra` chunks put in after IHDR and before
    /// IEND.
    fn png_with(after_header: &[Vec<u8>], before_end: &[Vec<u8>]) -> (Vec<u8>, Vec<u8>) {
        let mut plain = Vec::new();
        {
            let mut enc = png::Encoder::new(&mut plain, 3, 2);
            enc.set_color(png::ColorType::Rgb);
            enc.set_depth(png::BitDepth::Eight);
            let mut w = enc.write_header().unwrap();
            w.write_image_data(&[7u8; 18]).unwrap();
        }
        // IHDR is 8 + 25 bytes in; IEND the last 12.
        let (head, tail) = plain.split_at(33);
        let (body, end) = tail.split_at(tail.len() - 12);
        let mut with = head.to_vec();
        after_header.iter().for_each(|c| with.extend_from_slice(c));
        with.extend_from_slice(body);
        before_end.iter().for_each(|c| with.extend_from_slice(c));
        with.extend_from_slice(end);
        (with, plain)
    }

    #[test]
    fn text_and_private_chunks_go_and_the_rest_is_byte_identical() {
        let workflow = br#"prompt{"3":{"class_type":"KSampler"}}"#;
        let (with, plain) = png_with(
            &[
                chunk(b"tEXt", workflow),
                chunk(b"gAMA", &45455u32.to_be_bytes()),
            ],
            &[
                chunk(b"iTXt", b"workflow\0\0\0\0\0{}"),
                chunk(b"zTXt", b"parameters\0\0x"),
                chunk(b"eXIf", b"MM\0*"),
                chunk(b"tIME", &[7, 234, 1, 1, 0, 0, 0]),
                chunk(b"prVt", b"anything"),
            ],
        );
        let stripped = strip(&with).unwrap();
        assert_eq!(strip_owned(with.clone()).unwrap(), stripped);
        let types = chunk_types(&stripped).unwrap();
        assert_eq!(&types[..2], &[*b"IHDR", *b"gAMA"]);
        assert_eq!(types.last(), Some(b"IEND"));
        assert!(types.iter().all(|t| KEPT.contains(&t)), "{types:?}");
        // The plain file with the gAMA chunk where it was.
        let mut want = plain[..33].to_vec();
        want.extend_from_slice(&chunk(b"gAMA", &45455u32.to_be_bytes()));
        want.extend_from_slice(&plain[33..]);
        assert_eq!(stripped, want);
    }

    #[test]
    fn a_clean_file_comes_back_as_it_was_and_trailing_bytes_go() {
        let (plain, _) = png_with(&[], &[]);
        assert_eq!(strip(&plain).unwrap(), plain);
        let mut trailing = plain.clone();
        trailing.extend_from_slice(b"appended after IEND");
        assert_eq!(strip(&trailing).unwrap(), plain);
    }

    #[test]
    fn malformed_files_are_errors() {
        let (good, _) = png_with(&[chunk(b"tEXt", b"a\0b")], &[]);
        assert!(strip(b"").is_err());
        assert!(strip(&good[1..]).is_err(), "no signature");
        // Cut anywhere before IEND's end.
        for cut in [8, 20, 33, 40, good.len() - 1] {
            assert!(strip(&good[..cut]).is_err(), "cut at {cut}");
        }
        // A length past the end, and one over PNG's limit.
        for length in [1000u32, u32::MAX] {
            let mut bad = good.clone();
            bad[33..37].copy_from_slice(&length.to_be_bytes());
            assert!(strip(&bad).is_err(), "length {length}");
        }
        // A flipped bit in a dropped chunk's data still fails its CRC.
        let mut bad = good.clone();
        bad[33 + 8] ^= 1;
        let err = strip(&bad).unwrap_err();
        assert!(err.contains("CRC"), "{err}");
        // A file whose first chunk is not IHDR.
        let mut bad = SIGNATURE.to_vec();
        bad.extend_from_slice(&chunk(b"tEXt", b"a\0b"));
        bad.extend_from_slice(&good[8..]);
        assert!(strip(&bad).is_err());
    }

    #[test]
    fn any_cut_or_flipped_byte_is_an_answer_not_a_panic() {
        let (good, _) = png_with(&[chunk(b"tEXt", b"a\0b")], &[chunk(b"zTXt", b"c\0\0d")]);
        // Most flips fail a CRC or a length; none may panic.
        assert_damage_answered(&good, strip, strip_owned, |_| {});
    }
}
