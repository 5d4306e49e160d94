//! What the studio's forms share: submitting for the signed-in account through the API's use
//! case with its studio key, and a refusal or an action as a page names it.

use std::time::Duration;

use serde_json::{Map, Value};
use uuid::Uuid;

use crate::auth::PresentedKey;
use crate::domain::OpKind;
use crate::http::state::AppState;
use crate::http::web::error_page::WebError;
use crate::http::web::session::SignedIn;
use crate::refusal::ApiError;
use crate::store::Idempotency;
use crate::tasks::body::JsonObject;
use crate::tasks::idempotency::fingerprint;
use crate::tasks::submit::{submit_keyed, Answer};

/// How long a second click waits for the first one's answer before it is told to look at its
/// tasks: a submit answers in milliseconds, unless it checks an image prompt's file.
const SECOND_CLICK_WAIT: Duration = Duration::from_secs(10);

/// A form's idempotency key, and what makes two sends of it the same request.
pub(crate) struct Keyed {
    pub key: String,
    pub fingerprint: [u8; 32],
}

impl Keyed {
    /// The key of a form that sends `body` as it is.
    pub(crate) fn of(key: &str, kind: OpKind, body: &Map<String, Value>) -> Keyed {
        Keyed {
            key: key.to_string(),
            fingerprint: fingerprint(kind, body),
        }
    }
}

/// A task a form made, or the one an earlier send of the same form made.
pub(crate) struct Made {
    pub id: Uuid,
    pub replayed: bool,
}

/// Submit `body` as an operation of `kind` for the signed-in account, through the API's use
/// case with the account's studio key. `idempotency` (a form's key) makes a second click
/// answer with the first click's task. The task, or the refusal in the API's words.
pub(crate) async fn submit_as(
    state: &AppState,
    user: &SignedIn,
    kind: OpKind,
    body: Map<String, Value>,
    idempotency: Option<Keyed>,
) -> Result<Result<Made, ApiError>, WebError> {
    let hash = crate::accounts::studio::studio_key(state.store.as_ref(), &user.account.id).await?;
    if state.rate_limits.enabled() {
        if let Err(refused) = state
            .rate_limits
            .check_presented(state.store.as_ref(), &hash)
            .await?
        {
            return Ok(Err(ApiError::RateLimited(refused)));
        }
    }
    let key = PresentedKey(hash);
    let idempotency =
        idempotency.filter(|k| crate::tasks::idempotency::check_key(k.key.as_bytes()).is_ok());
    // Held until the store has answered, as the API holds an `Idempotency-Key`: the second
    // click of a double click waits here, then gets the first one's answer.
    let mut held = None;
    if let Some(k) = &idempotency {
        let deadline = tokio::time::Instant::now() + SECOND_CLICK_WAIT;
        loop {
            if let Some(h) = state.idempotency.claim(hash, k.key.clone()) {
                held = Some(h);
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(Err(ApiError::IdempotencyKeyInUse));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let keyed = held
        .as_ref()
        .zip(idempotency.as_ref())
        .map(|(h, k)| Idempotency {
            key: h.key().to_string(),
            fingerprint: k.fingerprint,
            ttl_ms: state.config.limits.idempotency_ttl.as_millis() as i64,
        });
    let answer = submit_keyed(state, kind, &key, Ok(JsonObject(body)), keyed).await;
    drop(held);
    Ok(match answer {
        Ok(Answer::Accepted(id)) => Ok(Made {
            id,
            replayed: false,
        }),
        Ok(Answer::Batch(ids)) => Ok(Made {
            id: ids[0],
            replayed: false,
        }),
        Ok(Answer::Replayed {
            task_id: Some(id), ..
        }) => Ok(Made { id, replayed: true }),
        Ok(Answer::Replayed { body, .. }) => Err(ApiError::BadRequest {
            code: "replayed",
            msg: replayed_message(&body),
        }),
        Err(ApiError::Internal(e)) => return Err(WebError::Internal(e)),
        Err(e) => Err(e),
    })
}

/// The message of a stored refusal replayed to a second click.
fn replayed_message(body: &str) -> String {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| {
            v.get("errors")?
                .get(0)?
                .get("msg")?
                .as_str()
                .map(str::to_string)
        })
        .unwrap_or_else(|| "This form was already sent; look at your tasks.".into())
}

/// A refusal as a page shows it: which field it names (the API's messages start with it) and
/// what it says.
pub(crate) fn refusal_field(e: &ApiError) -> (Option<String>, String) {
    let msg = match e {
        ApiError::TaskNotFound => {
            return (None, "That task is not there (or no longer yours).".into())
        }
        ApiError::Unauthorized => {
            return (None, "The account cannot submit now; sign in again.".into())
        }
        other => other.to_string(),
    };
    let field = msg
        .split_once(": ")
        .map(|(f, _)| f)
        .filter(|f| {
            f.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_[].".contains(c))
        })
        .map(|f| f.split(['[', '.']).next().unwrap_or(f).to_string());
    (field, msg)
}

/// The message of a page's refusal (`refusal_field`'s) if it names `field`, to show by its
/// input.
pub(crate) fn error_of<'a>(
    error: &'a Option<(Option<String>, String)>,
    field: &str,
) -> Option<&'a str> {
    match error {
        Some((Some(f), msg)) if f == field => Some(msg),
        _ => None,
    }
}

/// The message of a page's refusal unless it names one of the page's `fields` (whose inputs show
/// it), to show for the form as a whole.
pub(crate) fn general_error<'a>(
    error: &'a Option<(Option<String>, String)>,
    fields: &[&str],
) -> Option<&'a str> {
    match error {
        Some((Some(f), _)) if fields.contains(&f.as_str()) => None,
        Some((_, msg)) => Some(msg),
        None => None,
    }
}

/// The accessible name of a follow-up's button: its label, or for Midjourney's arrow labels,
/// what they do.
pub(crate) fn button_name(label: &str) -> &str {
    match label {
        "🔄" => "Reroll",
        "⬅️" => "Pan left",
        "➡️" => "Pan right",
        "⬆️" => "Pan up",
        "⬇️" => "Pan down",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_name_their_field() {
        let e = ApiError::field("prompt", "invalid_value", "--ar 0:1 is not an aspect ratio");
        let (field, msg) = refusal_field(&e);
        assert_eq!(field.as_deref(), Some("prompt"));
        assert!(msg.starts_with("prompt: "));
        let e = ApiError::field("image_urls[1]", "invalid_value", "bad");
        assert_eq!(refusal_field(&e).0.as_deref(), Some("image_urls"));
        let e = ApiError::InsufficientCredits {
            msg: "imagine: the account's credits do not cover this operation, which costs 1".into(),
        };
        assert_eq!(refusal_field(&e).0.as_deref(), Some("imagine"));
    }

    #[test]
    fn arrows_have_names() {
        assert_eq!(button_name("🔄"), "Reroll");
        assert_eq!(button_name("⬅️"), "Pan left");
        assert_eq!(button_name("U2"), "U2");
    }
}
