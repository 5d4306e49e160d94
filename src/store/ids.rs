//! Public task ids. The contract makes a task id a random-looking UUID v4; the store keys tasks
//! by `seq`, their place in the order of submission. A task's id is its `seq` encrypted with a
//! key kept in the database: FF1 format-preserving encryption (NIST SP 800-38G) over the 122
//! bits a v4 UUID leaves free, so every id is a well-formed v4 UUID, ids are as hard to guess
//! as random ones without the key, and an id leads back to its row by decryption.
//!
//! Why: an index on random ids takes one insert at a random place per task, and with more
//! tasks than the page cache holds every insert dirties a page of its own, which the commit
//! writes to the log and the checkpoint writes again. On easel's schema with 200,000 tasks,
//! `synchronous = full`, batches of 64 (Python's `sqlite3`, SQLite 3.40), inserting cost 38.3
//! µs per task with a unique index on random v4 text ids and 10.0 µs with no such index; with
//! 1,000,000 tasks, 44.8 against 12.0 µs.
//!
//! Tasks stored before this scheme keep the random id they were given, in `tasks.id`; every
//! lookup tries both (see `TaskKey`).

use aes::Aes256;
use fpe::ff1::{FlexibleNumeralString, FF1};
use uuid::Uuid;

/// Bits of a v4 UUID that are not its version or variant.
const FREE_BITS: usize = 122;
/// Domain separation for the cipher, should the key ever serve something else too.
const TWEAK: &[u8] = b"easel task id";

/// Turns a task's `seq` into its public id and back. Built once per store and shared.
pub struct TaskIds {
    ff1: FF1<Aes256>,
}

impl TaskIds {
    /// A key of 32 bytes (AES-256).
    pub fn new(key: &[u8; 32]) -> Self {
        TaskIds {
            ff1: FF1::new(key, 2).expect("radix 2 is valid"),
        }
    }

    /// The public id of the task stored at `seq` (1 or more).
    pub fn id(&self, seq: i64) -> Uuid {
        let plain = to_numerals(seq as u128);
        let sealed = self
            .ff1
            .encrypt(TWEAK, &plain)
            .expect("122 binary numerals are valid for FF1");
        Uuid::from_u128(spread(from_numerals(sealed)))
    }

    /// The `seq` that `id` was made from, or None when no `seq` could have made it (a random
    /// UUID decrypts to a valid `seq` with a chance of 1 in 2^59).
    pub fn seq(&self, id: &Uuid) -> Option<i64> {
        if id.get_version_num() != 4 || id.get_variant() != uuid::Variant::RFC4122 {
            return None;
        }
        let sealed = to_numerals(gather(id.as_u128()));
        let plain = self
            .ff1
            .decrypt(TWEAK, &sealed)
            .expect("122 binary numerals are valid for FF1");
        i64::try_from(from_numerals(plain))
            .ok()
            .filter(|seq| *seq > 0)
    }
}

/// How a lookup finds a task by its public id: the `seq` the id decrypts to, and the id itself
/// for tasks stored before ids were derived from `seq`. Queries match
/// `(t.seq = :seq AND t.id IS NULL) OR t.id = :legacy`.
#[derive(Clone, Debug)]
pub struct TaskKey {
    pub seq: Option<i64>,
    pub legacy: String,
}

impl TaskIds {
    pub fn key(&self, id: &Uuid) -> TaskKey {
        TaskKey {
            seq: self.seq(id),
            legacy: id.to_string(),
        }
    }

    /// The public id of a stored row: its own id when it has one (stored before this scheme),
    /// else the one made from its `seq`.
    pub fn of_row(&self, seq: i64, legacy: Option<&str>) -> String {
        match legacy {
            Some(id) => id.to_string(),
            None => self.id(seq).to_string(),
        }
    }
}

/// The 122 free bits, most significant first, as FF1's numeral string.
fn to_numerals(value: u128) -> FlexibleNumeralString {
    let bits: Vec<u16> = (0..FREE_BITS)
        .rev()
        .map(|i| ((value >> i) & 1) as u16)
        .collect();
    FlexibleNumeralString::from(bits)
}

fn from_numerals(numerals: FlexibleNumeralString) -> u128 {
    Vec::<u16>::from(numerals)
        .into_iter()
        .fold(0u128, |acc, bit| (acc << 1) | u128::from(bit))
}

/// Place 122 bits around a UUID's version (bits 76..80, value 4) and variant (bits 62..64,
/// value 0b10).
fn spread(bits: u128) -> u128 {
    let high = bits >> 74; // 48 bits
    let mid = (bits >> 62) & 0xfff; // 12 bits
    let low = bits & ((1 << 62) - 1); // 62 bits
    (high << 80) | (0x4 << 76) | (mid << 64) | (0b10 << 62) | low
}

/// The inverse of `spread`.
fn gather(uuid: u128) -> u128 {
    let high = uuid >> 80;
    let mid = (uuid >> 64) & 0xfff;
    let low = uuid & ((1 << 62) - 1);
    (high << 74) | (mid << 62) | low
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> TaskIds {
        TaskIds::new(&[7; 32])
    }

    #[test]
    fn ids_are_v4_uuids_that_lead_back_to_their_seq() {
        let ids = ids();
        for seq in (1..2_000).chain([i64::MAX, i64::MAX - 1, 1 << 40]) {
            let id = ids.id(seq);
            assert_eq!(id.get_version_num(), 4, "{id}");
            assert_eq!(id.get_variant(), uuid::Variant::RFC4122, "{id}");
            assert_eq!(ids.seq(&id), Some(seq), "{id}");
        }
    }

    #[test]
    fn neighbouring_seqs_give_unrelated_ids() {
        let ids = ids();
        let (a, b) = (ids.id(41).as_u128(), ids.id(42).as_u128());
        // Of the 122 free bits about half differ; far more than 20 in any case.
        assert!((a ^ b).count_ones() > 20, "{a:x} {b:x}");
    }

    #[test]
    fn another_key_gives_other_ids() {
        let other = TaskIds::new(&[8; 32]);
        assert_ne!(ids().id(1), other.id(1));
        assert_eq!(other.seq(&ids().id(1)).filter(|s| *s == 1), None);
    }

    #[test]
    fn random_and_malformed_ids_lead_nowhere() {
        let ids = ids();
        let found = (0..2_000)
            .filter(|_| ids.seq(&Uuid::new_v4()).is_some())
            .count();
        assert_eq!(found, 0);
        assert_eq!(ids.seq(&Uuid::nil()), None);
        assert_eq!(ids.seq(&Uuid::now_v7()), None);
    }

    #[test]
    fn spread_and_gather_are_inverse() {
        for bits in [
            0,
            1,
            (1u128 << 122) - 1,
            0x1234_5678_9abc_def0_1234_5678_9abc,
        ] {
            let bits = bits & ((1u128 << 122) - 1);
            assert_eq!(gather(spread(bits)), bits);
        }
    }
}
