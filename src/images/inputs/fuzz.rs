//! Property tests over the decoding of callers' images (the format sniffed, the header read,
//! the pixels decoded): small valid images of each format, cut, overwritten and grown at random.
//! Whatever the bytes, the answer is an image within the limits or an error; never a panic, and
//! never more memory than the header's reservation says. `EASEL_FUZZ_CASES` sets the number of
//! inputs (bench/fuzz runs a million).

use proptest::prelude::*;

use super::samples::{gif_bytes, jpeg_bytes, png_bytes, webp_bytes};
use super::{decode_probed, probe, InputLimits};

/// One change to a valid file.
#[derive(Debug, Clone)]
enum Mutation {
    /// Overwrite the byte at this share of the file.
    Set(u16, u8),
    /// Cut the file at this share of its length.
    Cut(u16),
    /// Insert bytes at this share.
    Insert(u16, Vec<u8>),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (any::<u16>(), any::<u8>()).prop_map(|(at, b)| Mutation::Set(at, b)),
        1 => any::<u16>().prop_map(Mutation::Cut),
        1 => (any::<u16>(), proptest::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(at, bytes)| Mutation::Insert(at, bytes)),
    ]
}

fn at(share: u16, len: usize) -> usize {
    (share as usize * len) / (u16::MAX as usize + 1)
}

fn mutated(mut bytes: Vec<u8>, changes: &[Mutation]) -> Vec<u8> {
    for change in changes {
        match change {
            Mutation::Set(share, b) if !bytes.is_empty() => {
                let i = at(*share, bytes.len());
                bytes[i] = *b;
            }
            Mutation::Cut(share) => bytes.truncate(at(*share, bytes.len())),
            Mutation::Insert(share, more) => {
                let i = at(*share, bytes.len());
                bytes.splice(i..i, more.iter().copied());
            }
            Mutation::Set(..) => {}
        }
    }
    bytes
}

fn originals() -> Vec<Vec<u8>> {
    vec![
        png_bytes(5, 3),
        jpeg_bytes(9, 7),
        webp_bytes(6, 4),
        gif_bytes(4, 4),
    ]
}

proptest! {
    #![proptest_config(crate::domain::fuzz_config())]

    #[test]
    fn any_changed_image_decodes_within_its_limits_or_is_refused(
        which in 0usize..4,
        changes in proptest::collection::vec(mutation(), 0..6),
    ) {
        let limits = InputLimits { max_pixels: 4096, ..InputLimits::default() };
        let bytes = mutated(originals().swap_remove(which), &changes);
        if let Ok(header) = probe(&bytes, &limits) {
            prop_assert!(u64::from(header.width) * u64::from(header.height) <= limits.max_pixels);
            if let Ok(image) = decode_probed(&bytes, &header, &limits) {
                prop_assert_eq!((image.width, image.height), (header.width, header.height));
                prop_assert!(image.data.len() as u64 <= header.peak_bytes());
            }
        }
    }

    #[test]
    fn any_bytes_are_sniffed_without_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let _ = probe(&bytes, &InputLimits::default());
    }
}
