//! The JSON that callers receive about a task: its record (fetch, listings, waits, cancel) and
//! its webhook body. Both are built from the same field types declared here, so that they cannot
//! say a field two ways; the record's OpenAPI schema (`Task`) is derived from these types, and a
//! test holds the record's fields to it.

use serde::Serialize;
use strum::VariantArray;
use utoipa::openapi::schema::Schema;
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

use super::operation::{AltKind, Dimension, OpKind, Operation, PanDirection, VariationOf};
use super::schema::{index_or, one_of};
use super::task::{ProcessMode, TaskStatus};
use super::{Metadata, Parameters, Retrying, Settings, WebhookEvent, WebhookEvents};

/// One follow-up a finished task offers (see `domain::actions`), ready to send as
/// `POST /api/v1/{operation}` with `body`.
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
pub struct Action {
    /// The follow-up's name: POST /api/v1/{operation}.
    pub operation: &'static str,
    /// Midjourney's button label (U1..U4, V1..V4, the reroll arrows, Vary (Strong), Zoom Out 2x,
    /// pan arrows, ...).
    pub label: &'static str,
    /// The body to send as is.
    #[schema(value_type = Object)]
    pub body: serde_json::Value,
}

/// An image's `index` as the contract shows it: 1..=4, or a variation's strength.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum IndexField {
    Image(u8),
    Strength(&'static str),
}

impl PartialSchema for IndexField {
    fn schema() -> RefOr<Schema> {
        index_or(
            ["strong", "subtle"],
            "An image of a grid, 1 to 4; or the strength of variations of an upscale.",
        )
    }
}

impl ToSchema for IndexField {
    fn name() -> std::borrow::Cow<'static, str> {
        "TaskIndex".into()
    }
}

/// upscale-alt's kind or upscale-highres's factor: the record's `type`.
pub struct KindField;

impl PartialSchema for KindField {
    fn schema() -> RefOr<Schema> {
        let factors = ["2x", "4x"];
        let alts = AltKind::VARIANTS.iter().map(|k| k.as_str());
        let mut kinds = one_of(alts.chain(factors));
        kinds.description = Some("upscale-alt: its type; upscale-highres: its factor.".into());
        kinds.into()
    }
}

impl ToSchema for KindField {
    fn name() -> std::borrow::Cow<'static, str> {
        "TaskKind".into()
    }
}

/// The parameters the caller gave an operation, as its record and webhook show them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, ToSchema)]
pub struct OperationFields {
    /// upscale-1x, upscale-highres, variations: as given.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = IndexField)]
    pub index: Option<IndexField>,
    /// upscale-alt's kind or upscale-highres's factor (`"2x"`).
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    #[schema(value_type = KindField)]
    pub kind: Option<String>,
    /// pan.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = PanDirection)]
    pub direction: Option<&'static str>,
    /// outpaint.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, minimum = 1, maximum = 2)]
    pub zoom_ratio: Option<f64>,
    /// blend.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Dimension)]
    pub dimension: Option<&'static str>,
    /// blend: its image_urls.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, min_items = 2, max_items = 5)]
    pub input_image_urls: Option<Vec<String>>,
    /// describe, and upscale-highres given an image_url: that URL.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub input_image_url: Option<String>,
    /// imagine (and a reroll of it): its image prompts, the URLs at the start of its prompt, in
    /// order (a data: URL given inline shows as the easel URL it was kept at).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, min_items = 1, max_items = 5)]
    pub image_prompts: Option<Vec<String>>,
}

