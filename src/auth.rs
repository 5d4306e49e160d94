//! API keys: generation, hashing, and the request extractor.
//!
//! A key is `easel_` followed by 32 base64url characters (192 random bits). Only its SHA-256 hash
//! is stored: the key has full entropy, so a slow password hash adds nothing but latency. Keys
//! are sent raw in `Authorization`; anything else there (a `Bearer ` prefix included) is refused
//! with 401 and the body `{}` before the request is looked at further.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use quick_cache::sync::Cache;
use rand::RngCore;
use sha2::{Digest, Sha256};

use crate::api::{ApiError, AppState};
use crate::store::{now_ms, Account, KeyOwner, Store};

const KEY_PREFIX: &str = "easel_";
const KEY_RANDOM_BYTES: usize = 24;
const KEY_LEN: usize = KEY_PREFIX.len() + 32;
/// How many characters of a key `keys list` shows.
const SHOWN_PREFIX_LEN: usize = KEY_PREFIX.len() + 6;
/// `last_used_at` is written at most this often per key, to keep reads free of writes.
const TOUCH_EVERY_MS: i64 = 60_000;

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
pub async fn create_key(store: &Store, account_id: &str, name: &str) -> anyhow::Result<String> {
    let key = generate_key();
    store
        .insert_api_key(account_id, name, &key.prefix, &key.hash)
        .await?;
    Ok(key.secret)
}

/// Keys seen recently, by hash: the key's id and its account. Only submits trust an entry without
/// a lookup, and a submit's insert checks the key again in its own transaction (see
/// `Store::insert_task`), so a revoked key is refused at once all the same, whichever process
/// revoked it. Bounded; the least used entries go first.
#[derive(Clone)]
pub struct KeyCache(Arc<Cache<[u8; 32], Arc<CachedKey>>>);

/// Most keys the cache holds.
const KEY_CACHE_ENTRIES: usize = 10_000;

struct CachedKey {
    key_id: String,
    account_id: String,
    /// When `last_used_at` was last written (or read), Unix ms.
    touched_at: AtomicI64,
}

impl Default for KeyCache {
    fn default() -> Self {
        KeyCache(Arc::new(Cache::new(KEY_CACHE_ENTRIES)))
    }
}

impl KeyCache {
    fn remember(&self, hash: [u8; 32], owner: &KeyOwner) -> Arc<CachedKey> {
        match self.0.get(&hash) {
            Some(entry) if entry.account_id == owner.account.id => entry,
            _ => {
                let entry = Arc::new(CachedKey {
                    key_id: owner.key_id.clone(),
                    account_id: owner.account.id.clone(),
                    touched_at: AtomicI64::new(owner.last_used_at.unwrap_or(0)),
                });
                self.0.insert(hash, entry.clone());
                entry
            }
        }
    }

    fn forget(&self, hash: &[u8; 32]) {
        self.0.remove(hash);
    }
}

/// The key in `Authorization`, if it has the shape of one; 401 otherwise.
fn presented_key(parts: &Parts) -> Result<[u8; 32], ApiError> {
    parts
        .headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .filter(|k| well_formed(k))
        .map(hash_key)
        .ok_or(ApiError::Unauthorized)
}

/// The live key's owner, looked up in the store; 401 when there is none.
async fn look_up(state: &AppState, hash: [u8; 32]) -> Result<(KeyOwner, Arc<CachedKey>), ApiError> {
    match state.store.key_owner(&hash).await? {
        Some(owner) => {
            let entry = state.keys.remember(hash, &owner);
            Ok((owner, entry))
        }
        None => {
            state.keys.forget(&hash);
            Err(ApiError::Unauthorized)
        }
    }
}

/// Record the key's use, at most once per `TOUCH_EVERY_MS`, off the request's path.
fn touch(state: &AppState, entry: &CachedKey) {
    let now = now_ms();
    let last = entry.touched_at.load(Ordering::Relaxed);
    if now - last <= TOUCH_EVERY_MS
        || entry
            .touched_at
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
    {
        return;
    }
    let store = state.store.clone();
    let key_id = entry.key_id.clone();
    tokio::spawn(async move {
        if let Err(e) = store.touch_api_key(&key_id, now).await {
            tracing::warn!(error = %e, "could not record key use");
        }
    });
}

/// The authenticated caller, checked against the store on every request. Use it as the first
/// extractor of every API handler but `imagine` (see [`Submitter`]).
pub struct Caller(pub Account);

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let hash = presented_key(parts)?;
        let (owner, entry) = look_up(state, hash).await?;
        touch(state, &entry);
        tracing::Span::current().record("account", owner.account.id.as_str());
        Ok(Caller(owner.account))
    }
}

/// The caller of a submit: the key's account, from [`KeyCache`] when the key was seen before,
/// so a submit makes no read of its own. Such a key is not yet confirmed live: the insert checks
/// it (`Store::insert_task`), and every other answer must wait for [`Submitter::confirm`], so
/// that 401 still comes before anything else.
pub struct Submitter {
    pub key_hash: [u8; 32],
    pub account_id: String,
    confirmed: bool,
}

impl Submitter {
    /// Check a key that came from the cache against the store; 401 when it is no longer live.
    pub async fn confirm(&self, state: &AppState) -> Result<(), ApiError> {
        if !self.confirmed {
            look_up(state, self.key_hash).await?;
        }
        Ok(())
    }

    /// The insert found the key revoked.
    pub fn revoked(&self, state: &AppState) -> ApiError {
        state.keys.forget(&self.key_hash);
        ApiError::Unauthorized
    }
}

impl FromRequestParts<AppState> for Submitter {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let key_hash = presented_key(parts)?;
        let (entry, confirmed) = match state.keys.0.get(&key_hash) {
            Some(entry) => (entry, false),
            None => (look_up(state, key_hash).await?.1, true),
        };
        touch(state, &entry);
        tracing::Span::current().record("account", entry.account_id.as_str());
        Ok(Submitter {
            key_hash,
            account_id: entry.account_id.clone(),
            confirmed,
        })
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
