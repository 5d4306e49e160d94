//! Idempotency keys of submits: their rules, the request's fingerprint, the node's set of keys
//! in flight, and the sweep of expired ones (the header itself is read by `http::idempotency`). What a key's stored answer makes of a submit is decided by the store,
//! in the submit's transaction (see `crate::store::Idempotency`).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use tokio_util::sync::CancellationToken;

use crate::domain::OpKind;
use crate::refusal::ApiError;
use crate::store::{now_ms, Store};

/// Most characters of an `Idempotency-Key`.
pub const KEY_MAX_CHARS: usize = 255;

/// An `Idempotency-Key` as sent: valid when 1..=255 printable ASCII characters.
pub fn check_key(bytes: &[u8]) -> Result<String, ApiError> {
    let bad = |problem: &str| ApiError::field("Idempotency-Key", "invalid_value", problem);
    if bytes.is_empty() || bytes.len() > KEY_MAX_CHARS {
        return Err(bad("must be 1 to 255 characters"));
    }
    if !bytes.iter().all(|b| (0x20..=0x7e).contains(b)) {
        return Err(bad("must be printable ASCII characters"));
    }
    let key = std::str::from_utf8(bytes).expect("checked ASCII");
    Ok(key.to_string())
}

/// What identifies a request under its key: SHA-256 of the operation's name and the body's JSON
/// with every object's keys sorted, so the same request with its fields in another order is the
/// same request, and the same body sent to another operation is not.
pub fn fingerprint(kind: OpKind, body: &Map<String, Value>) -> [u8; 32] {
    fingerprint_of(kind.as_str(), body)
}

/// The name a batch's requests are fingerprinted under: no operation has it.
pub const BATCH: &str = "batch";

/// [`fingerprint`] of a request to the route `name` (an operation's, or [`BATCH`]).
pub fn fingerprint_of(name: &str, body: &Map<String, Value>) -> [u8; 32] {
    let mut canonical = Value::Object(body.clone());
    // `preserve_order` keeps objects in the order received; sorting makes it canonical.
    canonical.sort_all_objects();
    let mut hash = Sha256::new();
    hash.update(name.as_bytes());
    hash.update([0]);
    hash.update(serde_json::to_vec(&canonical).expect("a JSON value serializes"));
    hash.finalize().into()
}

/// The (API key hash, idempotency key) pairs whose requests this node is handling, from when
/// the header is read (before the body) until the store has answered.
#[derive(Default)]
pub struct InFlight(Mutex<HashSet<([u8; 32], String)>>);

impl InFlight {
    /// Hold the pair, or None when a request with it is in flight here.
    pub fn claim(self: &Arc<Self>, api_key: [u8; 32], key: String) -> Option<Held> {
        let pair = (api_key, key);
        let mut held = self.0.lock().expect("not poisoned");
        if !held.insert(pair.clone()) {
            return None;
        }
        Some(Held {
            set: self.clone(),
            pair,
        })
    }
}

/// A pair held in [`InFlight`]; let go when dropped, whatever became of the request.
pub struct Held {
    set: Arc<InFlight>,
    pair: ([u8; 32], String),
}

impl Held {
    pub fn key(&self) -> &str {
        &self.pair.1
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Ok(mut held) = self.set.0.lock() {
            held.remove(&self.pair);
        }
    }
}

/// Most expired keys one statement deletes: a sweep deletes in batches of this many, so that
/// no transaction holds the table (or SQLite's writer) for long.
pub const FORGET_BATCH: i64 = 1000;

/// Delete the idempotency keys that have expired, a batch at a time until none is left or
/// `stop`; each batch is a statement of its own.
pub async fn forget_expired(store: &dyn Store, stop: &CancellationToken) {
    let mut forgotten = 0;
    while !stop.is_cancelled() {
        match store
            .delete_expired_idempotency_keys(now_ms(), FORGET_BATCH)
            .await
        {
            Ok(n) => {
                forgotten += n;
                if n < FORGET_BATCH as u64 {
                    break;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not delete expired idempotency keys");
                break;
            }
        }
    }
    if forgotten > 0 {
        tracing::debug!(keys = forgotten, "expired idempotency keys deleted");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_are_one_to_255_printable_ascii_characters() {
        assert_eq!(check_key(b"a b~").unwrap(), "a b~");
        assert!(check_key("k".repeat(255).as_bytes()).is_ok());
        for bad in [
            b"".to_vec(),
            "k".repeat(256).into_bytes(),
            b"tab\there".to_vec(),
            "caf\u{e9}".as_bytes().to_vec(),
        ] {
            let e = check_key(&bad).unwrap_err().to_string();
            assert!(e.starts_with("Idempotency-Key: "), "{e}");
        }
    }

    #[test]
    fn the_fingerprint_ignores_key_order_but_not_the_operation() {
        let a = json!({"prompt": "a", "x": {"b": 1, "a": [{"d": 1, "c": 2}]}});
        let b = json!({"x": {"a": [{"c": 2, "d": 1}], "b": 1}, "prompt": "a"});
        let (a, b) = (a.as_object().unwrap(), b.as_object().unwrap());
        assert_eq!(
            fingerprint(OpKind::Imagine, a),
            fingerprint(OpKind::Imagine, b)
        );
        assert_ne!(
            fingerprint(OpKind::Imagine, a),
            fingerprint(OpKind::Shorten, a)
        );
        let c = json!({"prompt": "b", "x": {"b": 1, "a": [{"d": 1, "c": 2}]}});
        assert_ne!(
            fingerprint(OpKind::Imagine, a),
            fingerprint(OpKind::Imagine, c.as_object().unwrap())
        );
    }

    #[test]
    fn a_held_pair_is_let_go_when_dropped() {
        let set = Arc::new(InFlight::default());
        let held = set.claim([1; 32], "k".into()).expect("free");
        assert!(set.claim([1; 32], "k".into()).is_none());
        assert!(set.claim([2; 32], "k".into()).is_some());
        drop(held);
        assert!(set.claim([1; 32], "k".into()).is_some());
    }
}
