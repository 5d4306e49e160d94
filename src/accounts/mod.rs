//! What signing in needs above the store, in one place for the dashboard and the command line:
//! the rules for emails and passwords, password hashing (argon2id), session tokens, and (in
//! [`throttle`]) the limits on signing in and up.
//!
//! Passwords are hashed with argon2id (the `argon2` crate's defaults: 19 MiB, 2 passes, one
//! lane) into a PHC string that carries its own salt and parameters, so they can be raised later
//! without invalidating stored hashes. Hashing takes tens of milliseconds of CPU on purpose, so
//! it runs on the blocking pool, never on the async workers.

use std::time::Duration;

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};

use crate::store::{now_ms, Store};

pub mod throttle;

/// How many characters (not bytes) a password may have. The upper bound keeps one hash's cost
/// bounded; there is no rule on which characters, as long passphrases are the better passwords.
pub const PASSWORD_CHARS: std::ops::RangeInclusive<usize> = 10..=1024;
/// Longest email accepted (RFC 5321's path limit).
pub const EMAIL_MAX_CHARS: usize = 254;

/// Longest API key name, in characters.
pub const KEY_NAME_MAX_CHARS: usize = 64;

/// A key's name as stored (trimmed), if it is 1 to [`KEY_NAME_MAX_CHARS`] characters without
/// control characters.
pub fn key_name_rules(name: &str) -> Result<String, String> {
    let name = name.trim();
    if name.is_empty() {
        return Err("name: must not be empty".into());
    }
    if name.chars().count() > KEY_NAME_MAX_CHARS {
        return Err(format!(
            "name: must have at most {KEY_NAME_MAX_CHARS} characters"
        ));
    }
    if name.chars().any(char::is_control) {
        return Err("name: must not hold control characters".into());
    }
    Ok(name.to_string())
}

/// Whether `password` may be set; the reason when not, to show as it is.
pub fn password_rules(password: &str) -> Result<(), String> {
    let n = password.chars().count();
    if n < *PASSWORD_CHARS.start() {
        return Err(format!(
            "password: must have at least {} characters",
            PASSWORD_CHARS.start()
        ));
    }
    if n > *PASSWORD_CHARS.end() {
        return Err(format!(
            "password: must have at most {} characters",
            PASSWORD_CHARS.end()
        ));
    }
    Ok(())
}

/// The email as it is stored (trimmed), if it has the shape of one: something, one `@`,
/// something with a dot, no spaces or control characters, at most [`EMAIL_MAX_CHARS`].
/// Deliverability is not checked.
pub fn normalize_email(email: &str) -> Result<String, String> {
    let email = email.trim();
    let bad = || Err("email: must be an address like name@example.com".to_string());
    if email.is_empty() || email.chars().count() > EMAIL_MAX_CHARS {
        return bad();
    }
    if email.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return bad();
    }
    match email.split_once('@') {
        Some((local, domain))
            if !local.is_empty()
                && !domain.contains('@')
                && domain.contains('.')
                && !domain.starts_with('.')
                && !domain.ends_with('.') =>
        {
            Ok(email.to_string())
        }
        // `admin@localhost`, the first account's address, has no dot and stays valid.
        Some((local, "localhost")) if !local.is_empty() => Ok(email.to_string()),
        _ => bad(),
    }
}

/// An argon2id PHC string for `password`, computed on the blocking pool.
pub async fn hash_password(password: String) -> anyhow::Result<String> {
    tokio::task::spawn_blocking(move || hash_password_now(&password)).await?
}

fn hash_password_now(password: &str) -> anyhow::Result<String> {
    let mut salt = [0u8; 16];
    rand::rngs::OsRng.fill_bytes(&mut salt);
    let salt = SaltString::encode_b64(&salt).map_err(|e| anyhow::anyhow!("salt: {e}"))?;
    Ok(Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map_err(|e| anyhow::anyhow!("hashing the password: {e}"))?
        .to_string())
}

