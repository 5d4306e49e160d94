//! Setting an account's webhook, for the API (`PUT /api/v1/account/webhook`) and the account
//! page alike: every field checked before anything is stored, the URL under the same
//! destination rules as a task's `webhook_url`.

use serde_json::{Map, Value};

use crate::domain::account_webhook::{
    secret_rules, AccountEvent, AccountEvents, AccountWebhook, THRESHOLD_MAX,
};
use crate::net::{validate_webhook_url, DestinationPolicy};
use crate::refusal::ApiError;
use crate::store::{now_ms, Store};

/// The fields of an account webhook as given, not yet checked.
#[derive(Debug, Default)]
pub struct Given {
    pub url: Option<String>,
    pub secret: Option<String>,
    pub events: Option<Vec<String>>,
    pub credits_low_threshold: Option<i64>,
}

impl Given {
    /// From a JSON body: `url`, `events`, and optionally `secret` and `credits_low_threshold`;
    /// any other field is refused by name.
    pub fn from_json(body: &Map<String, Value>) -> Result<Given, ApiError> {
        let mut given = Given::default();
        for (field, value) in body {
            let wrong =
                |what: &str| ApiError::field(field, "invalid_type", format!("must be {what}"));
            match (field.as_str(), value) {
                (_, Value::Null) => {}
                ("url", Value::String(s)) => given.url = Some(s.clone()),
                ("url", _) => return Err(wrong("a string")),
                ("secret", Value::String(s)) => given.secret = Some(s.clone()),
                ("secret", _) => return Err(wrong("a string")),
                ("events", Value::Array(items)) => {
                    let names = items
                        .iter()
                        .enumerate()
                        .map(|(i, v)| {
                            v.as_str().map(str::to_string).ok_or_else(|| {
                                ApiError::field(
                                    &format!("events[{i}]"),
                                    "invalid_type",
                                    "must be a string",
                                )
                            })
                        })
                        .collect::<Result<_, _>>()?;
                    given.events = Some(names);
                }
                ("events", _) => return Err(wrong("a list of event names")),
                ("credits_low_threshold", Value::Number(n)) => {
                    given.credits_low_threshold =
                        Some(n.as_i64().ok_or_else(|| wrong("a whole number"))?);
                }
                ("credits_low_threshold", _) => return Err(wrong("a whole number")),
                _ => {
                    return Err(ApiError::field(
                        field,
                        "unknown_field",
                        "is not a field of the account webhook (url, secret, events, \
                         credits_low_threshold)",
                    ))
                }
            }
        }
        Ok(given)
    }

    /// The webhook these fields make, or a 400 naming the first field that is wrong.
    /// `default_threshold` is the configured `credits_low_threshold`.
    pub fn check(
        self,
        destinations: &DestinationPolicy,
        default_threshold: i64,
        now: i64,
    ) -> Result<AccountWebhook, ApiError> {
        let url = match self.url.as_deref().map(str::trim) {
            None | Some("") => return Err(ApiError::field("url", "missing_field", "is required")),
            Some(raw) => validate_webhook_url(raw, destinations)
                .map_err(|e| ApiError::field("url", "invalid_value", e))?
                .to_string(),
        };
        let secret = self.secret.filter(|s| !s.is_empty());
        if let Some(secret) = &secret {
            secret_rules(secret).map_err(|e| ApiError::field("secret", "invalid_value", e))?;
        }
        let Some(names) = self.events else {
            return Err(ApiError::field("events", "missing_field", "is required"));
        };
        let events = AccountEvents::parse(names.iter().map(String::as_str))
            .map_err(|e| ApiError::field("events", "invalid_value", e))?;
        if events.is_empty() {
            return Err(ApiError::field(
                "events",
                "invalid_value",
                "must name at least one event",
            ));
        }
        if let Some(t) = self.credits_low_threshold {
            if !(0..=THRESHOLD_MAX).contains(&t) {
                return Err(ApiError::field(
                    "credits_low_threshold",
                    "invalid_value",
                    format!("must be from 0 to {THRESHOLD_MAX}"),
                ));
            }
        }
        let credits_low_threshold = events
            .has(AccountEvent::CreditsLow)
            .then(|| self.credits_low_threshold.unwrap_or(default_threshold));
        Ok(AccountWebhook {
            url,
            secret,
            events,
            credits_low_threshold,
            created_at: now,
            updated_at: now,
        })
    }
}

