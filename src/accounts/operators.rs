//! What operators do to accounts, in one place for the command line, the admin API and the admin
//! page: set the plan, the credits, the expiry and the disabled flag, each checked first (a
//! refusal names the field and changes nothing) and recorded in the audit log with who did it and
//! the values before and after, in the transaction that makes the change.

use serde_json::{json, Map, Value};

use crate::config::Plans;
use crate::refusal::ApiError;
use crate::store::{now_ms, Account, AccountChange, NewAudit, Store};

/// The action an account change is recorded as.
pub const ACCOUNT_UPDATE: &str = "account.update";

/// A balance as an operator writes it: a whole number, 0 or more, or `unlimited` (None).
pub fn parse_credits(text: &str) -> Result<Option<i64>, ApiError> {
    match text.trim() {
        "unlimited" => Ok(None),
        n => n
            .parse::<i64>()
            .ok()
            .filter(|n| (0..=i64::MAX / 4).contains(n))
            .map(Some)
            .ok_or_else(|| {
                ApiError::field(
                    "credits",
                    "invalid_value",
                    format!(
                        "must be a whole number of credits, 0 or more, or `unlimited`, not `{n}`"
                    ),
                )
            }),
    }
}

/// An expiry as an operator writes it: `never` (None), an RFC 3339 time, or a date (`2027-01-31`,
/// the end of that day, UTC). One already past is refused.
pub fn parse_expiry(text: &str, now: i64) -> Result<Option<i64>, ApiError> {
    let text = text.trim();
    if text == "never" {
        return Ok(None);
    }
    let bad = |why: &str| ApiError::field("expires_at", "invalid_value", why);
    let at = match chrono::DateTime::parse_from_rfc3339(text) {
        Ok(at) => at.timestamp_millis(),
        Err(_) => match chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d") {
            Ok(day) => day
                .and_hms_milli_opt(23, 59, 59, 999)
                .map(|t| t.and_utc().timestamp_millis())
                .ok_or_else(|| bad("not a date"))?,
            Err(_) => {
                return Err(bad(&format!(
                    "`{text}` is not an RFC 3339 time (2027-01-31T00:00:00Z), a date \
                     (2027-01-31) or `never`"
                )))
            }
        },
    };
    future(at, now)
}

/// An expiry that is not in the past.
pub fn future(at: i64, now: i64) -> Result<Option<i64>, ApiError> {
    if at <= now {
        return Err(ApiError::field(
            "expires_at",
            "invalid_value",
            format!(
                "{} is in the past; `never` (or null) removes an expiry",
                crate::domain::rfc3339(at)
            ),
        ));
    }
    Ok(Some(at))
}

/// A plan that an account may be put on: one of the configured plans.
pub fn check_plan(plans: &Plans, plan: &str) -> Result<(), ApiError> {
    if plans.knows(plan) {
        return Ok(());
    }
    Err(ApiError::field(
        "plan",
        "invalid_value",
        format!("`{plan}` is not a plan; the plans are {}", plans.listed()),
    ))
}

/// Apply `change` to `account` for the operator `actor`, recorded in the audit log; the account
/// as it is after. Each field is checked first; a refusal names it and changes nothing.
pub async fn change_account(
    store: &dyn Store,
    plans: &Plans,
    actor: &str,
    account: &Account,
    change: &AccountChange,
) -> Result<Account, ApiError> {
    if let Some(plan) = &change.plan {
        check_plan(plans, plan)?;
    }
    if let Some(Some(credits)) = change.credits {
        if credits < 0 {
            return Err(ApiError::field(
                "credits",
                "invalid_value",
                "must not be negative",
            ));
        }
    }
    if let Some(Some(at)) = change.expires_at {
        future(at, now_ms())?;
    }
    let (before, after) = before_and_after(account, change);
    let audit = NewAudit {
        actor: actor.to_string(),
        action: ACCOUNT_UPDATE.into(),
        account_id: Some(account.id.clone()),
        before,
        after,
    };
    if !change.is_empty() && !store.change_account(&account.id, change, &audit).await? {
        return Err(ApiError::AccountNotFound);
    }
    store
        .account_by_id(&account.id)
        .await?
        .ok_or(ApiError::AccountNotFound)
}

/// The changed fields' values before and after, as the audit log keeps them.
fn before_and_after(account: &Account, change: &AccountChange) -> (Value, Value) {
    let (mut before, mut after) = (Map::new(), Map::new());
    let mut note = |field: &str, was: Value, now: Value| {
        before.insert(field.into(), was);
        after.insert(field.into(), now);
    };
    if let Some(plan) = &change.plan {
        note("plan", json!(account.plan), json!(plan));
    }
    if let Some(credits) = change.credits {
        note(
            "credits",
            credits_json(account.credits),
            credits_json(credits),
        );
    }
    if let Some(at) = change.expires_at {
        note(
            "expires_at",
            expiry_json(account.expires_at),
            expiry_json(at),
        );
    }
    if let Some(disabled) = change.disabled {
        note("disabled", json!(account.disabled), json!(disabled));
    }
    (Value::Object(before), Value::Object(after))
}

/// A balance as the API writes it: a number, or `"unlimited"`.
pub fn credits_json(credits: Option<i64>) -> Value {
    credits.map_or_else(|| json!("unlimited"), |c| json!(c))
}

/// An expiry as the API writes it: RFC 3339, or null.
pub fn expiry_json(at: Option<i64>) -> Value {
    at.map_or(Value::Null, |at| json!(crate::domain::rfc3339(at)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credits_and_expiry_are_read_as_operators_write_them() {
        assert_eq!(parse_credits("12").unwrap(), Some(12));
        assert_eq!(parse_credits("unlimited").unwrap(), None);
        for bad in ["-1", "lots", "1.5", ""] {
            let e = parse_credits(bad).unwrap_err().to_string();
            assert!(e.starts_with("credits: "), "{e}");
        }
        let now = 1_800_000_000_000; // 2027-01-15
        assert_eq!(parse_expiry("never", now).unwrap(), None);
        assert_eq!(
            parse_expiry("2027-02-01T00:00:00Z", now).unwrap(),
            Some(1_801_440_000_000)
        );
        assert_eq!(
            parse_expiry("2027-02-01", now).unwrap(),
            Some(1_801_526_399_999),
            "a date is the end of that day"
        );
        for bad in [
            "2026-01-01",
            "2027-01-15T07:59:59Z",
            "tomorrow",
            "2027-13-01",
        ] {
            let e = parse_expiry(bad, now).unwrap_err().to_string();
            assert!(e.starts_with("expires_at: "), "{bad}: {e}");
        }
    }
}
