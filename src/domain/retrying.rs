//! A running task whose backend failed in a way that may pass (it went down, it timed out, it
//! answered 503) and that waits to be tried again: what its record, its events and the
//! dashboard say of it until a backend takes it again.

use serde::Serialize;
use utoipa::ToSchema;

/// The most characters of a backend's error kept: enough to say what happened, and small enough
/// for every store's row and PostgreSQL's notifications (under 8000 bytes).
pub const RETRY_ERROR_MAX_CHARS: usize = 300;

/// The backend attempt that failed last, while the task waits to be tried again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ToSchema)]
pub struct Retrying {
    /// The attempt that failed: 1 for the first. The next attempt is `attempt + 1`.
    pub attempt: u32,
    /// Why it failed, as the backend or the connection said (at most 300 characters).
    pub error: String,
}

impl Retrying {
    /// Attempt `attempt` failed with `error` (cut to [`RETRY_ERROR_MAX_CHARS`], on one line).
    pub fn new(attempt: u32, error: &str) -> Retrying {
        let one_line = error.split_whitespace().collect::<Vec<_>>().join(" ");
        let error = match one_line.char_indices().nth(RETRY_ERROR_MAX_CHARS) {
            Some((end, _)) => format!("{}…", &one_line[..end]),
            None => one_line,
        };
        Retrying { attempt, error }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_is_kept_on_one_line_and_cut_to_its_most() {
        let r = Retrying::new(2, "connection refused\n  (tcp connect)");
        assert_eq!(r.error, "connection refused (tcp connect)");
        assert_eq!(r.attempt, 2);
        let long = "é".repeat(RETRY_ERROR_MAX_CHARS + 10);
        let cut = Retrying::new(1, &long).error;
        assert_eq!(cut.chars().count(), RETRY_ERROR_MAX_CHARS + 1);
        assert!(cut.ends_with('…'));
    }
}
