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

pub mod grants;
pub mod operators;
pub mod studio;
pub mod throttle;
pub mod webhook;

/// How many characters (not bytes) a password may have. The upper bound keeps one hash's cost
/// bounded; there is no rule on which characters, as long passphrases are the better passwords.
pub const PASSWORD_CHARS: std::ops::RangeInclusive<usize> = 10..=1024;
/// The least zxcvbn score a password must have: 3, "safely unguessable" (its estimate is at
/// least 10^8 guesses), which no common password, keyboard walk, repeat or date reaches.
pub const PASSWORD_MIN_SCORE: u8 = 3;
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

/// Whether `password` may be set for the account `email`; the reason when not, to show as it
/// is. Besides its length, it must not be only spaces, and zxcvbn (Dropbox's estimator: common
/// passwords, names and words, keyboard patterns, repeats, sequences, dates, and the email's
/// own parts) must score it at least [`PASSWORD_MIN_SCORE`]. Takes a few milliseconds of CPU
/// for the longest passwords.
pub fn password_rules(password: &str, email: &str) -> Result<(), String> {
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
    if password.chars().all(char::is_whitespace) {
        return Err("password: must not be only spaces".into());
    }
    // The email, its name run together (`ann.lee` as `annlee`) and its words count as guessed.
    let email = email.trim().to_lowercase();
    let name: String = email
        .split('@')
        .next()
        .unwrap_or_default()
        .chars()
        .filter(|c| c.is_alphanumeric())
        .collect();
    let mut own: Vec<&str> = vec![&email, &name, "easel"];
    own.extend(
        email
            .split(|c: char| !c.is_alphanumeric())
            .filter(|p| p.len() > 2),
    );
    let estimate = zxcvbn::zxcvbn(password, &own);
    if (estimate.score() as u8) < PASSWORD_MIN_SCORE {
        let why = estimate
            .feedback()
            .and_then(|f| f.warning())
            .map(|w| {
                let w = w.to_string();
                let w = w.trim_end_matches('.');
                let mut c = w.chars();
                match c.next() {
                    Some(first) => format!(" ({}{})", first.to_lowercase(), c.as_str()),
                    None => String::new(),
                }
            })
            .unwrap_or_default();
        return Err(format!(
            "password: too easy to guess{why}; a few uncommon words together make a strong one"
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
        let rules = |pw: &str| password_rules(pw, "ann@example.com");
        assert!(rules("short").is_err());
        let e = rules(&"é".repeat(9)).unwrap_err();
        assert!(
            e.contains("at least 10 characters"),
            "characters, not bytes: {e}"
        );
        assert!(rules("ééé çà ñõ ü ß ø").is_ok(), "any characters");
        assert!(rules("correct horse battery staple").is_ok());
        let long: String = (0..1024)
            .map(|i| char::from(b'a' + (i * 7 % 26) as u8))
            .collect();
        assert!(rules(&long).is_ok());
        let e = rules(&"x".repeat(1025)).unwrap_err();
        assert!(e.starts_with("password:"), "{e}");
    }

    #[test]
    fn common_and_weak_passwords_are_refused_with_a_reason() {
        let rules = |pw: &str| {
            password_rules(pw, "ann.lee@example.com")
                .err()
                .unwrap_or_else(|| panic!("{pw:?} was accepted"))
        };
        assert_eq!(rules(&" ".repeat(10)), "password: must not be only spaces");
        assert_eq!(
            rules(&"\t \n".repeat(4)),
            "password: must not be only spaces"
        );
        for weak in [
            "1234567890",
            "password123",
            "qwertyuiop",
            "aaaaaaaaaaaa",
            "passwordpassword",
            "Tr0ub4dour&3",
            "ann.lee@example.com",
            "annlee2024!",
        ] {
            let e = rules(weak);
            assert!(e.starts_with("password: too easy to guess"), "{weak}: {e}");
        }
        assert!(rules("1234567890").contains("(this is a top-100 common password)"));
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
