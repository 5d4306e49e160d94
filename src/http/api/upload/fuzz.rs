//! Property tests over the upload's form reading: forms with the expected parts, others, broken
//! boundaries, cut and overwritten bytes. Whatever the body, the answer is the first `image` or
//! `file` part with its bytes or a 400 naming what was wrong; never a panic. The body was read
//! under its limit before this, so memory is bounded by it. `EASEL_FUZZ_CASES` sets the number.

use axum::body::Body;
use axum::extract::Request;
use proptest::prelude::*;

use super::{form_image, PARTS};
use crate::refusal::ApiError;

const BOUNDARY: &str = "XyZ-fuzz-7";

/// One part: its name (`image`, `file`, another or none), a file name or not, its bytes.
fn part() -> impl Strategy<Value = (Option<String>, bool, Vec<u8>)> {
    (
        prop_oneof![
            Just(Some("image".to_string())),
            Just(Some("file".to_string())),
            "[a-z\"\\\\;= ]{0,8}".prop_map(Some),
            Just(None),
        ],
        any::<bool>(),
        proptest::collection::vec(any::<u8>(), 0..64),
    )
}

fn form(parts: &[(Option<String>, bool, Vec<u8>)], close: bool) -> Vec<u8> {
    let mut body = Vec::new();
    for (name, file, data) in parts {
        body.extend_from_slice(
            format!("--{BOUNDARY}\r\nContent-Disposition: form-data").as_bytes(),
        );
        if let Some(name) = name {
            body.extend_from_slice(format!("; name=\"{name}\"").as_bytes());
        }
        if *file {
            body.extend_from_slice(b"; filename=\"a.png\"\r\nContent-Type: image/png");
        }
        body.extend_from_slice(b"\r\n\r\n");
        body.extend_from_slice(data);
        body.extend_from_slice(b"\r\n");
    }
    if close {
        body.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    }
    body
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
    })
}

proptest! {
    #![proptest_config(crate::domain::fuzz_config())]

    #[test]
    fn any_form_gives_its_image_part_or_a_400(
        parts in proptest::collection::vec(part(), 0..4),
        close in proptest::bool::weighted(0.8),
        cut in proptest::option::weighted(0.2, any::<u16>()),
        flip in proptest::option::weighted(0.2, (any::<u16>(), any::<u8>())),
        content_type in prop_oneof![
            8 => Just(format!("multipart/form-data; boundary={BOUNDARY}")),
            1 => Just("multipart/form-data".to_string()),
            1 => "multipart/form-data; boundary=[ -~]{0,80}",
        ],
    ) {
        let mut body = form(&parts, close);
        if let Some(cut) = cut {
            body.truncate(cut as usize % (body.len() + 1));
        }
        if let (Some((at, b)), false) = (flip, body.is_empty()) {
            let i = at as usize % body.len();
            body[i] = b;
        }
        let Ok(req) = Request::builder()
            .header("content-type", content_type.as_str())
            .body(Body::from(body.clone()))
        else {
            return Ok(());
        };
        match runtime().block_on(form_image(req)) {
            Ok((name, data)) => {
                prop_assert!(PARTS.contains(&name.as_str()));
                prop_assert!(!data.is_empty());
                prop_assert!(body.windows(data.len()).any(|w| w == &data[..]));
            }
            Err(ApiError::BadRequest { code, .. }) => {
                prop_assert!(matches!(code, "invalid_body" | "missing_field"), "{code}");
            }
            Err(other) => prop_assert!(false, "not a 400: {other:?}"),
        }
    }
}
