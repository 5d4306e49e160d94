//! The sdwebui adapter's settings, progress answers and ratios, which need no server; its
//! requests and answers are tested against the shared WebUI mock in
//! tests/it/backends/sdwebui_adapter.rs.

use serde_json::{json, Value};

use super::answer::*;
use super::*;

const PASSWORD: &str = "s3cret-pw";

fn config(url: &str, extra: Value) -> BackendConfig {
    let mut c = json!({
        "name": "gpu-a", "kind": "sdwebui", "url": url, "timeout": "5s",
        "username": "user", "password": PASSWORD,
    });
    for (k, v) in extra.as_object().unwrap() {
        c[k] = v.clone();
    }
    serde_json::from_value(c).unwrap()
}

#[test]
fn settings_that_cannot_work_are_refused() {
    let url = "http://127.0.0.1:7860";
    let mut c = config(url, json!({"password_env": "EASEL_TEST_SDWEBUI_UNSET"}));
    c.password = None;
    let error = SdWebUi::new(&c).err().unwrap();
    assert!(error.contains("EASEL_TEST_SDWEBUI_UNSET"), "{error}");
    let mut c = config(url, json!({}));
    c.username = None;
    assert!(SdWebUi::new(&c).err().unwrap().contains("username"));
    let mut c = config(url, json!({}));
    c.url = None;
    assert!(SdWebUi::new(&c).err().unwrap().contains("url"));
    c.url = Some("ftp://x".into());
    assert!(SdWebUi::new(&c).err().unwrap().contains("url"));
    // No credentials at all is fine.
    let mut c = config(url, json!({}));
    (c.username, c.password) = (None, None);
    assert!(SdWebUi::new(&c).is_ok());
}

#[test]
fn supports_what_the_webui_can_do_and_the_settings_allow() {
    let b = SdWebUi::new(&config("http://127.0.0.1:7860", json!({}))).unwrap();
    assert_eq!(b.name(), "gpu-a");
    assert!(b.supports(OpKind::Imagine) && b.supports(OpKind::Describe));
    assert!(!b.supports(OpKind::Blend) && !b.supports(OpKind::Faceswap));
    let only = config("http://127.0.0.1:7860", json!({"operations": ["imagine"]}));
    let b = SdWebUi::new(&only).unwrap();
    assert!(b.supports(OpKind::Imagine) && !b.supports(OpKind::Pan));
}

#[test]
fn progress_answers() {
    let p = |v: Value| progress_percent(v.to_string().as_bytes());
    assert_eq!(
        p(json!({"progress": 0.42, "state": {"job_count": 1}})),
        Some(42)
    );
    assert_eq!(
        p(json!({"progress": 1.0, "state": {"job_count": 1}})),
        Some(99)
    );
    assert_eq!(p(json!({"progress": 0.0, "state": {"job_count": 0}})), None);
    assert_eq!(p(json!({"nothing": 1})), None);
}

/// `current_image` is the preview when it is base64 of an image file; null, absent, not text
/// or garbage is none, and never a failure.
#[test]
fn progress_previews() {
    use base64::Engine as _;
    let png = crate::images::encode_png(&crate::images::RgbaImage::new(4, 4));
    let b64 = base64::engine::general_purpose::STANDARD.encode(&png);
    let image = |v: Value| current_image(v.to_string().as_bytes());
    let text = image(json!({"progress": 0.5, "current_image": b64})).unwrap();
    assert_eq!(preview_bytes(&text), Some(png.clone()));
    let data_url = format!("data:image/png;base64,{b64}");
    assert_eq!(preview_bytes(&data_url), Some(png.clone()));
    // Without its padding, and broken into lines as MIME writes base64: the same file (a byte
    // after its end when its length would need no padding; the format is read from its start).
    let mut file = png;
    if file.len() % 3 == 0 {
        file.push(0);
    }
    let padded = base64::engine::general_purpose::STANDARD.encode(&file);
    assert!(padded.ends_with('='));
    assert_eq!(
        preview_bytes(padded.trim_end_matches('=')),
        Some(file.clone())
    );
    let lines: Vec<&str> = padded
        .as_bytes()
        .chunks(76)
        .map(|line| std::str::from_utf8(line).unwrap())
        .collect();
    assert_eq!(preview_bytes(&lines.join("\r\n")), Some(file));
    assert_eq!(image(json!({"progress": 0.5, "current_image": null})), None);
    assert_eq!(image(json!({"progress": 0.5})), None);
    assert_eq!(image(json!({"current_image": 12})), None);
    assert_eq!(current_image(b"not json"), None);
    assert_eq!(preview_bytes("%%% not base64"), None);
    let not_image = base64::engine::general_purpose::STANDARD.encode(b"plain text, no image");
    assert_eq!(preview_bytes(&not_image), None);
}

#[test]
fn ratios_are_put_in_small_terms() {
    assert_eq!(simple_ratio(682, 1024), (2, 3));
    assert_eq!(simple_ratio(1024, 1024), (1, 1));
    assert_eq!(simple_ratio(1000, 999), (1, 1));
}
