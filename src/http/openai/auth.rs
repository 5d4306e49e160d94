//! The caller of an OpenAI route: `Authorization: Bearer <easel API key>` (what every OpenAI
//! SDK sends), or the raw key as easel's own routes take it. Checked before any byte of the body
//! is read, under the plan's request rate limits as every authenticated request.

use axum::extract::FromRequestParts;
use axum::http::header;
use axum::http::request::Parts;

use super::error::OpenAiError;
use crate::auth::{self, PresentedKey};
use crate::http::state::AppState;
use crate::refusal::ApiError;
use crate::store::Account;

/// The key presented and the account it belongs to (live, not expired).
pub struct OpenAiCaller {
    pub key: PresentedKey,
    pub account: Account,
}

/// The key in `Authorization`, with or without `Bearer `, if it has the shape of one.
fn presented(parts: &Parts) -> Option<[u8; 32]> {
    let value = parts
        .headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .trim();
    let key = match value.split_once(' ') {
        Some((scheme, key)) if scheme.eq_ignore_ascii_case("bearer") => key.trim(),
        Some(_) => return None,
        None => value,
    };
    auth::well_formed(key).then(|| auth::hash_key(key))
}

impl FromRequestParts<AppState> for OpenAiCaller {
    type Rejection = OpenAiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, OpenAiError> {
        let hash = presented(parts).ok_or(ApiError::Unauthorized)?;
        let owner = crate::http::extract::owner_of(state, &hash).await?;
        Ok(OpenAiCaller {
            key: PresentedKey(hash),
            account: owner.account,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(value: &str) -> Parts {
        let req = axum::http::Request::get("/v1/models")
            .header(header::AUTHORIZATION, value)
            .body(())
            .unwrap();
        req.into_parts().0
    }

    #[test]
    fn bearer_or_raw_keys_are_read() {
        let key = format!("easel_{}", "a".repeat(32));
        assert!(auth::well_formed(&key), "the test key has a key's shape");
        let hash = Some(auth::hash_key(&key));
        assert_eq!(presented(&parts(&key)), hash);
        assert_eq!(presented(&parts(&format!("Bearer {key}"))), hash);
        assert_eq!(presented(&parts(&format!("bearer  {key}"))), hash);
        assert_eq!(presented(&parts(&format!("Basic {key}"))), None);
        assert_eq!(presented(&parts("Bearer sk-proj-abc")), None);
    }
}
