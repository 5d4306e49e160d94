//! Deterministic randomness and maths: the seed hashes, a splitmix64 PRNG and
//! polynomial trigonometry (no platform libm), so pixels match everywhere.

use sha2::{Digest, Sha256};

pub(super) fn seed_hash(prompt: &str, seed: u64, variant: Option<u32>) -> u64 {
    let mut h = Sha256::new();
    h.update(b"easel-procedural-v1\0");
    h.update(prompt.as_bytes());
    h.update([0u8]);
    h.update(seed.to_le_bytes());
    if let Some(v) = variant {
        h.update(v.to_le_bytes());
    }
    let d = h.finalize();
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    u64::from_le_bytes(b)
}

/// FNV-1a, for per-word hashes.
pub(super) fn fnv(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// splitmix64.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub(super) fn f(&mut self) -> f32 {
        (self.next() >> 40) as f32 / 16_777_216.0
    }
    pub(super) fn range(&mut self, a: f32, b: f32) -> f32 {
        a + (b - a) * self.f()
    }
    pub(super) fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
    pub(super) fn chance(&mut self, p: f32) -> bool {
        self.f() < p
    }
    pub(super) fn count(&mut self, lo: f32, hi: f32, k: f32) -> usize {
        (self.range(lo, hi) * k).round().max(0.0) as usize
    }
}

pub(super) const PI: f32 = std::f32::consts::PI;
pub(super) const TAU: f32 = std::f32::consts::TAU;
pub(super) const HALF_PI: f32 = std::f32::consts::FRAC_PI_2;

/// Sine from a fixed polynomial, identical on every platform.
pub(super) fn sin(x: f32) -> f32 {
    if !x.is_finite() {
        return 0.0;
    }
    let mut r = x - (x / TAU).round() * TAU;
    if r > HALF_PI {
        r = PI - r;
    } else if r < -HALF_PI {
        r = -PI - r;
    }
    let r2 = r * r;
    r * (1.0
        + r2 * (-1.0 / 6.0 + r2 * (1.0 / 120.0 + r2 * (-1.0 / 5040.0 + r2 * (1.0 / 362_880.0)))))
}

pub(super) fn cos(x: f32) -> f32 {
    sin(x + HALF_PI)
}

pub(super) fn clamp01(v: f32) -> f32 {
    if v.is_nan() {
        0.0
    } else {
        v.clamp(0.0, 1.0)
    }
}
