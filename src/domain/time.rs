//! How times are written wherever easel shows one (records, listings, the CLI, backups): stored
//! as Unix milliseconds, shown as RFC 3339 in UTC.

/// Unix milliseconds as RFC 3339 UTC with millisecond precision.
pub fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milliseconds_are_shown_in_utc_to_the_millisecond() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_795_000_000_123), "2026-11-18T11:06:40.123Z");
    }
}