impl Operation {
    /// The parameters the caller gave, as the record and the webhook show them: never what was
    /// resolved from them (blob keys) nor the mask. Input images keep their names with an
    /// `input_` prefix (`input_image_url`, `input_image_urls`), apart from a result's
    /// `image_url` and `image_urls`.
    pub fn public_fields(&self) -> OperationFields {
        let none = OperationFields::default();
        match self {
            Operation::Imagine
            | Operation::Reroll
            | Operation::Shorten
            | Operation::Seed
            | Operation::Inpaint { .. } => none,
            Operation::Upscale1x { index, .. } => OperationFields {
                index: Some(IndexField::Image(*index)),
                ..none
            },
            Operation::UpscaleAlt { kind, .. } => OperationFields {
                kind: Some(kind.as_str().to_string()),
                ..none
            },
            Operation::UpscaleHighres {
                factor,
                index,
                image_url,
                ..
            } => OperationFields {
                kind: Some(format!("{factor}x")),
                index: index.map(IndexField::Image),
                input_image_url: image_url.clone(),
                ..none
            },
            Operation::Variations { of, .. } => OperationFields {
                index: Some(match of {
                    VariationOf::Index(i) => IndexField::Image(*i),
                    VariationOf::Strong => IndexField::Strength("strong"),
                    VariationOf::Subtle => IndexField::Strength("subtle"),
                }),
                ..none
            },
            Operation::Pan { direction, .. } => OperationFields {
                direction: Some(direction.as_str()),
                ..none
            },
            Operation::Outpaint { zoom_ratio, .. } => OperationFields {
                zoom_ratio: Some(*zoom_ratio),
                ..none
            },
            Operation::Blend {
                dimension,
                input_image_urls,
                ..
            } => OperationFields {
                dimension: Some(dimension.as_str()),
                input_image_urls: Some(input_image_urls.clone()),
                ..none
            },
            Operation::Describe { image_url, .. } => OperationFields {
                input_image_url: Some(image_url.clone()),
                ..none
            },
        }
    }
}

/// A finished task's result, in the fields of its shape.
#[derive(Clone, Debug, Default, PartialEq, Serialize, ToSchema)]
pub struct ResultFields {
    /// Finished grid tasks: the 2x2 grid.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, format = "uri")]
    pub original_image_url: Option<String>,
    /// Finished grid tasks: the four images.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Vec<Url>, min_items = 4, max_items = 4)]
    pub image_urls: Option<Vec<String>>,
    /// Finished single-image tasks (upscales, faceswap).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, format = "uri")]
    pub image_url: Option<String>,
    /// Finished describe and shorten tasks.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub content: Option<Vec<String>>,
    /// A seed task's answer (in a webhook body; the record's own `seed` says it).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub seed: Option<i64>,
}

/// What a finished or failed task used (`usage` in its record and, for a caller that sent
/// `metadata`, its final webhook).
#[derive(Clone, Debug, Default, PartialEq, Serialize, ToSchema)]
pub struct TaskUsage {
    /// The backend that answered last (its configured name); null when no backend took it.
    #[schema(required = true)]
    pub backend: Option<String>,
    /// The model it ran on; null for operations that run on none, or without `[[models]]`.
    #[schema(required = true)]
    pub model: Option<String>,
    /// Seconds it held backend slots, from each slot taken to the answer read, summed over
    /// attempts (millisecond precision).
    #[schema(minimum = 0)]
    pub backend_seconds: f64,
    /// Images it made (a grid counts its four).
    #[schema(minimum = 0)]
    pub images: i64,
    /// The pixels of those images.
    #[schema(minimum = 0)]
    pub pixels: i64,
}

impl TaskUsage {
    /// Usage as stored: backend time in milliseconds.
    pub fn new(
        backend: Option<String>,
        model: Option<String>,
        backend_ms: i64,
        images: i64,
        pixels: i64,
    ) -> TaskUsage {
        TaskUsage {
            backend,
            model,
            backend_seconds: backend_ms.max(0) as f64 / 1000.0,
            images,
            pixels,
        }
    }
}

/// A URL easel serves, in a list of them.
#[derive(ToSchema)]
#[schema(value_type = String, format = "uri")]
pub struct Url(pub String);

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
    /// Finished and failed tasks, for a caller that opted in: the credits charged, net of a
    /// refund.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<i64>,
    /// Finished and failed tasks, for a caller that opted in: what it used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<&'a TaskUsage>,
    /// The caller's own object, unchanged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<&'a Metadata>,
}

/// Where a task's webhook delivery stands, in its record.
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
pub struct WebhookState {
    pub url: String,
    /// `skipped`: the task ended with an event not in its `webhook_events`, so nothing is sent.
    #[schema(value_type = DeliveryStatus)]
    pub status: String,
    #[schema(minimum = 0)]
    pub attempts: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub last_status_code: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub last_error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, format = DateTime)]
    pub next_attempt_at: Option<String>,
}

/// Where a webhook delivery stands: the values of [`WebhookState::status`], as the stores write
/// them (`store::model`) and `tasks::record` adds `skipped`.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum DeliveryStatus {
    Pending,
    Delivered,
    Undeliverable,
    Skipped,
}

