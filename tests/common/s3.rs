//! The S3-compatible test server that scripts/test.sh starts (moto), for the tests that keep
//! images in a bucket.

use std::sync::Once;

/// The server's endpoint (`EASEL_TEST_S3_ENDPOINT`), or None when there is none and the caller
/// is to skip, saying so. Under `CI=true` there must be one: the S3 tests never skip there.
pub fn endpoint() -> Option<String> {
    match std::env::var("EASEL_TEST_S3_ENDPOINT") {
        Ok(endpoint) if !endpoint.is_empty() => {
            test_credentials();
            Some(endpoint)
        }
        _ => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "EASEL_TEST_S3_ENDPOINT is not set: under CI=true the S3 tests must run \
                 (scripts/test.sh starts the server and sets it)"
            );
            None
        }
    }
}

/// The test server accepts any credentials, but without some the client would look for an
/// instance role. Set once, before any client reads them; std serialises environment access.
pub fn test_credentials() {
    static SET: Once = Once::new();
    SET.call_once(|| {
        if std::env::var_os("AWS_ACCESS_KEY_ID").is_none() {
            std::env::set_var("AWS_ACCESS_KEY_ID", "easel-test");
            std::env::set_var("AWS_SECRET_ACCESS_KEY", "easel-test");
        }
    });
}

/// A fresh, empty bucket on the test server, made with a plain S3 `PUT /{bucket}`.
pub async fn new_bucket(endpoint: &str) -> String {
    let bucket = format!("easel-test-{}", uuid::Uuid::new_v4().simple());
    let res = reqwest::Client::new()
        .put(format!("{endpoint}/{bucket}"))
        .send()
        .await
        .unwrap();
    assert!(res.status().is_success(), "creating the bucket: {res:?}");
    bucket
}
