//! The `Prefer` header (RFC 7240): the `wait` preference of submits and reads, and the
//! `Preference-Applied` answer.

use axum::http::{HeaderMap, HeaderName, HeaderValue};

use crate::config::WAIT_MAX_SECS;
use crate::refusal::ApiError;

/// The header that says which preference was applied.
pub const PREFERENCE_APPLIED: HeaderName = HeaderName::from_static("preference-applied");

/// How long the request asked to wait (`Prefer: wait` or `wait=N`, N from 1 to 60 seconds), or
/// None when it did not ask. Other preferences are ignored, as RFC 7240 says; a `wait` whose
/// value is not a whole number of seconds in range is a 400 that says so.
pub fn preferred_wait(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    let invalid = || {
        ApiError::field(
            "Prefer",
            "invalid_value",
            format!("wait must be a whole number of seconds from 1 to {WAIT_MAX_SECS}"),
        )
    };
    let mut wait = None;
    for value in headers.get_all("prefer") {
        let value = value.to_str().map_err(|_| invalid())?;
        for preference in value.split(',') {
            // Parameters after `;` belong to the preference; `wait` has none.
            let token = preference.split(';').next().unwrap_or_default().trim();
            let (name, raw) = match token.split_once('=') {
                Some((name, raw)) => (name.trim(), Some(raw.trim().trim_matches('"'))),
                None => (token, None),
            };
            if !name.eq_ignore_ascii_case("wait") {
                continue;
            }
            let secs = match raw {
                None => WAIT_MAX_SECS,
                Some(raw) => raw
                    .parse::<u64>()
                    .ok()
                    .filter(|n| (1..=WAIT_MAX_SECS).contains(n))
                    .ok_or_else(invalid)?,
            };
            wait = Some(secs);
        }
    }
    Ok(wait)
}

/// The `Prefer` header as the OpenAPI document describes it (`preferred_wait` reads it).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
pub struct PreferWait {
    /// RFC 7240 preferences. `wait` or `wait=N` (N whole seconds, 1 to 60; plain `wait` is 60)
    /// holds the request until the task has ended (finished, failed or canceled) or N seconds
    /// have passed, then answers the task's record, whatever its status, with
    /// `Preference-Applied: wait=N`. Other preferences are ignored; a `wait` out of range is 400.
    #[param(
        rename = "Prefer",
        nullable = false,
        pattern = "^wait(=([1-9]|[1-5][0-9]|60))?$"
    )]
    pub prefer: Option<String>,
}

/// The `Preference-Applied` header for a wait of `secs`.
pub fn applied(secs: u64) -> (HeaderName, HeaderValue) {
    (
        PREFERENCE_APPLIED,
        HeaderValue::from_str(&format!("wait={secs}")).expect("a valid header value"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefer(values: &[&str]) -> Result<Option<u64>, String> {
        let mut headers = HeaderMap::new();
        for v in values {
            headers.append("prefer", HeaderValue::from_str(v).unwrap());
        }
        preferred_wait(&headers).map_err(|e| e.to_string())
    }

    #[test]
    fn wait_is_read_among_other_preferences_and_its_range_is_enforced() {
        assert_eq!(prefer(&[]), Ok(None));
        assert_eq!(prefer(&["return=minimal"]), Ok(None));
        assert_eq!(prefer(&["wait"]), Ok(Some(60)));
        assert_eq!(prefer(&["wait=5"]), Ok(Some(5)));
        assert_eq!(prefer(&["WAIT = 7"]), Ok(Some(7)));
        assert_eq!(prefer(&["respond-async, wait=10"]), Ok(Some(10)));
        assert_eq!(prefer(&["return=minimal", "wait=\"3\""]), Ok(Some(3)));
        assert_eq!(prefer(&["wait=60;x=1"]), Ok(Some(60)));
        for bad in [
            "wait=0",
            "wait=61",
            "wait=-1",
            "wait=1.5",
            "wait=soon",
            "wait=",
        ] {
            let e = prefer(&[bad]).unwrap_err();
            assert!(e.starts_with("Prefer: wait must be"), "{bad}: {e}");
        }
    }
}
