//! Webhook delivery: the dispatcher drains the durable outbox (written in the same transaction as
//! each task's final state) through an SSRF-safe HTTP client, on the retry schedule.

pub mod client;
pub mod dispatcher;
pub mod progress;
pub mod signing;

use std::time::Duration;

/// When the next attempt is due after attempt `attempt_no` (1-based) failed, or None when the
/// schedule is used up (the delivery becomes undeliverable). Retries are counted from the failure
/// of the initial attempt: with `10s,30s,90s`, retries go out at about +10 s, +30 s and +90 s.
pub fn next_attempt_at(
    attempt_no: i64,
    first_failed_at: i64,
    schedule: &[Duration],
) -> Option<i64> {
    let index = usize::try_from(attempt_no - 1).ok()?;
    schedule
        .get(index)
        .map(|delay| first_failed_at + delay.as_millis() as i64)
}

/// The `User-Agent` of every delivery.
pub fn user_agent() -> String {
    format!("easel-webhooks/{}", env!("CARGO_PKG_VERSION"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_counts_from_the_initial_failure() {
        let s = [10, 30, 90].map(Duration::from_secs);
        assert_eq!(next_attempt_at(1, 1_000, &s), Some(11_000));
        assert_eq!(next_attempt_at(2, 1_000, &s), Some(31_000));
        assert_eq!(next_attempt_at(3, 1_000, &s), Some(91_000));
        assert_eq!(next_attempt_at(4, 1_000, &s), None);
        assert_eq!(next_attempt_at(1, 1_000, &[]), None);
    }
}
