//! Usage as `GET /api/v1/usage` reads it: the rollup of ended tasks per account, UTC day, model
//! and key (`usage_daily`), which both stores move in the transaction that records a task's end,
//! so that a range is read from a few rows per day rather than from every task.

use chrono::NaiveDate;

/// A UTC day as the rollup keys it: days since 1970-01-01.
pub type Day = i64;

const DAY_MS: i64 = 86_400_000;

/// The UTC day of a time in Unix milliseconds.
pub fn usage_day(at_ms: i64) -> Day {
    at_ms.div_euclid(DAY_MS)
}

/// A day as `YYYY-MM-DD`.
pub fn day_text(day: Day) -> String {
    chrono::DateTime::from_timestamp_millis(day * DAY_MS)
        .unwrap_or_default()
        .format("%Y-%m-%d")
        .to_string()
}

/// `YYYY-MM-DD` as a day; None when it is not one.
pub fn parse_day(text: &str) -> Option<Day> {
    let date = NaiveDate::parse_from_str(text, "%Y-%m-%d").ok()?;
    // Exactly the canonical spelling (no `2026-1-5`).
    (date.format("%Y-%m-%d").to_string() == text)
        .then(|| date.and_hms_opt(0, 0, 0))
        .flatten()
        .map(|t| usage_day(t.and_utc().timestamp_millis()))
}

/// What the rows are grouped by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UsageGroup {
    Day,
    Model,
    Key,
}

impl UsageGroup {
    pub fn parse(text: &str) -> Option<UsageGroup> {
        match text {
            "day" => Some(UsageGroup::Day),
            "model" => Some(UsageGroup::Model),
            "key" => Some(UsageGroup::Key),
            _ => None,
        }
    }
}

/// A range of days (both included) of one account's usage, or every account's (None).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsageQuery {
    pub account_id: Option<String>,
    pub from: Day,
    pub to: Day,
    pub group: UsageGroup,
}

/// One group's usage. `group` is the day (`YYYY-MM-DD`), the model or the key id; '' for tasks
/// that ran on no model, or were stored before keys were recorded. `account_id` is the account's
/// when every account was asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsageRow {
    pub account_id: Option<String>,
    pub group: String,
    pub tasks: i64,
    pub images: i64,
    pub pixels: i64,
    pub backend_ms: i64,
    pub cost: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_read_and_write_as_utc_dates() {
        assert_eq!(parse_day("1970-01-02"), Some(1));
        assert_eq!(day_text(20_000), "2024-10-04");
        assert_eq!(parse_day(&day_text(20_000)), Some(20_000));
        assert_eq!(usage_day(DAY_MS - 1), 0);
        assert_eq!(usage_day(-1), -1);
        for bad in [
            "2026-1-05",
            "2026-02-30",
            "yesterday",
            "",
            "2026-01-05T00:00:00Z",
        ] {
            assert_eq!(parse_day(bad), None, "{bad}");
        }
    }
}
