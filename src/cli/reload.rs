//! `easel reload`: ask a running node to read its settings again (`POST /api/v1/admin/reload`
//! with an operator's key in `EASEL_API_KEY`). SIGHUP to the process does the same.

use std::time::Duration;

use serde_json::Value;

/// Reload the node at `base` (`http://host:port`); Err with the node's refusal.
pub(super) async fn reload(base: &str) -> anyhow::Result<()> {
    let key = std::env::var("EASEL_API_KEY").map_err(|_| {
        anyhow::anyhow!("reload: set EASEL_API_KEY to an operator's (admin account's) API key")
    })?;
    let url = format!("{}/api/v1/admin/reload", base.trim_end_matches('/'));
    let answer = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()?
        .post(&url)
        .header("Authorization", key.trim())
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("reload: could not reach {base}: {e}"))?;
    let status = answer.status();
    let body: Value = answer.json().await.unwrap_or(Value::Null);
    let list = |field: &str| {
        let names: Vec<&str> = body[field]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        }
    };
    match status.as_u16() {
        200 => {
            println!(
                "easel: reloaded; changed: {}; backends added: {}; backends removed: {}",
                list("changed"),
                list("backends_added"),
                list("backends_removed")
            );
            Ok(())
        }
        404 => anyhow::bail!("reload: {base} answered 404: the key is not an operator's"),
        code => anyhow::bail!(
            "reload refused ({code}): {}",
            body["errors"][0]["msg"]
                .as_str()
                .unwrap_or("no reason given")
        ),
    }
}
