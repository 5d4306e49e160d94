//! Callers' input images (blend, describe, upscale-highres): fetched by URL when the task runs
//! and decoded, all of it treated as hostile input.
//!
//! Fetching reuses the network policy of webhooks ([`crate::net::destination`]): the URL is checked with
//! [`validate_webhook_url`] under the same [`DestinationPolicy`], DNS answers go through
//! [`PublicOnlyResolver`], and redirects are followed by hand (the client itself follows none)
//! so that every hop is checked again. Input fetches add one rule of their own: link-local
//! addresses (169.254.0.0/16, fe80::/10, where cloud metadata endpoints live) are refused even
//! when the development switch `allow_private` is on, as IP literals and in DNS answers.
//!
//! Decoding sniffs the format from the bytes, reads the dimensions from the header and checks
//! them before any pixel buffer exists, and sets [`image::Limits`] as a second guard. What a
//! task's images take to decode is reserved from the node's [`DecodeBudget`] before any of them
//! is decoded.

mod budget;
mod decode;
mod fetch;
#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod metered;
#[cfg(test)]
pub(crate) mod samples;
mod whole;

use std::time::Duration;

use crate::net::format_duration;

pub use budget::{DecodeBudget, Decoded, Reservation};
pub use decode::{decode, decode_probed, probe, Header};
pub use fetch::ImageFetcher;
pub use whole::check_whole;

const MIB: u64 = 1024 * 1024;

/// Limits on one input image.
#[derive(Clone, Copy, Debug)]
pub struct InputLimits {
    /// Most body bytes read; the fetch fails as soon as the body passes it.
    pub max_bytes: u64,
    /// Most pixels (width x height) decoded.
    pub max_pixels: u64,
    /// Limit for the whole fetch, redirects and body included.
    pub timeout: Duration,
    /// Most redirects followed.
    pub max_redirects: usize,
}

impl Default for InputLimits {
    fn default() -> Self {
        InputLimits {
            max_bytes: 20 * MIB,
            max_pixels: 25_000_000,
            timeout: Duration::from_secs(30),
            max_redirects: 3,
        }
    }
}

/// Why an input image could not be used. `Display` gives a short lowercase reason without the
/// input's name (the caller adds which input it was).
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The URL breaks the destination policy (checked before any network access).
    #[error("invalid URL: {0}")]
    InvalidUrl(String),
    /// A redirect led somewhere the policy forbids; the text says where, e.g. "to a
    /// non-public address".
    #[error("redirect {0} refused")]
    RedirectRefused(String),
    /// More redirects than `max_redirects`.
    #[error("more than {0} redirects")]
    TooManyRedirects(usize),
    /// A redirect status without a usable `Location` header.
    #[error("redirect (HTTP {0}) without a usable location")]
    BadRedirect(u16),
    /// The host's name resolves only to addresses the policy forbids.
    #[error("host resolves only to non-public addresses")]
    NonPublicHost,
    /// The server answered with a status other than 2xx (or a redirect that is followed).
    #[error("answered HTTP {0}")]
    Status(u16),
    /// The whole fetch did not finish within the limit.
    #[error("timed out after {}", format_duration(*.0))]
    TimedOut(Duration),
    /// The connection or the exchange failed.
    #[error("{reason}")]
    Transport { reason: String, transient: bool },
    /// The body is larger than `max_bytes`.
    #[error("larger than {}", format_bytes(*.0))]
    TooLarge(u64),
    /// The image has more pixels than `max_pixels`.
    #[error("{width}x{height} is over the {} limit", format_pixels(*.max_pixels))]
    TooManyPixels {
        width: u32,
        height: u32,
        max_pixels: u64,
    },
    /// The bytes are not a PNG, JPEG, WebP or GIF image.
    #[error("not a PNG, JPEG, WebP or GIF image")]
    UnsupportedFormat,
    /// The bytes look like a supported format but are truncated, corrupt or unusable.
    #[error("could not be decoded: {0}")]
    Decode(String),
    /// The images a task decodes together need more memory than the node's whole
    /// `decode_memory_budget`: no wait would make room for them.
    #[error(
        "decoding needs {} at once, more than the {} this node allows",
        format_size(*.needed, Round::Up),
        format_size(*.budget, Round::Down)
    )]
    OverBudget { needed: u64, budget: u64 },
}