/// Whether `password` matches the PHC string `hash`, computed on the blocking pool. A hash that
/// cannot be read matches nothing.
pub async fn verify_password(password: String, hash: String) -> bool {
    tokio::task::spawn_blocking(move || {
        PasswordHash::new(&hash)
            .map(|parsed| {
                Argon2::default()
                    .verify_password(password.as_bytes(), &parsed)
                    .is_ok()
            })
            .unwrap_or(false)
    })
    .await
    .unwrap_or(false)
}

/// Spend about as long as checking a password, for a sign-in whose email has no account (or no
/// password), so that timing does not tell which emails exist.
pub async fn verify_nothing(password: String) {
    static DUMMY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let hash = match DUMMY.get() {
        Some(hash) => hash.clone(),
        None => match hash_password("not a password of anyone".into()).await {
            Ok(hash) => DUMMY.get_or_init(|| hash).clone(),
            Err(_) => return,
        },
    };
    verify_password(password, hash).await;
}

/// A new session: the token for the cookie (32 random bytes, base64url) and its SHA-256, which is
/// all the store keeps.
pub fn new_session_token() -> (String, [u8; 32]) {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    let token = URL_SAFE_NO_PAD.encode(bytes);
    let hash = session_token_hash(&token);
    (token, hash)
}

/// What the store keys a session by.
pub fn session_token_hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// How often an API node deletes expired sessions and idempotency keys.
pub const SWEEP_EVERY: Duration = Duration::from_secs(600);

/// Delete expired sessions (lookups refuse them anyway; this keeps the table small). Every API
/// node does it every [`SWEEP_EVERY`]; the deletes are idempotent.
pub async fn forget_expired_sessions(store: &dyn Store) {
    match store.delete_expired_sessions(now_ms()).await {
        Ok(0) => {}
        Ok(n) => tracing::debug!(sessions = n, "expired sessions deleted"),
        Err(e) => tracing::warn!(error = %e, "could not delete expired sessions"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_follow_the_rules() {
        assert!(password_rules("short").is_err());
        assert!(
            password_rules(&"é".repeat(9)).is_err(),
            "characters, not bytes"
        );
        assert!(password_rules(&"é".repeat(10)).is_ok());
        assert!(password_rules(&"x".repeat(1024)).is_ok());
        let e = password_rules(&"x".repeat(1025)).unwrap_err();
        assert!(e.starts_with("password:"), "{e}");
    }

    #[test]
    fn key_names_are_trimmed_and_bounded() {
        assert_eq!(key_name_rules("  laptop ").unwrap(), "laptop");
        assert!(key_name_rules("   ").is_err());
        assert!(key_name_rules(&"k".repeat(64)).is_ok());
        assert!(key_name_rules(&"k".repeat(65)).is_err());
        assert!(key_name_rules("a\nb").is_err());
    }

    #[test]
    fn emails_are_trimmed_and_checked() {
        assert_eq!(
            normalize_email("  Ann@Example.com ").unwrap(),
            "Ann@Example.com"
        );
        assert!(normalize_email("admin@localhost").is_ok());
        for bad in [
            "",
            "ann",
            "ann@",
            "@x.com",
            "a b@x.com",
            "a@b@x.com",
            "a@x.",
            "a@com",
        ] {
            assert!(normalize_email(bad).is_err(), "{bad}");
        }
        assert!(normalize_email(&format!("{}@x.com", "a".repeat(250))).is_err());
    }

    #[tokio::test]
    async fn a_hash_verifies_its_password_only() {
        let hash = hash_password("correct horse battery".into()).await.unwrap();
        assert!(hash.starts_with("$argon2id$"), "{hash}");
        assert!(verify_password("correct horse battery".into(), hash.clone()).await);
        assert!(!verify_password("correct horse battery!".into(), hash.clone()).await);
        assert!(!verify_password("x".into(), "not a hash".into()).await);
        let again = hash_password("correct horse battery".into()).await.unwrap();
        assert_ne!(hash, again, "each hash has its own salt");
    }

    #[test]
    fn session_tokens_are_random_and_only_their_hash_is_kept() {
        let (a, ha) = new_session_token();
        let (b, _) = new_session_token();
        assert_ne!(a, b);
        assert_eq!(a.len(), 43);
        assert_eq!(ha, session_token_hash(&a));
    }
}