/// What a task waits for (`waiting_for` in its record): while pending or starting, its turn in
/// the queue, its account's running tasks (the account has its plan's `max_running` running),
/// or a backend (a worker took it, or none that runs it is up); while processing, a backend
/// that failed in a way that may pass (then `retrying` says which attempt failed, and why).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum WaitingFor {
    /// Its turn: the tasks ahead of it in the queue.
    Turn,
    /// Its account already has its plan's `max_running` tasks running.
    RunningLimit,
    /// A backend: a worker has taken it and waits for a free backend, no backend that runs it
    /// is up, or (processing) its backend failed and it waits to be tried again.
    Backend,
}

/// The data of an `event: progress` of an event stream (built in `tasks::events`): a waiting
/// task's place in line, or a running task's progress. Optional fields are left out, never null.
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
pub struct TaskProgress {
    #[schema(value_type = uuid::Uuid)]
    pub task_id: String,
    #[schema(value_type = Waiting)]
    pub status: &'static str,
    /// 0 to 100, a string as in the record.
    pub percentage: String,
    /// pending and starting tasks, as in the record.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub queue_position: Option<u32>,
    /// pending and starting tasks; processing tasks while `retrying` is given (`backend`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub waiting_for: Option<WaitingFor>,
    /// processing tasks whose backend failed and that wait to be tried again; a later progress
    /// event without it says a backend has taken the task again.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub retrying: Option<Retrying>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, format = "uri")]
    pub preview_image_url: Option<String>,
}

/// The statuses a task has progress in.
#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum Waiting {
    Pending,
    Starting,
    Processing,
}

