//! What the strippers' tests feed them: a good file cut short at every byte, and with a bit of
//! every byte flipped, so that each shows it answers damaged input and never panics.

use std::fmt::Debug;

/// Holds a stripper to its promise on damaged copies of `good`: every cut is refused, and every
/// copy with a byte's lowest or highest bit flipped gets the same answer stripped in place
/// (`strip`) or into a copy (`strip_owned`). `also` reads each flipped copy too.
pub(super) fn assert_damage_answered<T: PartialEq + Debug>(
    good: &[u8],
    strip: fn(&[u8]) -> Result<T, String>,
    strip_owned: fn(Vec<u8>) -> Result<T, String>,
    also: impl Fn(&[u8]),
) {
    for cut in 0..good.len() {
        assert!(strip(&good[..cut]).is_err(), "cut at {cut}");
    }
    for at in 0..good.len() {
        for bit in [0x01, 0x80] {
            let mut bad = good.to_vec();
            bad[at] ^= bit;
            assert_eq!(
                strip(&bad),
                strip_owned(bad.clone()),
                "bit {bit} of byte {at}"
            );
            also(&bad);
        }
    }
}
