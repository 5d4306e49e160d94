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
    let mut hash = Sha256::new();
    hash.update(name.as_bytes());
    hash.update([0]);
    serde_json::to_writer(&mut hash, &Canonical::Object(body)).expect("a JSON value serializes");
    hash.finalize().into()
}

/// A JSON value written with every object's keys in `str` order, wherever it is nested: what
/// `serde_json` writes of the value after `Value::sort_all_objects`, without the copy of the
/// whole body that sorting in place would need (`preserve_order` keeps objects as received).
enum Canonical<'a> {
    Object(&'a Map<String, Value>),
    Value(&'a Value),
}

impl serde::Serialize for Canonical<'_> {
    fn serialize<S: serde::Serializer>(&self, out: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        match *self {
            Canonical::Object(map) | Canonical::Value(Value::Object(map)) => {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
                let mut object = out.serialize_map(Some(entries.len()))?;
                for (key, value) in entries {
                    object.serialize_entry(key, &Canonical::Value(value))?;
                }
                object.end()
            }
            Canonical::Value(Value::Array(items)) => {
                let mut array = out.serialize_seq(Some(items.len()))?;
                for item in items {
                    array.serialize_element(&Canonical::Value(item))?;
                }
                array.end()
            }
            Canonical::Value(scalar) => scalar.serialize(out),
        }
    }
}

/// The (API key hash, idempotency key) pairs whose requests this node is handling, from when
/// the handler has found the API key live (before it reads the body) until the store has
/// answered.
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

/// How many keys a sweep reads per statement: each window is a short read along the primary
/// key, and a delete only where it held expired keys, so that no statement holds the table (or
/// SQLite's writer) for long.
pub const SWEEP_WINDOW: i64 = 1000;

/// Delete the idempotency keys that have expired: the whole table walked in key order, a window
/// at a time, until its end or `stop`. There is no index by expiry to read them from (it would
/// cost every keyed submit a second index write), and a walk every sweep costs a read of each
/// key held, not a write.
pub async fn forget_expired(store: &dyn Store, stop: &CancellationToken) {
    let now = now_ms();
    let mut after = (String::new(), String::new());
    let mut forgotten = 0;
    while !stop.is_cancelled() {
        match store
            .forget_expired_idempotency_keys(&after, now, SWEEP_WINDOW)
            .await
        {
            Ok(swept) => {
                forgotten += swept.forgotten;
                match swept.next {
                    Some(next) => after = next,
                    None => break,
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

    /// The fingerprint as it was first written: the body copied, sorted in place, serialized.
    /// Keys already stored were made this way, so a change must give the same bytes.
    fn fingerprint_by_sorting(name: &str, body: &Map<String, Value>) -> [u8; 32] {
        let mut canonical = Value::Object(body.clone());
        canonical.sort_all_objects();
        let mut hash = Sha256::new();
        hash.update(name.as_bytes());
        hash.update([0]);
        hash.update(serde_json::to_vec(&canonical).unwrap());
        hash.finalize().into()
    }

    #[test]
    fn the_fingerprint_is_that_of_the_sorted_copy() {
        let bodies = [
            json!({}),
            json!({"prompt": "a \"quoted\" \u{1}", "aspect_ratio": "16:9", "n": 1.5e300}),
            json!({"z": [{"b": [], "a": {}}, [{"y": 1, "x": null}], "s", -0.0, 18446744073709551615u64],
                   "a": {"c": {"f": true, "e": false}, "b": "\u{e9}"}, "": 0}),
            json!({"b": 1, "B": 2, "a\u{0}": 3, "\u{ff}": 4, "a": 5}),
        ];
        for body in &bodies {
            let body = body.as_object().unwrap();
            for name in ["imagine", BATCH] {
                assert_eq!(
                    fingerprint_of(name, body),
                    fingerprint_by_sorting(name, body),
                    "{body:?}"
                );
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(crate::domain::fuzz_config())]

        #[test]
        fn any_body_fingerprints_as_its_sorted_copy(
            pairs in proptest::collection::vec(("\\PC{0,6}", crate::domain::any_json()), 0..8)
        ) {
            let body: Map<String, Value> = pairs.into_iter().collect();
            proptest::prop_assert_eq!(
                fingerprint_of("imagine", &body),
                fingerprint_by_sorting("imagine", &body)
            );
        }
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
