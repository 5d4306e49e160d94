//! Public task ids. The contract makes a task id a random-looking UUID v4; the store keys tasks
//! by `seq`, their place in the order of submission. A task's id is its `seq` encrypted with a
//! key kept in the database, as a permutation of the 122 bits a v4 UUID leaves free: every id is
//! a well-formed v4 UUID, ids are as hard to guess as random ones without the key, and an id
//! leads back to its row by decryption.
//!
//! The permutation is a balanced Feistel network of 8 rounds on two 61-bit halves with AES-256
//! as the round function: the construction of FF1 (NIST SP 800-38G), specialised to this one
//! size, written here because the `fpe` crate's general FF1 was several times slower on the
//! submit path's one writer (docs/benchmarks.md; `a_hundred_thousand_ids_lead_back_to_their_seq`
//! prints what this takes). The ids handed out depend on every detail here: `an_id_never_changes`
//! pins one.
//!
//! Why not random ids: an index on random ids takes one insert at a random place per task, and
//! with more tasks than the page cache holds every insert dirties a page of its own, which the
//! commit writes to the log and the checkpoint writes again (docs/design.md, "Task ids are made
//! from `seq`", has the measured cost).
//!
//! Tasks stored before this scheme keep the random id they were given, in `tasks.id`; every
//! lookup tries both (see `TaskKey`).

use aes::cipher::{BlockCipherEncrypt, KeyInit};
use aes::Aes256;
use uuid::Uuid;

/// Bits in each half of the 122 free bits of a v4 UUID.
const HALF_BITS: u32 = 61;
const HALF_MASK: u64 = (1 << HALF_BITS) - 1;
const ROUNDS: u8 = 8;
/// Domain separation for the round function, should the key ever serve something else too.
const TWEAK: &[u8; 7] = b"task-id";

/// Turns a task's `seq` into its public id and back. Built once per store and shared.
pub struct TaskIds {
    aes: Aes256,
}

impl TaskIds {
    /// A key of 32 bytes (AES-256).
    pub fn new(key: &[u8; 32]) -> Self {
        TaskIds {
            aes: Aes256::new(key.into()),
        }
    }

    /// The public id of the task stored at `seq` (1 or more).
    pub fn id(&self, seq: i64) -> Uuid {
        Uuid::from_u128(spread(self.permute(seq as u128)))
    }

    /// The public ids of the tasks stored at `seqs`, in order: [`TaskIds::id`] of each, with
    /// each round's blocks encrypted together. The AES backend loads its round keys once per
    /// call, which for one block at a time cost more than the encryption (a group of submits
    /// asks for dozens of ids at once).
    pub fn ids(&self, seqs: &[i64]) -> Vec<Uuid> {
        let mut halves: Vec<(u64, u64)> = seqs.iter().map(|&s| halves(s as u128)).collect();
        let mut blocks = vec![aes::Block::default(); seqs.len()];
        for round in 0..ROUNDS {
            for (block, (_, right)) in blocks.iter_mut().zip(&halves) {
                *block = aes::Block::from(round_input(round, *right));
            }
            self.aes.encrypt_blocks(&mut blocks);
            for ((left, right), block) in halves.iter_mut().zip(&blocks) {
                (*left, *right) = (*right, *left ^ round_output(block));
            }
        }
        halves
            .into_iter()
            .map(|(left, right)| Uuid::from_u128(spread(joined(left, right))))
            .collect()
    }

    /// The `seq` that `id` was made from, or None when no `seq` could have made it (a random
    /// UUID decrypts to a valid `seq` with a chance of 1 in 2^59).
    pub fn seq(&self, id: &Uuid) -> Option<i64> {
        if id.get_version_num() != 4 || id.get_variant() != uuid::Variant::RFC4122 {
            return None;
        }
        i64::try_from(self.unpermute(gather(id.as_u128())))
            .ok()
            .filter(|seq| *seq > 0)
    }

    /// Round `round`'s function of one half: 61 bits of the AES encryption of the half, the
    /// round number and the tweak.
    fn round(&self, round: u8, half: u64) -> u64 {
        let mut block = aes::Block::from(round_input(round, half));
        self.aes.encrypt_block(&mut block);
        round_output(&block)
    }

    fn permute(&self, bits: u128) -> u128 {
        let (mut left, mut right) = halves(bits);
        for round in 0..ROUNDS {
            (left, right) = (right, left ^ self.round(round, right));
        }
        joined(left, right)
    }

    fn unpermute(&self, bits: u128) -> u128 {
        let (mut left, mut right) = halves(bits);
        for round in (0..ROUNDS).rev() {
            (left, right) = (right ^ self.round(round, left), left);
        }
        joined(left, right)
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
    /// What a lookup of `id` matches on.
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

/// The block a round encrypts: the half, the round number and the tweak.
fn round_input(round: u8, half: u64) -> [u8; 16] {
    let mut block = [0u8; 16];
    block[..8].copy_from_slice(&half.to_le_bytes());
    block[8] = round;
    block[9..].copy_from_slice(TWEAK);
    block
}

/// A round's function value: 61 bits of its encrypted block.
fn round_output(block: &aes::Block) -> u64 {
    let mut out = [0u8; 8];
    out.copy_from_slice(&block[..8]);
    u64::from_le_bytes(out) & HALF_MASK
}

/// The two 61-bit halves of 122 bits, high first.
fn halves(bits: u128) -> (u64, u64) {
    (
        (bits >> HALF_BITS) as u64 & HALF_MASK,
        bits as u64 & HALF_MASK,
    )
}

/// The inverse of `halves`.
fn joined(left: u64, right: u64) -> u128 {
    (u128::from(left) << HALF_BITS) | u128::from(right)
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

/// A fresh key for task ids, for a store that has none yet.
pub(crate) fn fresh_id_key() -> [u8; 32] {
    let mut fresh = [0u8; 32];
    rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut fresh);
    fresh
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
    fn ids_made_together_are_those_made_one_by_one() {
        let ids = ids();
        let seqs: Vec<i64> = (1..300).chain([i64::MAX, 1 << 40]).collect();
        let together = ids.ids(&seqs);
        assert_eq!(together.len(), seqs.len());
        for (seq, id) in seqs.iter().zip(together) {
            assert_eq!(ids.id(*seq), id, "seq {seq}");
        }
        assert!(ids.ids(&[]).is_empty());
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
    fn an_id_never_changes() {
        // Ids are kept by clients and stored before this scheme's time: the same key and seq
        // must give the same id in every release.
        assert_eq!(
            ids().id(1).to_string(),
            "720ef469-44c0-4636-bdf5-b6b2eb2590b0"
        );
    }

    #[test]
    fn a_hundred_thousand_ids_lead_back_to_their_seq() {
        let ids = ids();
        let started = std::time::Instant::now();
        let n = 100_000;
        let found = (1..=n)
            .filter(|seq| ids.seq(&ids.id(*seq)) == Some(*seq))
            .count();
        let took = started.elapsed();
        assert_eq!(found, n as usize);
        println!(
            "{:.2} µs per id and back",
            took.as_secs_f64() * 1e6 / n as f64
        );
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
