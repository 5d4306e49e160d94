//! The key the dashboard's studio submits with, one per account.
//!
//! Every submit path (its checks, its one statement that charges credits, counts the quota and
//! stores the task) takes an API key's hash. Rather than a second path keyed by account, the
//! studio submits with the account's own *studio key*: an `api_keys` row whose hash is
//! SHA-256 of a fixed label and the account id. No secret hashes to it (finding one is finding
//! a SHA-256 preimage), and the API only ever hashes what a caller presents, so no request can
//! use it; only the dashboard, for a signed-in account, names it. Credits, plans, quotas,
//! expiry and a disabled account apply exactly as to the account's other keys.

use std::collections::HashSet;
use std::sync::{LazyLock, Mutex};

use sha2::{Digest, Sha256};

use crate::store::{Store, StoreResult};

/// The stored prefix of every studio key: no generated key has it (theirs start `easel_`), and
/// the account's key list leaves it out.
pub const STUDIO_KEY_PREFIX: &str = "studio";
/// Its name where operators list every key (`easel keys list`).
pub const STUDIO_KEY_NAME: &str = "Studio (dashboard submits)";
/// Accounts whose studio key this node has made sure of; past this many it starts again empty.
const ENSURED_MAX: usize = 10_000;

static ENSURED: LazyLock<Mutex<HashSet<String>>> = LazyLock::new(|| Mutex::new(HashSet::new()));

/// The hash of `account_id`'s studio key.
pub fn studio_key_hash(account_id: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"easel studio key\n");
    h.update(account_id.as_bytes());
    h.finalize().into()
}

/// The hash of `account_id`'s studio key, its row made first if this node has not yet seen it
/// (one write per account and node; the row is kept as it is if it exists).
pub async fn studio_key(store: &dyn Store, account_id: &str) -> StoreResult<[u8; 32]> {
    let hash = studio_key_hash(account_id);
    let known = ENSURED.lock().expect("not poisoned").contains(account_id);
    if !known {
        store
            .ensure_api_key(account_id, STUDIO_KEY_NAME, STUDIO_KEY_PREFIX, &hash)
            .await?;
        let mut seen = ENSURED.lock().expect("not poisoned");
        if seen.len() >= ENSURED_MAX {
            seen.clear();
        }
        seen.insert(account_id.to_string());
    }
    Ok(hash)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_account_has_its_own_studio_key() {
        assert_eq!(studio_key_hash("a"), studio_key_hash("a"));
        assert_ne!(studio_key_hash("a"), studio_key_hash("b"));
    }
}
