//! `Prefer: wait` (RFC 7240): a submit or `GET /api/v1/tasks/{task_id}` held until the task has
//! ended or the asked-for time has passed, then answered with the task's record. A waiting request
//! watches its task in the store's [`TaskEnds`](crate::store::TaskEnds): it reads the task when it
//! starts and once more each time the task ends (on any node), and never polls.

use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use uuid::Uuid;

use super::{ApiError, AppState};
use crate::auth::PresentedKey;
use crate::store::Task;

/// The longest wait a request may ask for, in seconds; plain `wait` asks for this. A setting
/// bounds `max_wait` by it, so it lives with the settings.
pub use crate::config::WAIT_MAX_SECS;

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

/// The wait served for one of `asked` seconds: at most the node's `max_wait`.
pub fn served(state: &AppState, asked: u64) -> u64 {
    asked.min(state.config.limits.max_wait.as_secs())
}

/// The `Preference-Applied` header for a wait of `secs`.
pub fn applied(secs: u64) -> (HeaderName, HeaderValue) {
    (
        PREFERENCE_APPLIED,
        HeaderValue::from_str(&format!("wait={secs}")).expect("a valid header value"),
    )
}

/// `task` as it is once it has ended, or after `secs` seconds, or when the server starts shutting
/// down, whichever comes first. The task is read again with `key` after each of its ends is
/// announced. A read that fails ends the wait with the record last read: the task is there
/// whatever the store's trouble, and a submit's caller must learn its id.
pub async fn until_ended(
    state: &AppState,
    key: &PresentedKey,
    id: &Uuid,
    mut task: Task,
    secs: u64,
) -> Task {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    let watch = state.store.wakeups().task_ends.watch(task.seq);
    loop {
        if task.has_ended() {
            return task;
        }
        let ended = watch.notified();
        tokio::pin!(ended);
        // Registered before the read: an end announced from here on is kept for the wait below.
        ended.as_mut().enable();
        match state.store.task_for_key(&key.0, id).await {
            Ok(Some((_, Some(read)))) => task = read,
            Ok(_) => return task,
            Err(e) => {
                tracing::warn!(error = %e, "a waiting request could not read its task again");
                return task;
            }
        }
        if task.has_ended() {
            return task;
        }
        tokio::select! {
            _ = &mut ended => {}
            _ = tokio::time::sleep_until(deadline) => return task,
            _ = state.shutdown.cancelled() => return task,
        }
    }
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
