//! `webhook_events`: which deliveries a task's caller asked for. Stored in the task's extras only
//! when it is not the default (every final event), so a plain submit writes nothing more.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// One kind of delivery a caller may ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WebhookEvent {
    /// While the task runs: its percentage and preview (see `webhooks::progress`).
    Progress,
    /// The task finished.
    Completed,
    Failed,
    Canceled,
}

impl WebhookEvent {
    /// Every event, in the order the contract lists them (and the order they are shown in).
    pub const ALL: [WebhookEvent; 4] = [
        WebhookEvent::Progress,
        WebhookEvent::Completed,
        WebhookEvent::Failed,
        WebhookEvent::Canceled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            WebhookEvent::Progress => "progress",
            WebhookEvent::Completed => "completed",
            WebhookEvent::Failed => "failed",
            WebhookEvent::Canceled => "canceled",
        }
    }

    fn named(name: &str) -> Option<WebhookEvent> {
        WebhookEvent::ALL.into_iter().find(|e| e.as_str() == name)
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// The rule a `webhook_events` value must keep, as its 400 says it.
pub const WEBHOOK_EVENTS_RULE: &str =
    "must be a non-empty list of \"progress\", \"completed\", \"failed\", \"canceled\"";

/// A set of [`WebhookEvent`]s. A task without one (`None` in its extras) gets every final event.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct WebhookEvents(u8);

impl WebhookEvents {
    /// The default: every final event, no progress.
    pub const FINAL: WebhookEvents = WebhookEvents(0b1110);

    /// The caller's value, or (`invalid_type` or `invalid_value`, the rule it breaks).
    /// Repeated names count once.
    pub fn parse(value: &Value) -> Result<WebhookEvents, (&'static str, String)> {
        let Value::Array(items) = value else {
            return Err(("invalid_type", WEBHOOK_EVENTS_RULE.to_string()));
        };
        if items.is_empty() {
            return Err(("invalid_value", WEBHOOK_EVENTS_RULE.to_string()));
        }
        let mut set = WebhookEvents(0);
        for item in items {
            let Value::String(name) = item else {
                return Err((
                    "invalid_type",
                    format!("{WEBHOOK_EVENTS_RULE} (got {item})"),
                ));
            };
            let event = WebhookEvent::named(name).ok_or_else(|| {
                (
                    "invalid_value",
                    format!("{WEBHOOK_EVENTS_RULE} (unknown event {item})"),
                )
            })?;
            set.0 |= event.bit();
        }
        Ok(set)
    }

    /// What the task's extras keep: None for the default.
    pub fn stored(self) -> Option<WebhookEvents> {
        (self != WebhookEvents::FINAL).then_some(self)
    }

    pub fn contains(self, event: WebhookEvent) -> bool {
        self.0 & event.bit() != 0
    }

    /// Whether a task with `asked` (None: the default) gets a delivery for `event`.
    pub fn wants(asked: Option<WebhookEvents>, event: WebhookEvent) -> bool {
        asked.unwrap_or(WebhookEvents::FINAL).contains(event)
    }

    pub fn iter(self) -> impl Iterator<Item = WebhookEvent> {
        WebhookEvent::ALL
            .into_iter()
            .filter(move |e| self.contains(*e))
    }
}

impl std::fmt::Debug for WebhookEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.iter().map(WebhookEvent::as_str))
            .finish()
    }
}

/// A list of names, in the contract's order.
impl Serialize for WebhookEvents {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter().map(WebhookEvent::as_str))
    }
}

/// From the stored list; a name this version does not know (a newer version's) is left out
/// rather than making the task's extras unreadable.
impl<'de> Deserialize<'de> for WebhookEvents {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let names = Vec::<String>::deserialize(d)?;
        Ok(WebhookEvents(
            names
                .iter()
                .filter_map(|n| WebhookEvent::named(n))
                .fold(0, |set, e| set | e.bit()),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_list_of_known_names_is_a_set_and_the_default_is_not_stored() {
        let set = WebhookEvents::parse(&json!(["failed", "progress", "failed"])).unwrap();
        assert_eq!(
            serde_json::to_value(set).unwrap(),
            json!(["progress", "failed"])
        );
        assert!(set.contains(WebhookEvent::Progress));
        assert!(!set.contains(WebhookEvent::Completed));
        let all_final = WebhookEvents::parse(&json!(["canceled", "completed", "failed"])).unwrap();
        assert_eq!(all_final.stored(), None);
        assert_eq!(set.stored(), Some(set));
        let back: WebhookEvents = serde_json::from_value(json!(["failed", "later"])).unwrap();
        assert_eq!(back.iter().collect::<Vec<_>>(), [WebhookEvent::Failed]);
        assert!(WebhookEvents::wants(None, WebhookEvent::Canceled));
        assert!(!WebhookEvents::wants(None, WebhookEvent::Progress));
    }

    #[test]
    fn anything_else_is_refused_with_the_rule() {
        for (value, code) in [
            (json!([]), "invalid_value"),
            (json!("progress"), "invalid_type"),
            (json!({"progress": true}), "invalid_type"),
            (json!(["progress", 1]), "invalid_type"),
            (json!(["started"]), "invalid_value"),
            (json!(["Completed"]), "invalid_value"),
        ] {
            let (got, rule) = WebhookEvents::parse(&value).unwrap_err();
            assert_eq!(got, code, "{value}");
            assert!(rule.starts_with(WEBHOOK_EVENTS_RULE), "{rule}");
        }
    }

    /// Names near the real ones, and anything else: a list of known names is the set of them,
    /// anything else one of the two refusals; never a panic.
    fn item() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        prop_oneof![
            proptest::sample::select(vec!["progress", "completed", "failed", "canceled"])
                .prop_map(|n| json!(n)),
            "[a-zA-Z\\u{0}-\\u{7f}\\u{ff10}-\\u{ff5a}]{0,12}".prop_map(|n| json!(n)),
            any::<i64>().prop_map(|n| json!(n)),
            Just(json!(null)),
            Just(json!({"progress": true})),
        ]
    }

    proptest::proptest! {
        #![proptest_config(crate::domain::fuzz_config())]

        #[test]
        fn any_list_is_a_set_of_known_events_or_refused(
            items in proptest::collection::vec(item(), 0..8),
            as_list in proptest::bool::weighted(0.9),
        ) {
            let value = if as_list { json!(items) } else { items.first().cloned().unwrap_or(json!(null)) };
            match WebhookEvents::parse(&value) {
                Ok(set) => {
                    let names: Vec<&str> = items.iter().map(|i| i.as_str().unwrap()).collect();
                    for event in set.iter() {
                        proptest::prop_assert!(names.contains(&event.as_str()));
                    }
                    proptest::prop_assert!(!items.is_empty());
                }
                Err((code, rule)) => {
                    proptest::prop_assert!(code == "invalid_type" || code == "invalid_value");
                    proptest::prop_assert!(rule.starts_with(WEBHOOK_EVENTS_RULE));
                }
            }
        }
    }
}
