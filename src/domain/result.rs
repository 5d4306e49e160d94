use serde::Serialize;

/// How a task ended, as the worker reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Finished {
        original_image_url: String,
        image_urls: Vec<String>,
    },
    Failed {
        error: String,
    },
}

/// The task result delivered by webhook, field for field as the seed's events table.
#[derive(Serialize)]
#[serde(untagged)]
enum ResultPayload<'a> {
    Finished {
        task_id: &'a str,
        task_type: &'a str,
        status: &'static str,
        percentage: &'static str,
        original_image_url: &'a str,
        image_urls: &'a [String],
    },
    Failed {
        task_id: &'a str,
        task_type: &'a str,
        status: &'static str,
        error: &'a str,
    },
}

impl Outcome {
    /// The exact JSON body of the webhook delivery for this outcome.
    pub fn webhook_payload(&self, task_id: &str, task_type: &str) -> String {
        let payload = match self {
            Outcome::Finished {
                original_image_url,
                image_urls,
            } => ResultPayload::Finished {
                task_id,
                task_type,
                status: "finished",
                percentage: "100",
                original_image_url,
                image_urls,
            },
            Outcome::Failed { error } => ResultPayload::Failed {
                task_id,
                task_type,
                status: "failed",
                error,
            },
        };
        serde_json::to_string(&payload).expect("payload serializes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_have_exactly_the_seed_fields() {
        let ok = Outcome::Finished {
            original_image_url: "https://x/g.png".into(),
            image_urls: vec!["https://x/0.png".into(); 4],
        };
        let v: serde_json::Value =
            serde_json::from_str(&ok.webhook_payload("t1", "imagine")).unwrap();
        let keys: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
        assert_eq!(
            keys.len(),
            6,
            "task_id task_type status percentage original_image_url image_urls: {keys:?}"
        );
        assert_eq!(v["status"], "finished");
        assert_eq!(v["percentage"], "100");
        let failed = Outcome::Failed {
            error: "content policy violation: x".into(),
        };
        let v: serde_json::Value =
            serde_json::from_str(&failed.webhook_payload("t1", "imagine")).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"task_id":"t1","task_type":"imagine","status":"failed","error":"content policy violation: x"})
        );
    }
}
