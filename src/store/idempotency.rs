//! Idempotency keys, the rules both stores share: what a submit with an `Idempotency-Key` makes of
//! the answer stored for its account and key, decided inside the submit's transaction. The SQL
//! that reads and writes the rows lives in each store.

use std::collections::HashSet;

use uuid::Uuid;

use super::task::{Idempotency, Submitted};

/// A first answer as a store's lookup finds it.
#[derive(Clone, Debug)]
pub(crate) struct StoredAnswer {
    pub fingerprint: Vec<u8>,
    pub task_id: String,
    pub status: i64,
    pub body: String,
    pub expires_at: i64,
}

/// The status of every answer a store keeps: only an accepted submit is stored.
pub(crate) const STORED_STATUS: i64 = 200;

/// The exact body of an accepted submit, as the API sends it and replays repeat it.
pub fn accepted_body(task_id: &Uuid) -> String {
    serde_json::json!({ "task_id": task_id }).to_string()
}

/// What a group of submits has made of its keys so far: an (account, key) pair goes ahead at
/// most once per group, so a second submit with it is a concurrent duplicate.
#[derive(Default)]
pub(crate) struct KeyedGroup {
    going_ahead: HashSet<(String, String)>,
}

impl KeyedGroup {
    /// The answer for a keyed submit of `account` whose stored answer (if any) is `stored`:
    /// `Some` when it is answered without storing anything (a replay, a reused key, a duplicate
    /// in this group), `None` when it goes on to the quota and, if let in, stores its answer
    /// (over an expired one).
    pub(crate) fn decide(
        &mut self,
        account: &str,
        idem: &Idempotency,
        stored: Option<&StoredAnswer>,
        now: i64,
    ) -> Option<Submitted> {
        let pair = (account.to_string(), idem.key.clone());
        if self.going_ahead.contains(&pair) {
            return Some(Submitted::IdempotencyKeyInUse);
        }
        match stored.filter(|s| s.expires_at > now) {
            Some(s) if s.fingerprint == idem.fingerprint => Some(Submitted::Replayed {
                task_id: s.task_id.clone(),
                status: u16::try_from(s.status).unwrap_or(200),
                body: s.body.clone(),
            }),
            Some(_) => Some(Submitted::IdempotencyKeyReused),
            None => {
                self.going_ahead.insert(pair);
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idem(key: &str, fingerprint: u8) -> Idempotency {
        Idempotency {
            key: key.into(),
            fingerprint: [fingerprint; 32],
            ttl_ms: 1000,
        }
    }

    fn stored(fingerprint: u8, expires_at: i64) -> StoredAnswer {
        StoredAnswer {
            fingerprint: vec![fingerprint; 32],
            task_id: "t".into(),
            status: 200,
            body: "{\"task_id\":\"t\"}".into(),
            expires_at,
        }
    }

    #[test]
    fn a_stored_answer_is_replayed_reused_or_ignored_once_expired() {
        let mut group = KeyedGroup::default();
        assert!(matches!(
            group.decide("a", &idem("k", 1), Some(&stored(1, 10)), 5),
            Some(Submitted::Replayed { status: 200, .. })
        ));
        assert_eq!(
            group.decide("a", &idem("k", 2), Some(&stored(1, 10)), 5),
            Some(Submitted::IdempotencyKeyReused)
        );
        assert_eq!(
            group.decide("a", &idem("k", 2), Some(&stored(1, 10)), 10),
            None
        );
    }

    #[test]
    fn a_pair_goes_ahead_once_per_group() {
        let mut group = KeyedGroup::default();
        assert_eq!(group.decide("a", &idem("k", 1), None, 0), None);
        assert_eq!(
            group.decide("a", &idem("k", 1), None, 0),
            Some(Submitted::IdempotencyKeyInUse)
        );
        assert_eq!(group.decide("b", &idem("k", 1), None, 0), None);
        assert_eq!(group.decide("a", &idem("j", 1), None, 0), None);
    }

    #[test]
    fn the_stored_body_is_what_the_api_answers() {
        let id = Uuid::nil();
        assert_eq!(
            accepted_body(&id),
            "{\"task_id\":\"00000000-0000-0000-0000-000000000000\"}"
        );
    }
}
