//! API keys: generation, hashing, and the checks of a presented key against the store (the
//! HTTP layer's extractors, `http::extract`, read them from requests).
//!
//! A key is `easel_` followed by 32 base64url characters (192 random bits). Only its SHA-256 hash
//! is stored: the key has full entropy, so a slow password hash adds nothing but latency. Keys
//! are sent raw in `Authorization`; anything else there (a `Bearer ` prefix included) is refused
//! with 401 and the body `{}` before the request is looked at further.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};

use crate::refusal::ApiError;
use crate::store::{now_ms, Account, KeyOwner, LiveKey, SharedStore, Store, KEY_TOUCH_EVERY_MS};
use crate::telemetry::request;

const KEY_PREFIX: &str = "easel_";
const KEY_RANDOM_BYTES: usize = 24;
const KEY_LEN: usize = KEY_PREFIX.len() + 32;
/// How many characters of a key `keys list` shows.
const SHOWN_PREFIX_LEN: usize = KEY_PREFIX.len() + 6;

/// A freshly made key: the secret (shown once) and what is stored about it.
pub struct NewKey {
    pub secret: String,
    pub prefix: String,
    pub hash: [u8; 32],
}

pub fn generate_key() -> NewKey {
    let mut bytes = [0u8; KEY_RANDOM_BYTES];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    let secret = format!("{KEY_PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes));
    NewKey {
        prefix: secret[..SHOWN_PREFIX_LEN].to_string(),
        hash: hash_key(&secret),
        secret,
    }
}

pub fn hash_key(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

/// Whether a header value has the shape of a key (no lookup).
pub fn well_formed(key: &str) -> bool {
    key.len() == KEY_LEN
        && key.starts_with(KEY_PREFIX)
        && key[KEY_PREFIX.len()..]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Create a key for an account and return its secret.
pub async fn create_key(store: &dyn Store, account_id: &str, name: &str) -> anyhow::Result<String> {
    let key = generate_key();
    store
        .insert_api_key(account_id, name, &key.prefix, &key.hash)
        .await?;
    Ok(key.secret)
}

/// The live key's owner, looked up in the store; 401 when there is none, 402
/// `account_expired` when its account's `expires_at` has passed.
pub async fn look_up(store: &dyn Store, hash: &[u8; 32]) -> Result<KeyOwner, ApiError> {
    let owner = store.key_owner(hash).await?.ok_or(ApiError::Unauthorized)?;
    if owner.account.expired(now_ms()) {
        return Err(ApiError::AccountExpired);
    }
    Ok(owner)
}

/// Record the key's use, at most once per `KEY_TOUCH_EVERY_MS`, off the request's path.
pub fn touch(store: &SharedStore, key_id: &str, last_used_at: Option<i64>) {
    let now = now_ms();
    if last_used_at.is_some_and(|t| now - t <= KEY_TOUCH_EVERY_MS) {
        return;
    }
    let store = store.clone();
    let key_id = key_id.to_string();
    tokio::spawn(async move {
        if let Err(e) = store.touch_api_key(&key_id, now).await {
            tracing::warn!(error = %e, "could not record key use");
        }
    });
}

/// The authenticated caller, looked up before the handler runs. The first extractor of every API
/// handler but the hot ones, which take a [`PresentedKey`].
pub struct Caller(pub Account);

/// A key of the right shape, not yet checked against the store. Submits and reads check it in
/// the same statement that does their work (one round trip to the database instead of two), so
/// a revoked key is refused at once however it was revoked. Every other answer waits for
/// [`PresentedKey::confirm`], so that 401 still comes before anything else.
pub struct PresentedKey(pub [u8; 32]);

/// How long a key found live is taken as live without asking the store again, by
/// [`PresentedKey::admit`] only: the statement that does a request's work checks the key itself.
pub const LIVE_KEY_TTL: Duration = Duration::from_secs(5);
/// Most keys [`LiveKeys`] remembers; past that it starts again empty.
const LIVE_KEYS_MAX: usize = 10_000;

/// Keys found live a moment ago. Only keys the store has just confirmed go in, so no made-up key
/// can fill it.
#[derive(Default)]
pub struct LiveKeys(Mutex<HashMap<[u8; 32], Instant>>);

impl LiveKeys {
    fn recent(&self, key: &[u8; 32]) -> bool {
        let seen = self.0.lock().expect("not poisoned");
        seen.get(key).is_some_and(|at| at.elapsed() < LIVE_KEY_TTL)
    }

    fn note(&self, key: [u8; 32]) {
        let mut seen = self.0.lock().expect("not poisoned");
        if seen.len() >= LIVE_KEYS_MAX {
            seen.clear();
        }
        seen.insert(key, Instant::now());
    }
}

impl PresentedKey {
    /// Refuse a key that is not live before the request's body is read, so that no caller
    /// without a key can make easel read and parse a body. A key confirmed in the last
    /// [`LIVE_KEY_TTL`] is not looked up again: the submit's own statement still refuses a key
    /// revoked in the meantime.
    pub async fn admit(&self, store: &SharedStore, live: &LiveKeys) -> Result<(), ApiError> {
        if live.recent(&self.0) {
            return Ok(());
        }
        self.confirm(store).await?;
        live.note(self.0);
        Ok(())
    }

    /// Check the key against the store; 401 when it is not live.
    pub async fn confirm(&self, store: &SharedStore) -> Result<(), ApiError> {
        let owner = look_up(store.as_ref(), &self.0).await?;
        request::note_account(&owner.account.id);
        Ok(())
    }

    /// The statement that did the work found the key live: note whose it is and its use.
    pub fn used(&self, store: &SharedStore, key: &LiveKey) {
        touch(store, &key.key_id, key.last_used_at);
        request::note_account(&key.account_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_well_formed_random_and_hashed() {
        let a = generate_key();
        let b = generate_key();
        assert!(well_formed(&a.secret), "{}", a.secret);
        assert_ne!(a.secret, b.secret);
        assert_eq!(a.hash, hash_key(&a.secret));
        assert!(a.secret.starts_with(&a.prefix));
        assert!(!well_formed(&format!("Bearer {}", a.secret)));
        assert!(!well_formed(&a.secret[1..]));
        assert!(!well_formed(&format!("{}x", a.secret)));
        assert!(!well_formed(&a.secret.replace('_', "!")));
    }
}
