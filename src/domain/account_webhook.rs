//! The account webhook: one destination per account for the events that are the account's
//! rather than one task's caller's (`credits.low`, and `task.finished`/`task.failed` of tasks
//! submitted without a webhook of their own). Its deliveries are Standard Webhooks messages,
//! `{"type", "timestamp", "data"}`, signed with the account's signing secret like every
//! delivery.

use super::time::rfc3339;

/// Longest `secret` (sent back as the `x-webhook-secret` header), as a task's
/// `webhook_secret`.
pub const SECRET_MAX_CHARS: usize = 256;
/// The largest `credits_low_threshold`, far over any balance a plan grants.
pub const THRESHOLD_MAX: i64 = 1_000_000_000_000;

/// One kind of account event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum AccountEvent {
    /// A charge took the balance from at or over the threshold to under it.
    CreditsLow,
    /// A task without a webhook of its own finished.
    TaskFinished,
    /// A task without a webhook of its own failed.
    TaskFailed,
}

impl AccountEvent {
    /// Every event, in the contract's order.
    pub const ALL: [AccountEvent; 3] = [
        AccountEvent::CreditsLow,
        AccountEvent::TaskFinished,
        AccountEvent::TaskFailed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AccountEvent::CreditsLow => "credits.low",
            AccountEvent::TaskFinished => "task.finished",
            AccountEvent::TaskFailed => "task.failed",
        }
    }

    pub fn named(name: &str) -> Option<AccountEvent> {
        AccountEvent::ALL.into_iter().find(|e| e.as_str() == name)
    }

    /// The event of a task that ended in `status`, if the account webhook has one for it (a
    /// cancel is the caller's own doing, and has none).
    pub fn of_ending(status: super::TaskStatus) -> Option<AccountEvent> {
        match status {
            super::TaskStatus::Finished => Some(AccountEvent::TaskFinished),
            super::TaskStatus::Failed => Some(AccountEvent::TaskFailed),
            _ => None,
        }
    }
}

/// The events an account webhook takes: a set, stored as its names joined by commas.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AccountEvents(u8);

impl AccountEvents {
    pub fn with(self, event: AccountEvent) -> AccountEvents {
        AccountEvents(self.0 | 1 << event as u8)
    }

    pub fn has(self, event: AccountEvent) -> bool {
        self.0 & (1 << event as u8) != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The events, in the contract's order.
    pub fn each(self) -> impl Iterator<Item = AccountEvent> {
        AccountEvent::ALL.into_iter().filter(move |e| self.has(*e))
    }

    /// The names given, each known; the first unknown one's error otherwise. Repeats are one.
    pub fn parse<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<AccountEvents, String> {
        let mut events = AccountEvents::default();
        for name in names {
            let event = AccountEvent::named(name).ok_or_else(|| {
                format!(
                    "unknown event {name:?}; the events are {}",
                    AccountEvent::ALL.map(AccountEvent::as_str).join(", ")
                )
            })?;
            events = events.with(event);
        }
        Ok(events)
    }

    /// The stored form: the names joined by commas.
    pub fn to_column(self) -> String {
        self.each()
            .map(AccountEvent::as_str)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// From the stored form; names this build does not know are left out.
    pub fn from_column(column: &str) -> AccountEvents {
        column
            .split(',')
            .filter_map(AccountEvent::named)
            .fold(AccountEvents::default(), AccountEvents::with)
    }
}

/// An account's webhook as stored.
#[derive(Clone, PartialEq, Eq)]
pub struct AccountWebhook {
    pub url: String,
    /// Sent as `x-webhook-secret` with each delivery, as a task's `webhook_secret` is.
    pub secret: Option<String>,
    pub events: AccountEvents,
    /// Set when `events` has `credits.low`.
    pub credits_low_threshold: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
}

impl std::fmt::Debug for AccountWebhook {
    // Never print the secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccountWebhook")
            .field("url", &crate::config::redact(&self.url))
            .field("has_secret", &self.secret.is_some())
            .field("events", &self.events.to_column())
            .field("credits_low_threshold", &self.credits_low_threshold)
            .finish_non_exhaustive()
    }
}

/// Whether `secret` may be a webhook secret (a task's or an account webhook's): it travels back
/// as an HTTP header value, so printable ASCII, and at most [`SECRET_MAX_CHARS`].
pub fn secret_rules(secret: &str) -> Result<(), String> {
    if secret.chars().count() > SECRET_MAX_CHARS {
        return Err(format!("must be at most {SECRET_MAX_CHARS} characters"));
    }
    if secret.chars().any(|c| c.is_control() || !c.is_ascii()) {
        return Err("must be printable ASCII".into());
    }
    Ok(())
}

/// A delivery's body: the Standard Webhooks envelope around `data` (a JSON text), made at `at`
/// (ms).
pub fn envelope(event: AccountEvent, at: i64, data: &str) -> String {
    format!(
        r#"{{"type":"{}","timestamp":"{}","data":{data}}}"#,
        event.as_str(),
        rfc3339(at)
    )
}

/// `credits.low`'s body: the balance the charge left and the threshold it went under.
pub fn credits_low_payload(at: i64, credits: i64, threshold: i64) -> String {
    envelope(
        AccountEvent::CreditsLow,
        at,
        &format!(r#"{{"credits":{credits},"credits_low_threshold":{threshold}}}"#),
    )
}

/// Whether a charge from `before` to `after` crossed under `threshold`: once per crossing, as
/// the balance must come back to the threshold or over it before the next one.
pub fn went_under(before: i64, after: i64, threshold: i64) -> bool {
    before >= threshold && after < threshold
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_parse_store_and_read_back_in_order() {
        let events = AccountEvents::parse(["task.failed", "credits.low", "task.failed"]).unwrap();
        assert_eq!(events.to_column(), "credits.low,task.failed");
        assert_eq!(AccountEvents::from_column(&events.to_column()), events);
        assert!(!events.has(AccountEvent::TaskFinished));
        let err = AccountEvents::parse(["task.done"]).unwrap_err();
        assert!(
            err.contains("task.done") && err.contains("credits.low"),
            "{err}"
        );
        assert!(AccountEvents::parse([]).unwrap().is_empty());
    }

    #[test]
    fn a_crossing_is_from_at_or_over_to_under() {
        assert!(went_under(10, 9, 10));
        assert!(went_under(50, 0, 10));
        assert!(!went_under(9, 5, 10), "already under: no second event");
        assert!(!went_under(20, 10, 10), "at the threshold is not under it");
    }

    #[test]
    fn the_envelope_is_json_with_type_timestamp_and_data() {
        let body = credits_low_payload(1_700_000_000_000, 4, 10);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["type"], "credits.low");
        assert_eq!(v["timestamp"], "2023-11-14T22:13:20.000Z");
        assert_eq!(v["data"]["credits"], 4);
        assert_eq!(v["data"]["credits_low_threshold"], 10);
    }

    #[test]
    fn secrets_are_printable_ascii_and_bounded() {
        assert!(secret_rules("s3cret-value").is_ok());
        assert!(secret_rules("tab\there").is_err());
        assert!(secret_rules("é").is_err());
        assert!(secret_rules(&"x".repeat(SECRET_MAX_CHARS + 1)).is_err());
    }
}
