//! The JSON that callers receive about a task: its record (fetch, listings, waits, cancel) and
//! its webhook body. Both are built from the same field types declared here, so that they cannot
//! say a field two ways, and a test holds the record to the OpenAPI document's `Task` schema.

use serde::Serialize;

use super::{Metadata, Parameters, Settings, WebhookEvents};

/// One follow-up a finished task offers (see `domain::actions`), ready to send as
/// `POST /api/v1/{operation}` with `body`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Action {
    pub operation: &'static str,
    /// As Midjourney labels its button.
    pub label: &'static str,
    pub body: serde_json::Value,
}

/// An image's `index` as the contract shows it: 1..=4, or a variation's strength.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum IndexField {
    Image(u8),
    Strength(&'static str),
}

/// The parameters the caller gave an operation, as its record and webhook show them.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct OperationFields {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<IndexField>,
    /// upscale-alt's kind or upscale-highres's factor (`"2x"`).
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub direction: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zoom_ratio: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dimension: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_image_urls: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_image_url: Option<String>,
    /// Imagine's image prompts (the URLs at the start of its prompt).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_prompts: Option<Vec<String>>,
}

/// A finished task's result, in the fields of its shape.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ResultFields {
    /// A grid's 2x2 image.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub original_image_url: Option<String>,
    /// A grid's four images.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_urls: Option<Vec<String>>,
    /// A single image (upscales).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_url: Option<String>,
    /// A text result (describe, shorten).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<Vec<String>>,
    /// A seed task's answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
}

/// A webhook delivery's body. Finished: `task_id, task_type, status, percentage`, then
/// `parent_task_id` and the operation's own fields where it has them, then the result. Failed:
/// `task_id, task_type, status, error`. Canceled: `task_id, task_type, status`.
#[derive(Debug, Serialize)]
pub struct Payload<'a> {
    pub task_id: &'a str,
    pub task_type: &'a str,
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub percentage: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_task_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<&'a str>,
    #[serde(flatten)]
    pub operation: &'a OperationFields,
    #[serde(flatten)]
    pub result: ResultFields,
    /// The follow-ups it offers (a finished image task's, for a caller that opted in).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actions: Option<&'a [Action]>,
    /// The caller's own object, unchanged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<&'a Metadata>,
}

/// Where a task's webhook delivery stands, in its record.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WebhookState {
    pub url: String,
    pub status: String,
    pub attempts: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_status_code: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_attempt_at: Option<String>,
}

/// What a waiting task waits for (`waiting_for` in its record).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitingFor {
    /// Its turn: the tasks ahead of it in the queue.
    Turn,
    /// Its account already has `max_running_per_account` tasks running.
    RunningLimit,
    /// A backend: a worker has taken it and waits for a free backend.
    Backend,
}