/// A task's record. Times are RFC 3339 UTC with milliseconds; `expires_at` is null until the
/// task has ended (or when retention keeps tasks forever); the other optional fields are left
/// out when they have no value.
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
#[schema(as = Task)]
pub struct Record {
    #[schema(value_type = uuid::Uuid)]
    pub task_id: String,
    #[schema(value_type = OpKind)]
    pub task_type: &'static str,
    #[schema(value_type = TaskStatus)]
    pub status: &'static str,
    /// 0 to 100.
    #[schema(pattern = "^[0-9]{1,3}$")]
    pub percentage: String,
    /// pending and starting tasks: how many tasks a backend takes before this one (0: next), at
    /// most a second old; absent beyond 100,000 (further back than easel counts).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub queue_position: Option<u32>,
    /// pending and starting tasks, and processing tasks whose backend failed and that wait to
    /// be tried again (`backend`, with `retrying`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub waiting_for: Option<WaitingFor>,
    /// processing tasks whose backend failed in a way that may pass (unreachable, timed out,
    /// 5xx) and that wait to be tried again: the attempt that failed and its error. Absent once a
    /// backend has taken the task again.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub retrying: Option<Retrying>,
    /// processing tasks whose backend gives previews: a small JPEG of the work so far, removed
    /// when the task ends.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, format = "uri")]
    pub preview_image_url: Option<String>,
    /// As submitted (trimmed) without its Midjourney parameters, else the parent's; an empty
    /// string for blend and describe.
    pub prompt: String,
    /// The prompt's Midjourney parameters (`--ar 16:9 --no trees ...`) as parsed, by long name;
    /// a follow-up that reuses its parent's prompt has its parent's (all but `seed`). Absent when
    /// the prompt had none. `aspect_ratio` and `seed` are the values used (a body field wins over
    /// the parameter).
    #[serde(skip_serializing_if = "Parameters::is_empty")]
    pub parameters: Parameters,
    /// As submitted, else the parent's; blend: its dimension's ratio; otherwise 1:1.
    pub aspect_ratio: String,
    /// As submitted; fast for describe, shorten and seed.
    #[schema(value_type = ProcessMode)]
    pub process_mode: &'static str,
    /// The task's seed; for a seed task, its parent's.
    pub seed: i64,
    #[schema(format = DateTime)]
    pub created_at: String,
    /// When retention removes the task's images: `retention` after the task became final. null
    /// when retention is forever or the task is not final yet.
    #[schema(required = true, format = DateTime)]
    pub expires_at: Option<String>,
    /// Whether retention has removed the task's images; once true the image URLs
    /// (original_image_url, image_urls, image_url) are left out, and text results stay.
    pub data_removed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, format = DateTime)]
    pub started_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, format = DateTime)]
    pub finished_at: Option<String>,
    /// Follow-up tasks: the parent (seed: the task_id given).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = uuid::Uuid)]
    pub parent_task_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub webhook: Option<WebhookState>,
    /// The submit's `webhook_events`, when not the default (every final event).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Vec<WebhookEvent>)]
    pub webhook_events: Option<WebhookEvents>,
    #[serde(flatten)]
    #[schema(inline)]
    pub operation: OperationFields,
    // The record's own `seed` already says a seed task's answer, so `result.seed` stays empty.
    #[serde(flatten)]
    #[schema(inline)]
    pub result: ResultFields,
    /// The follow-ups that may be made on this task now, each ready to send; only on a finished
    /// image task whose images are kept, and only operations a configured backend can run.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub actions: Option<Vec<Action>>,
    /// The `metadata` given at submit, unchanged; absent when none was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Object)]
    pub metadata: Option<Metadata>,
    /// Finished and failed tasks: the credits charged, net of a refund (a failed task whose
    /// credits went back: 0; an account with unlimited credits: 0). The account's ledger rows
    /// for the task sum to minus this.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, minimum = 0)]
    pub cost: Option<i64>,
    /// Finished and failed tasks: what they used.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub usage: Option<TaskUsage>,
    // The model and the values its backend was sent (`model`, `negative_prompt`, `steps`,
    // `cfg_scale`, `sampler`), each absent where it does not apply.
    #[serde(flatten)]
    #[schema(inline)]
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
            retrying: Some(Retrying::new(1, "connection refused")),
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
            cost: Some(2),
            usage: Some(TaskUsage::new(Some("b".into()), None, 1500, 4, 4096)),
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

    /// The fields `schema` requires, sorted.
    fn required(schema: &Value) -> Vec<String> {
        let mut required: Vec<String> = schema["required"]
            .as_array()
            .expect("required")
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect();
        required.sort();
        required
    }

    /// `T`'s schema as the document holds it: derived, its flattened parts one object.
    fn schema<T: PartialSchema>() -> Value {
        serde_json::to_value(super::super::schema::flat(T::schema())).unwrap()
    }

    #[test]
    fn the_record_has_exactly_the_fields_of_the_openapi_task_schema() {
        let task = schema::<Record>();
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
        bare.retrying = None;
        bare.preview_image_url = None;
        bare.operation = OperationFields::default();
        bare.result = ResultFields::default();
        bare.metadata = None;
        bare.cost = None;
        bare.usage = None;
        bare.actions = None;
        bare.parameters = Parameters::default();
        bare.settings = Settings::default();
        let bare = serde_json::to_value(bare).unwrap();
        assert_eq!(keys(&bare), required(&task));
    }

    #[test]
    fn a_progress_event_has_the_fields_of_its_schema_and_never_a_null() {
        let full = TaskProgress {
            task_id: "t".into(),
            status: "processing",
            percentage: "40".into(),
            queue_position: Some(0),
            waiting_for: Some(WaitingFor::Backend),
            retrying: Some(Retrying::new(2, "the backend answered HTTP 503")),
            preview_image_url: Some("u".into()),
        };
        let progress = schema::<TaskProgress>();
        let said = serde_json::to_value(&full).unwrap();
        assert_eq!(keys(&said), keys(&progress["properties"]));
        assert_eq!(said["retrying"]["attempt"], 2);
        let bare = TaskProgress {
            queue_position: None,
            waiting_for: None,
            retrying: None,
            preview_image_url: None,
            ..full
        };
        let bare = serde_json::to_value(bare).unwrap();
        assert!(bare.as_object().unwrap().values().all(|v| !v.is_null()));
        assert_eq!(keys(&bare), required(&progress));
    }

    #[test]
    fn usage_has_exactly_the_fields_of_its_schema_and_says_null() {
        let record = serde_json::to_value(full()).unwrap();
        let usage = schema::<TaskUsage>();
        assert_eq!(keys(&record["usage"]), keys(&usage["properties"]));
        assert_eq!(record["usage"]["model"], Value::Null);
        assert_eq!(record["usage"]["backend_seconds"], 1.5);
        assert_eq!(keys(&record["usage"]), required(&usage));
    }

    #[test]
    fn the_webhook_state_has_exactly_the_fields_of_its_schema() {
        let record = serde_json::to_value(full()).unwrap();
        assert_eq!(
            keys(&record["webhook"]),
            keys(&schema::<WebhookState>()["properties"])
        );
    }

    #[test]
    fn a_payload_names_no_field_the_record_does_not() {
        let operation = full().operation;
        let metadata = full().metadata;
        let usage = full().usage;
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
            cost: Some(1),
            usage: usage.as_ref(),
        };
        let payload = serde_json::to_value(payload).unwrap();
        let record = keys(&serde_json::to_value(full()).unwrap());
        for key in keys(&payload) {
            assert!(record.contains(&key), "{key}");
        }
    }
}
