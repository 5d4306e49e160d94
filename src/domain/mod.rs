//! The task model: statuses and their transitions, operations and their outputs, and the
//! validated values a task is made of. Validation errors are short phrases without the field
//! name; the API layer prefixes the field.

pub mod account_webhook;
pub mod actions;
pub mod extras;
pub mod image_prompts;
pub mod moderation;
mod names;
pub mod operation;
pub mod output;
pub mod parameters;
pub mod permutations;
mod policy;
mod result;
mod retrying;
pub mod schema;
pub mod settings;
mod task;
pub mod time;
pub mod webhook_events;
pub mod wire;

pub use extras::{Extras, Metadata};
pub use names::Named;
pub use operation::{OpKind, Operation, Shape};
pub use output::Output;
pub use parameters::{prompt_text, Parameters};
pub use policy::ContentPolicy;
pub use result::{Outcome, PayloadHead};
pub use retrying::{Retrying, RETRY_ERROR_MAX_CHARS};
pub use settings::Settings;
pub use task::{check_text, AspectRatio, ProcessMode, Prompt, TaskStatus, PROMPT_MAX_CHARS};
pub use time::rfc3339;
pub use webhook_events::{WebhookEvent, WebhookEvents};

/// The settings of every property test of a parser: as many inputs as `EASEL_FUZZ_CASES` says
/// (the benchmark runs a million), 2,000 by default, and no file of past failures.
#[cfg(test)]
pub(crate) fn fuzz_config() -> proptest::test_runner::Config {
    let cases = std::env::var("EASEL_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000);
    proptest::test_runner::Config {
        cases,
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    }
}

/// Any JSON value, its objects' keys in the order generated (neither sorted nor repeated), for
/// the property tests of what reads or writes JSON.
#[cfg(test)]
pub(crate) fn any_json() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
    use proptest::prelude::*;
    use serde_json::Value;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        "\\PC{0,20}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            proptest::collection::vec(("\\PC{0,8}", inner), 0..8)
                .prop_map(|pairs| Value::Object(pairs.into_iter().collect())),
        ]
    })
}
