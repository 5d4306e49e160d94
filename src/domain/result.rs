use super::actions::Action;
use super::extras::Metadata;
use super::output::Output;
use super::task::TaskStatus;
use super::webhook_events::{WebhookEvent, WebhookEvents};
use super::wire::{OperationFields, Payload, ResultFields, TaskUsage};

/// How a task ended, as the worker reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Finished(Output),
    Failed {
        error: String,
    },
    /// Its caller canceled it before it ended.
    Canceled,
}

/// What a finished task's webhook says about the task besides its result: its parent and the
/// parameters the caller gave (see `Operation::public_fields`).
#[derive(Clone, Debug, Default)]
pub struct PayloadHead<'a> {
    pub task_id: &'a str,
    pub task_type: &'a str,
    pub parent_task_id: Option<&'a str>,
    pub fields: OperationFields,
    /// The caller's `metadata`, in every payload whatever the outcome.
    pub metadata: Option<&'a Metadata>,
    /// The follow-ups a finished task offers, when its payload carries them (else empty).
    pub actions: Vec<Action>,
    /// The caller's `webhook_events` (None: every final event): whether the ending is sent.
    pub webhook_events: Option<WebhookEvents>,
    /// The credits a finished task was charged, when its payload carries cost and usage (a
    /// failed task's payload says 0: its credits go back).
    pub cost: Option<i64>,
    /// What the task used, when its payload carries cost and usage.
    pub usage: Option<TaskUsage>,
}

impl PayloadHead<'_> {
    /// Whether the task's webhook is sent for `outcome`: its `webhook_events` name it.
    pub fn sends(&self, outcome: &Outcome) -> bool {
        WebhookEvents::wants(self.webhook_events, outcome.event())
    }
}

impl<'a> PayloadHead<'a> {
    /// The head of a task with no parent and no parameters of its own (imagine).
    pub fn of(task_id: &'a str, task_type: &'a str) -> PayloadHead<'a> {
        PayloadHead {
            task_id,
            task_type,
            ..Default::default()
        }
    }
}

/// What a failed or canceled task's payload says of its operation: nothing.
static NO_FIELDS: OperationFields = OperationFields {
    index: None,
    kind: None,
    direction: None,
    zoom_ratio: None,
    dimension: None,
    input_image_urls: None,
    input_image_url: None,
    image_prompts: None,
};

impl Outcome {
    /// The final event it is, as `webhook_events` names it.
    pub fn event(&self) -> WebhookEvent {
        match self {
            Outcome::Finished(_) => WebhookEvent::Completed,
            Outcome::Failed { .. } => WebhookEvent::Failed,
            Outcome::Canceled => WebhookEvent::Canceled,
        }
    }

    /// The exact JSON body of the webhook delivery for this outcome, with `url` making an
    /// image's address from its key. Finished: `task_id, task_type, status, percentage`, then
    /// `parent_task_id` and the operation's own fields where it has them, then the result
    /// fields of its shape (for imagine exactly the seed's six fields). Failed: `task_id,
    /// task_type, status, error`, as the seed's events table. Canceled: `task_id, task_type,
    /// status`.
    pub fn webhook_payload(&self, head: &PayloadHead<'_>, url: &dyn Fn(&str) -> String) -> String {
        let mut payload = Payload {
            task_id: head.task_id,
            task_type: head.task_type,
            status: TaskStatus::Finished.as_str(),
            percentage: None,
            parent_task_id: None,
            error: None,
            operation: &head.fields,
            result: ResultFields::default(),
            actions: None,
            metadata: head.metadata,
            cost: None,
            usage: None,
        };
        match self {
            Outcome::Finished(output) => {
                payload.percentage = Some("100");
                payload.parent_task_id = head.parent_task_id;
                payload.result = output.public_fields(url);
                payload.actions = Some(&head.actions[..]).filter(|a| !a.is_empty());
                payload.cost = head.cost;
                payload.usage = head.usage.as_ref();
            }
            Outcome::Failed { error } => {
                payload.status = TaskStatus::Failed.as_str();
                payload.error = Some(error);
                payload.operation = &NO_FIELDS;
                payload.usage = head.usage.as_ref();
                payload.cost = payload.usage.map(|_| 0);
            }
            Outcome::Canceled => {
                payload.status = TaskStatus::Canceled.as_str();
                payload.operation = &NO_FIELDS;
            }
        }
        serde_json::to_string(&payload).expect("payload serializes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn payloads_have_exactly_the_seed_fields() {
        let ok = Outcome::Finished(Output::Grid {
            grid_key: "t1/a/grid.png".into(),
            image_keys: vec!["t1/a/0.png".into(); 4],
            width: 8,
            height: 8,
        });
        let url = |key: &str| format!("https://x/files/{key}");
        let head = PayloadHead {
            task_id: "t1",
            task_type: "imagine",
            ..Default::default()
        };
        let v: serde_json::Value = serde_json::from_str(&ok.webhook_payload(&head, &url)).unwrap();
        let keys: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
        assert_eq!(
            keys.len(),
            6,
            "task_id task_type status percentage original_image_url image_urls: {keys:?}"
        );
        assert_eq!(v["status"], "finished");
        assert_eq!(v["percentage"], "100");
        assert_eq!(v["original_image_url"], "https://x/files/t1/a/grid.png");
        assert_eq!(v["image_urls"][3], "https://x/files/t1/a/0.png");
        let failed = Outcome::Failed {
            error: "content policy violation: x".into(),
        };
        let v: serde_json::Value =
            serde_json::from_str(&failed.webhook_payload(&head, &url)).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"task_id":"t1","task_type":"imagine","status":"failed","error":"content policy violation: x"})
        );
    }

    #[test]
    fn a_follow_up_payload_names_its_parent_and_parameters() {
        let ok = Outcome::Finished(Output::Single {
            image_key: "t2/b/0.png".into(),
            width: 8,
            height: 8,
        });
        let fields = OperationFields {
            index: Some(super::super::wire::IndexField::Image(2)),
            ..Default::default()
        };
        let head = PayloadHead {
            task_id: "t2",
            task_type: "upscale-1x",
            parent_task_id: Some("t1"),
            fields,
            metadata: None,
            actions: Vec::new(),
            webhook_events: None,
            cost: None,
            usage: None,
        };
        let url = |key: &str| format!("https://x/files/{key}");
        let v: serde_json::Value = serde_json::from_str(&ok.webhook_payload(&head, &url)).unwrap();
        assert_eq!(
            v,
            json!({"task_id":"t2","task_type":"upscale-1x","status":"finished","percentage":"100",
                   "parent_task_id":"t1","index":2,"image_url":"https://x/files/t2/b/0.png"})
        );
    }
}
