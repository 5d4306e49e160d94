use serde::Serialize;

/// How a task ended, as the worker reports it. Images are named by their blob keys; their URLs
/// are made when a record or payload is written out, so that `public_url` can change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Finished {
        grid_key: String,
        image_keys: Vec<String>,
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
        original_image_url: String,
        image_urls: Vec<String>,
    },
    Failed {
        task_id: &'a str,
        task_type: &'a str,
        status: &'static str,
        error: &'a str,
    },
}

impl Outcome {
    /// The exact JSON body of the webhook delivery for this outcome, with `url` making an
    /// image's address from its key.
    pub fn webhook_payload(
        &self,
        task_id: &str,
        task_type: &str,
        url: &dyn Fn(&str) -> String,
    ) -> String {
        let payload = match self {
            Outcome::Finished {
                grid_key,
                image_keys,
            } => ResultPayload::Finished {
                task_id,
                task_type,
                status: "finished",
                percentage: "100",
                original_image_url: url(grid_key),
                image_urls: image_keys.iter().map(|k| url(k)).collect(),
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
            grid_key: "t1/a/grid.png".into(),
            image_keys: vec!["t1/a/0.png".into(); 4],
        };
        let url = |key: &str| format!("https://x/files/{key}");
        let v: serde_json::Value =
            serde_json::from_str(&ok.webhook_payload("t1", "imagine", &url)).unwrap();
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
            serde_json::from_str(&failed.webhook_payload("t1", "imagine", &url)).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"task_id":"t1","task_type":"imagine","status":"failed","error":"content policy violation: x"})
        );
    }
}