/// Check `given` and set it as the account's webhook; the webhook as stored.
pub async fn put(
    store: &dyn Store,
    destinations: &DestinationPolicy,
    default_threshold: i64,
    account_id: &str,
    given: Given,
) -> Result<AccountWebhook, ApiError> {
    let now = now_ms();
    let mut hook = given.check(destinations, default_threshold, now)?;
    store.put_account_webhook(account_id, &hook).await?;
    // The first setting's time stays; the store keeps it on a replace.
    if let Some(stored) = store.account_webhook(account_id).await? {
        hook.created_at = stored.created_at;
    }
    Ok(hook)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy() -> DestinationPolicy {
        DestinationPolicy {
            allow_http: true,
            allow_private: true,
        }
    }

    fn given(body: Value) -> Result<AccountWebhook, ApiError> {
        Given::from_json(body.as_object().unwrap())?.check(&policy(), 10, 0)
    }

    fn refusal(body: Value) -> String {
        given(body).unwrap_err().to_string()
    }

    #[test]
    fn a_webhook_takes_its_url_events_secret_and_threshold() {
        let hook = given(
            json!({"url": "http://127.0.0.1:9/h", "events": ["credits.low"],
                                "secret": "s", "credits_low_threshold": 25}),
        )
        .unwrap();
        assert_eq!(hook.credits_low_threshold, Some(25));
        assert_eq!(hook.secret.as_deref(), Some("s"));
        let hook = given(json!({"url": "http://127.0.0.1:9/h", "events": ["credits.low"]}));
        assert_eq!(hook.unwrap().credits_low_threshold, Some(10), "the default");
        let hook = given(
            json!({"url": "http://127.0.0.1:9/h", "events": ["task.failed"],
                                "credits_low_threshold": 25}),
        );
        assert_eq!(
            hook.unwrap().credits_low_threshold,
            None,
            "no credits.low, no threshold"
        );
    }

    #[test]
    fn each_bad_field_is_named() {
        let cases = [
            (json!({"events": ["task.failed"]}), "url: is required"),
            (
                json!({"url": "ftp://x/h", "events": ["task.failed"]}),
                "url:",
            ),
            (
                json!({"url": "http://127.0.0.1:9/h"}),
                "events: is required",
            ),
            (
                json!({"url": "http://127.0.0.1:9/h", "events": []}),
                "events: must name",
            ),
            (
                json!({"url": "http://127.0.0.1:9/h", "events": ["task.done"]}),
                "events: unknown",
            ),
            (
                json!({"url": "http://127.0.0.1:9/h", "events": [1]}),
                "events[0]:",
            ),
            (
                json!({"url": "http://127.0.0.1:9/h", "events": ["credits.low"],
                    "credits_low_threshold": -1}),
                "credits_low_threshold:",
            ),
            (
                json!({"url": "http://127.0.0.1:9/h", "events": ["credits.low"],
                    "credits_low_threshold": 1.5}),
                "credits_low_threshold:",
            ),
            (
                json!({"url": "http://127.0.0.1:9/h", "events": ["task.failed"],
                    "secret": "tab\there"}),
                "secret:",
            ),
            (
                json!({"url": "http://127.0.0.1:9/h", "events": ["task.failed"], "when": 1}),
                "when: is not a field",
            ),
        ];
        for (body, expected) in cases {
            let got = refusal(body.clone());
            assert!(got.contains(expected), "{body}: {got}");
        }
    }

    #[test]
    fn a_private_destination_is_refused_unless_allowed() {
        let strict = DestinationPolicy::default();
        let body = json!({"url": "https://127.0.0.1/h", "events": ["task.failed"]});
        let got = Given::from_json(body.as_object().unwrap())
            .unwrap()
            .check(&strict, 10, 0)
            .unwrap_err()
            .to_string();
        assert!(got.starts_with("url:"), "{got}");
    }
}
