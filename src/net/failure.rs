//! What went wrong with an outgoing request, told without its URL (which may hold credentials):
//! the error chain under reqwest's own error, sorted into the few kinds callers act on.

use std::error::Error as StdError;
use std::io;
use std::time::Duration;

use super::destination::{LinkLocalDestination, NonPublicDestination};

/// Why a request got no usable answer, sorted. Webhook deliveries and input fetches word these
/// for their own records and decide for themselves which may pass if tried again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The name resolved only to addresses the destination policy forbids.
    NonPublic,
    TimedOut,
    ConnectionRefused,
    ConnectionReset,
    ConnectionAborted,
    /// The peer closed the connection while the request was being written.
    BrokenPipe,
    /// The connection closed before a whole answer came.
    ClosedEarly,
    /// The name could not be resolved.
    Dns,
    /// The TLS handshake failed (a plain-HTTP server, a bad certificate...).
    Tls,
    /// Any other failure to connect.
    Connect,
    /// The answer's body could not be read.
    Body,
    /// The request could not be built (a header value, a URL).
    Builder,
    Other,
}

impl Failure {
    /// Sort `err` by the kinds of the errors under it, then by what their messages say.
    pub fn of(err: &reqwest::Error) -> Failure {
        if sources(err).any(|e| e.is::<NonPublicDestination>() || e.is::<LinkLocalDestination>()) {
            return Failure::NonPublic;
        }
        if err.is_timeout() {
            return Failure::TimedOut;
        }
        let kinds = io_kinds(err);
        for kind in &kinds {
            match kind {
                io::ErrorKind::TimedOut => return Failure::TimedOut,
                io::ErrorKind::ConnectionRefused => return Failure::ConnectionRefused,
                io::ErrorKind::ConnectionReset => return Failure::ConnectionReset,
                io::ErrorKind::ConnectionAborted => return Failure::ConnectionAborted,
                io::ErrorKind::BrokenPipe => return Failure::BrokenPipe,
                io::ErrorKind::UnexpectedEof => return Failure::ClosedEarly,
                _ => {}
            }
        }
        let messages: Vec<String> = sources(err).map(|e| e.to_string().to_lowercase()).collect();
        let mentions = |needle: &str| messages.iter().any(|m| m.contains(needle));
        if mentions("dns error") || mentions("failed to lookup address") {
            return Failure::Dns;
        }
        if mentions("connection closed before message completed") {
            return Failure::ClosedEarly;
        }
        if err.is_connect() {
            let tls = kinds.contains(&io::ErrorKind::InvalidData)
                || [
                    "tls",
                    "certificate",
                    "handshake",
                    "alert",
                    "corrupt message",
                ]
                .iter()
                .any(|needle| mentions(needle));
            return if tls { Failure::Tls } else { Failure::Connect };
        }
        if err.is_body() || err.is_decode() {
            return Failure::Body;
        }
        if err.is_builder() {
            return Failure::Builder;
        }
        Failure::Other
    }
}

/// Errors below reqwest's own (whose text includes the URL), outermost first.
pub fn sources<'a>(err: &'a reqwest::Error) -> impl Iterator<Item = &'a (dyn StdError + 'static)> {
    std::iter::successors(err.source(), |&e| e.source())
}

/// The innermost error under reqwest's own, which says what happened without the URL.
pub fn innermost(err: &reqwest::Error) -> Option<String> {
    sources(err).last().map(|e| e.to_string())
}

/// Kinds of every `io::Error` in the chain, including ones wrapped inside another `io::Error`
/// (whose `source()` skips the wrapped error itself).
fn io_kinds(err: &reqwest::Error) -> Vec<io::ErrorKind> {
    let mut kinds = Vec::new();
    for e in sources(err) {
        let mut current = e.downcast_ref::<io::Error>();
        while let Some(io_err) = current {
            kinds.push(io_err.kind());
            current = io_err
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<io::Error>());
        }
    }
    kinds
}

/// A duration as people write it in the settings (`10s`, `300ms`, `1500ms`), for every message
/// that names a timeout or a budget.
pub fn format_duration(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else if Duration::from_millis(d.as_millis() as u64) == d {
        format!("{}ms", d.as_millis())
    } else {
        format!("{d:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_durations() {
        assert_eq!(format_duration(Duration::from_secs(10)), "10s");
        assert_eq!(format_duration(Duration::from_millis(300)), "300ms");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
    }
}