/// A task's record. Times are RFC 3339 UTC with milliseconds; `expires_at` is null until the
/// task has ended (or when retention keeps tasks forever); the other optional fields are left
/// out when they have no value.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Record {
    pub task_id: String,
    pub task_type: &'static str,
    pub status: &'static str,
    pub percentage: String,
    /// How many tasks will start before it, while it waits (`pending` or `starting`); absent
    /// when it is further back than easel counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_position: Option<u32>,
    /// What a waiting task waits for: its turn in the queue, its account's running tasks (the
    /// account has as many running as its plan allows), or a backend (claimed by a worker).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<WaitingFor>,
    /// A small image of the work so far, while it is `processing` and its backend gives one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preview_image_url: Option<String>,
    /// The prompt's text, without its parameters.
    pub prompt: String,
    /// The prompt's Midjourney parameters (or its parent's, for a follow-up that reuses them).
    #[serde(skip_serializing_if = "Parameters::is_empty")]
    pub parameters: Parameters,
    pub aspect_ratio: String,
    pub process_mode: &'static str,
    pub seed: i64,
    pub created_at: String,
    pub expires_at: Option<String>,
    pub data_removed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_task_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webhook: Option<WebhookState>,
    /// The deliveries the caller asked for, when not the default (every final event).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webhook_events: Option<WebhookEvents>,
    #[serde(flatten)]
    pub operation: OperationFields,
    /// The record's own `seed` already says a seed task's answer, so `result.seed` stays empty.
    #[serde(flatten)]
    pub result: ResultFields,
    /// The follow-ups it offers now: a finished image task's, while its images are kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actions: Option<Vec<Action>>,
    /// The caller's own object, unchanged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Metadata>,
    /// The model and the values its backend was sent (`model`, `negative_prompt`, `steps`,
    /// `cfg_scale`, `sampler`), each absent where it does not apply.
    #[serde(flatten)]
    pub settings: Settings,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// A record with every field given, so that each serializes.
    fn full() -> Record {
        Record {
            task_id: "t".into(),
            task_type: "imagine",
            status: "finished",
            percentage: "100".into(),
            queue_position: Some(3),
            waiting_for: Some(WaitingFor::RunningLimit),
            preview_image_url: Some("u".into()),
            prompt: "p".into(),
            parameters: Parameters {
                tile: true,
                ..Parameters::default()
            },
            aspect_ratio: "1:1".into(),
            process_mode: "fast",
            seed: 1,
            created_at: "c".into(),
            expires_at: Some("e".into()),
            data_removed: false,
            started_at: Some("s".into()),
            finished_at: Some("f".into()),
            parent_task_id: Some("p".into()),
            error: Some("e".into()),
            webhook: Some(WebhookState {
                url: "u".into(),
                status: "pending".into(),
                attempts: 1,
                last_status_code: Some(500),
                last_error: Some("e".into()),
                next_attempt_at: Some("n".into()),
            }),
            webhook_events: Some(
                crate::domain::WebhookEvents::parse(&serde_json::json!(["progress"])).unwrap(),
            ),
            operation: OperationFields {
                index: Some(IndexField::Image(1)),
                kind: Some("2x".into()),
                direction: Some("up"),
                zoom_ratio: Some(1.5),
                dimension: Some("square"),
                input_image_urls: Some(vec![]),
                input_image_url: Some("i".into()),
                image_prompts: Some(vec![]),
            },
            result: ResultFields {
                original_image_url: Some("o".into()),
                image_urls: Some(vec![]),
                image_url: Some("i".into()),
                content: Some(vec![]),
                seed: None,
            },
            actions: Some(vec![Action {
                operation: "reroll",
                label: "🔄",
                body: serde_json::json!({"parent_task_id": "t"}),
            }]),
            metadata: Some(Metadata::parse(serde_json::json!({"order": 1})).unwrap()),
            settings: Settings {
                model: Some("sd15".into()),
                negative_prompt: Some("trees".into()),
                steps: Some(20),
                cfg_scale: Some(7.0),
                sampler: Some("euler_a".into()),
            },
        }
    }

    fn keys(v: &Value) -> Vec<String> {
        let mut keys: Vec<String> = v.as_object().expect("an object").keys().cloned().collect();
        keys.sort();
        keys
    }

    fn schema(name: &str) -> Value {
        let doc: Value =
            serde_json::from_str(include_str!("../http/api/openapi.json")).expect("valid JSON");
        doc["components"]["schemas"][name].clone()
    }

    #[test]
    fn the_record_has_exactly_the_fields_of_the_openapi_task_schema() {
        let task = schema("Task");
        let record = serde_json::to_value(full()).unwrap();
        assert_eq!(keys(&record), keys(&task["properties"]));
        // What the document requires is what a record always has.
        let mut bare = full();
        bare.expires_at = None;
        bare.started_at = None;
        bare.finished_at = None;
        bare.parent_task_id = None;
        bare.error = None;
        bare.webhook = None;
        bare.webhook_events = None;
        bare.queue_position = None;
        bare.waiting_for = None;
        bare.preview_image_url = None;
        bare.operation = OperationFields::default();
        bare.result = ResultFields::default();
        bare.metadata = None;
        bare.actions = None;
        bare.parameters = Parameters::default();
        bare.settings = Settings::default();
        let bare = serde_json::to_value(bare).unwrap();
        let mut required: Vec<String> = task["required"]
            .as_array()
            .expect("required")
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect();
        required.sort();
        assert_eq!(keys(&bare), required);
    }

    #[test]
    fn the_webhook_state_has_exactly_the_fields_of_its_schema() {
        let record = serde_json::to_value(full()).unwrap();
        assert_eq!(
            keys(&record["webhook"]),
            keys(&schema("WebhookState")["properties"])
        );
    }

    #[test]
    fn a_payload_names_no_field_the_record_does_not() {
        let operation = full().operation;
        let metadata = full().metadata;
        let payload = Payload {
            task_id: "t",
            task_type: "seed",
            status: "finished",
            percentage: Some("100"),
            parent_task_id: Some("p"),
            error: Some("e"),
            operation: &operation,
            result: ResultFields {
                seed: Some(1),
                ..full().result
            },
            actions: None,
            metadata: metadata.as_ref(),
        };
        let payload = serde_json::to_value(payload).unwrap();
        let record = keys(&serde_json::to_value(full()).unwrap());
        for key in keys(&payload) {
            assert!(record.contains(&key), "{key}");
        }
    }
}