impl InputError {
    /// `true` when trying again later may succeed: timeouts, connections refused, reset or
    /// closed early, 5xx, 429 and 408. Everything else (the URL, the policy, the size, the
    /// content, other 4xx) fails the same way every time.
    pub fn is_transient(&self) -> bool {
        match self {
            InputError::TimedOut(_) => true,
            InputError::Transport { transient, .. } => *transient,
            InputError::Status(status) => *status >= 500 || *status == 429 || *status == 408,
            _ => false,
        }
    }
}

fn format_bytes(n: u64) -> String {
    if n >= MIB && n % MIB == 0 {
        format!("{} MiB", n / MIB)
    } else if n >= 1024 && n % 1024 == 0 {
        format!("{} KiB", n / 1024)
    } else {
        format!("{n} bytes")
    }
}

enum Round {
    Up,
    Down,
}

/// A size in the largest binary unit it reaches: whole when it is a whole number of them, else
/// to a tenth, rounded as asked (a need up, a budget down, so that the need never reads as less).
fn format_size(n: u64, round: Round) -> String {
    let Some((unit, name)) = [(1 << 30, "GiB"), (MIB, "MiB"), (1024, "KiB")]
        .into_iter()
        .find(|(unit, _)| n >= *unit)
    else {
        return format!("{n} bytes");
    };
    if n % unit == 0 {
        return format!("{} {name}", n / unit);
    }
    let tenths = n as f64 * 10.0 / unit as f64;
    let tenths = match round {
        Round::Up => tenths.ceil(),
        Round::Down => tenths.floor(),
    };
    format!("{:.1} {name}", tenths / 10.0)
}

fn format_pixels(n: u64) -> String {
    if n >= 1_000_000 && n % 1_000_000 == 0 {
        format!("{} megapixel", n / 1_000_000)
    } else {
        format!("{n} pixel")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_read_as_documented() {
        let l = InputLimits::default();
        assert_eq!(
            (l.max_bytes, l.max_pixels, l.timeout, l.max_redirects),
            (20 * 1024 * 1024, 25_000_000, Duration::from_secs(30), 3)
        );
        assert_eq!(
            InputError::TooLarge(l.max_bytes).to_string(),
            "larger than 20 MiB"
        );
        assert_eq!(
            InputError::TimedOut(l.timeout).to_string(),
            "timed out after 30s"
        );
        let err = InputError::TooManyPixels {
            width: 10_000,
            height: 10_000,
            max_pixels: l.max_pixels,
        };
        assert_eq!(
            err.to_string(),
            "10000x10000 is over the 25 megapixel limit"
        );
        assert_eq!(InputError::Status(404).to_string(), "answered HTTP 404");
        assert!(InputError::Status(503).is_transient());
        assert!(InputError::Status(408).is_transient());
        assert!(!InputError::Status(403).is_transient());
        assert!(!InputError::NonPublicHost.is_transient());
        let over = InputError::OverBudget {
            needed: 5_452_595,
            budget: 4 * MIB + 100,
        };
        assert_eq!(
            over.to_string(),
            "decoding needs 5.2 MiB at once, more than the 4.0 MiB this node allows"
        );
        assert!(!over.is_transient());
        assert_eq!(format_size(3 << 30, Round::Down), "3 GiB");
        assert_eq!(format_size(1536, Round::Up), "1.5 KiB");
        assert_eq!(format_size(1000, Round::Up), "1000 bytes");
    }
}
