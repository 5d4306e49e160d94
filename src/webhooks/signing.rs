//! Standard Webhooks signatures.
//!
//! An account signing secret has the text form `whsec_<base64 of the key bytes>`; the HMAC key
//! is the base64-decoded bytes after the prefix. A delivery is signed with
//! `v1,<base64 HMAC-SHA256(key, "{msg_id}.{timestamp}.{body}")>`.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use rand::rngs::OsRng;
use rand::RngCore;
use sha2::Sha256;

/// Text prefix of a signing secret.
pub const SECRET_PREFIX: &str = "whsec_";

/// Number of random key bytes in a generated secret.
const SECRET_KEY_BYTES: usize = 32;

/// Generate a fresh account signing secret: `whsec_` + base64 of 32 random bytes from the OS.
pub fn generate_secret() -> String {
    let mut key = [0u8; SECRET_KEY_BYTES];
    OsRng.fill_bytes(&mut key);
    format!("{SECRET_PREFIX}{}", STANDARD.encode(key))
}

/// Decode a `whsec_...` secret into its key bytes.
///
/// Fails when the prefix is missing, the remainder is not standard (padded) base64, or the key
/// is empty. Error messages never contain the secret.
pub fn decode_secret(secret: &str) -> Result<Vec<u8>, String> {
    let encoded = secret
        .strip_prefix(SECRET_PREFIX)
        .ok_or_else(|| format!("signing secret must start with {SECRET_PREFIX}"))?;
    if encoded.is_empty() {
        return Err("signing secret is empty".to_owned());
    }
    let key = STANDARD
        .decode(encoded)
        .map_err(|_| "signing secret is not valid base64".to_owned())?;
    if key.is_empty() {
        return Err("signing secret is empty".to_owned());
    }
    Ok(key)
}

/// Sign one delivery: `v1,<base64 HMAC-SHA256(key, "{msg_id}.{timestamp}.{body}")>`.
pub fn sign(key: &[u8], msg_id: &str, timestamp: i64, body: &[u8]) -> String {
    // HMAC accepts keys of any length (long keys are hashed, short ones padded).
    let mut mac =
        <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC-SHA256 accepts keys of any length");
    mac.update(msg_id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    format!("v1,{}", STANDARD.encode(digest))
}

#[cfg(test)]
mod tests {
    use super::*;
    use standardwebhooks::Webhook;

    fn now() -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64
    }

    fn headers(msg_id: &str, ts: i64, sig: &str) -> axum::http::HeaderMap {
        let mut h = axum::http::HeaderMap::new();
        h.insert("webhook-id", msg_id.parse().unwrap());
        h.insert("webhook-timestamp", ts.to_string().parse().unwrap());
        h.insert("webhook-signature", sig.parse().unwrap());
        h
    }

    #[test]
    fn generated_secret_has_prefix_and_decodes() {
        let secret = generate_secret();
        assert!(secret.starts_with("whsec_"), "{secret}");
        let key = decode_secret(&secret).unwrap();
        assert_eq!(key.len(), SECRET_KEY_BYTES);
        assert_ne!(generate_secret(), secret, "secrets must be random");
    }

    #[test]
    fn sign_matches_spec_example() {
        // Example from the Standard Webhooks reference libraries.
        let key = decode_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let sig = sign(
            &key,
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn sign_is_verified_by_standardwebhooks() {
        let secret = generate_secret();
        let key = decode_secret(&secret).unwrap();
        let body = br#"{"task_id":"t_123","status":"succeeded","result":{"url":"x"}}"#;
        let ts = now();
        let msg_id = "msg_2b7dQ0c3w4";
        let sig = sign(&key, msg_id, ts, body);
        assert!(sig.starts_with("v1,"));

        let verifier = Webhook::new(&secret).unwrap();
        verifier
            .verify(body, &headers(msg_id, ts, &sig))
            .expect("standardwebhooks verifies our signature");
        // And the reference implementation produces the same string.
        assert_eq!(verifier.sign(msg_id, ts, body).unwrap(), sig);

        // Tampering with any signed part fails verification.
        assert!(verifier
            .verify(b"{\"tampered\":true}", &headers(msg_id, ts, &sig))
            .is_err());
        assert!(verifier
            .verify(body, &headers("msg_other", ts, &sig))
            .is_err());
        assert!(verifier
            .verify(body, &headers(msg_id, ts - 1, &sig))
            .is_err());
        let other = Webhook::new(&generate_secret()).unwrap();
        assert!(other.verify(body, &headers(msg_id, ts, &sig)).is_err());
    }

    #[test]
    fn sign_accepts_arbitrary_key_lengths() {
        let long_key = vec![7u8; 200];
        let sig = sign(&long_key, "m", 1, b"{}");
        let verifier = Webhook::from_bytes(long_key).unwrap();
        assert_eq!(verifier.sign("m", 1, b"{}").unwrap(), sig);
    }

    #[test]
    fn decode_secret_errors() {
        let prefix = "signing secret must start with whsec_";
        let base64 = "signing secret is not valid base64";
        for (secret, error) in [
            ("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", prefix),
            ("", prefix),
            ("WHSEC_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", prefix),
            ("whsec_", "signing secret is empty"),
            ("whsec_===", base64),
            ("whsec_not base64!", base64),
            ("whsec_abc", base64),
        ] {
            assert_eq!(decode_secret(secret).unwrap_err(), error, "{secret}");
        }
        let err = decode_secret("whsec_s3cr3t-value!").unwrap_err();
        assert!(!err.contains("s3cr3t"), "error leaks the secret: {err}");
    }

    #[test]
    fn decode_secret_roundtrip() {
        assert_eq!(decode_secret("whsec_AAEC").unwrap(), vec![0u8, 1, 2]);
    }
}
