//! The openai adapter's settings and sizes, which need no server; its requests and answers are
//! tested against the shared OpenAI mock in tests/it/backends/openai_adapter.rs.

use std::time::Duration;

use serde_json::json;

use super::family::Family;
use super::*;

fn config(url: &str, model: Option<&str>, key: Option<&str>) -> BackendConfig {
    let mut config: BackendConfig = serde_json::from_value(json!({
        "name": "oa",
        "kind": "openai",
        "url": url,
    }))
    .unwrap();
    config.model = model.map(str::to_string);
    config.api_key = key.map(str::to_string);
    config.timeout = Duration::from_secs(20);
    config
}

fn backend(url: &str, model: Option<&str>, key: Option<&str>) -> OpenAi {
    OpenAi::new(&config(url, model, key)).unwrap()
}

#[test]
fn supports_what_the_model_and_the_settings_allow() {
    let backend = backend("http://127.0.0.1:9/v1", Some("gpt-image-1"), None);
    for &kind in OpKind::ALL {
        let expected = matches!(
            kind,
            OpKind::Imagine
                | OpKind::Reroll
                | OpKind::Variations
                | OpKind::Pan
                | OpKind::Outpaint
                | OpKind::Inpaint
                | OpKind::Blend
        );
        assert_eq!(backend.supports(kind), expected, "{kind}");
    }
    let mut limited = config("http://127.0.0.1:9/v1", None, None);
    limited.operations = Some(vec!["imagine".into()]);
    let limited = OpenAi::new(&limited).unwrap();
    assert!(limited.supports(OpKind::Imagine));
    assert!(!limited.supports(OpKind::Pan) && !limited.supports(OpKind::Reroll));
    assert_eq!(limited.name(), "oa");
}

#[test]
fn new_names_the_setting_that_cannot_work() {
    let mut unset = config("http://127.0.0.1:9/v1", None, None);
    unset.api_key_env = Some("EASEL_TEST_OPENAI_KEY_NEVER_SET".into());
    let error = OpenAi::new(&unset).err().unwrap();
    assert!(error.contains("backends.oa.api_key_env"), "{error}");
    assert!(error.contains("EASEL_TEST_OPENAI_KEY_NEVER_SET"), "{error}");
    let bad = config("http://127.0.0.1:9/v1", None, Some("sk-\nbroken"));
    let error = OpenAi::new(&bad).err().unwrap();
    assert!(error.contains("backends.oa.api_key") && !error.contains("broken"));
    let mut no_url = config("http://127.0.0.1:9/v1", None, None);
    no_url.url = None;
    assert!(OpenAi::new(&no_url)
        .err()
        .unwrap()
        .contains("backends.oa.url"));
}

#[test]
fn sizes_follow_the_model() {
    assert_eq!(Family::of(Some("dall-e-2")).size(16, 9, 1024), (1024, 1024));
    assert_eq!(Family::of(Some("dall-e-2")).size(1, 1, 300), (512, 512));
    assert_eq!(Family::of(Some("dall-e-3")).size(9, 16, 64), (1024, 1792));
    assert_eq!(Family::of(Some("dall-e-3")).size(5, 4, 64), (1024, 1024));
    assert_eq!(Family::of(Some("gpt-image-1")).size(2, 3, 64), (1024, 1536));
    assert_eq!(
        Family::of(Some("gpt-image-1-mini")).size(3, 2, 64),
        (1536, 1024)
    );
    assert_eq!(Family::of(None).size(1, 1, 1000), (1024, 1024));
    assert_eq!(Family::of(Some("flux")).size(16, 9, 1024), (1024, 576));
}
