//! The account webhook (`PUT/GET/DELETE /api/v1/account/webhook`): its checks, `credits.low`
//! once per crossing, and `task.finished`/`task.failed` for tasks without a webhook of their
//! own, signed as every delivery. On both stores; the SIGKILL case runs the real binary.

use std::time::Duration;

use serde_json::{json, Value};

use crate::common::binary::Easel;
use crate::common::receiver::{Behaviour, Receiver};
use crate::common::{split, wait_for, TestApp};

async fn send(
    app: &TestApp,
    method: reqwest::Method,
    key: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = app
        .http
        .request(method, app.url("/api/v1/account/webhook"))
        .header("Authorization", key);
    if let Some(body) = body {
        req = req.json(&body);
    }
    split(req.send().await.unwrap()).await
}

async fn put(app: &TestApp, key: &str, body: Value) -> (u16, Value) {
    send(app, reqwest::Method::PUT, key, Some(body)).await
}

async fn get(app: &TestApp, key: &str) -> (u16, Value) {
    send(app, reqwest::Method::GET, key, None).await
}

/// DELETE: its status (a 204 has no body).
async fn delete(app: &TestApp, key: &str) -> u16 {
    let res = app
        .http
        .delete(app.url("/api/v1/account/webhook"))
        .header("Authorization", key)
        .send()
        .await
        .unwrap();
    res.status().as_u16()
}

/// The bodies the receiver got whose `type` is `event`.
fn of_type(receiver: &Receiver, event: &str) -> Vec<(Value, reqwest::header::HeaderMap)> {
    receiver
        .received()
        .into_iter()
        .filter_map(|r| {
            let body: Value = serde_json::from_slice(&r.body).ok()?;
            (body["type"] == event).then_some((body, r.headers))
        })
        .collect()
}

#[tokio::test]
async fn the_webhook_is_set_read_and_removed_and_bad_fields_are_named() {
    let app = TestApp::spawn().await;
    let (_, key) = app.account_with("hooks@example.com", Some(100)).await;
    let (status, body) = get(&app, &key).await;
    assert_eq!(status, 404, "{body}");

    let refusals = [
        (json!({"events": ["task.failed"]}), "url: is required"),
        (
            json!({"url": "http://127.0.0.1:9/h", "events": []}),
            "events: must name",
        ),
        (
            json!({"url": "http://127.0.0.1:9/h", "events": ["task.done"]}),
            "events: unknown",
        ),
        (
            json!({"url": "http://127.0.0.1:9/h", "events": ["credits.low"],
                "credits_low_threshold": "ten"}),
            "credits_low_threshold:",
        ),
        (
            json!({"url": "http://127.0.0.1:9/h", "events": ["task.failed"], "retries": 3}),
            "retries: is not a field",
        ),
        (
            json!({"url": "not a url", "events": ["task.failed"]}),
            "url:",
        ),
    ];
    for (body, expected) in refusals {
        let (status, answer) = put(&app, &key, body.clone()).await;
        assert_eq!(status, 400, "{body}: {answer}");
        assert!(
            answer["message"]
                .as_str()
                .unwrap_or_default()
                .contains(expected)
                || answer.to_string().contains(expected),
            "{body}: {answer}"
        );
    }
    let (status, _) = get(&app, &key).await;
    assert_eq!(status, 404, "a refused PUT stores nothing");

    let (status, set) = put(
        &app,
        &key,
        json!({"url": "http://127.0.0.1:9/h", "events": ["task.failed", "credits.low"],
               "secret": "shh", "credits_low_threshold": 30}),
    )
    .await;
    assert_eq!(status, 200, "{set}");
    assert_eq!(set["events"], json!(["credits.low", "task.failed"]));
    assert_eq!(set["credits_low_threshold"], 30);
    assert_eq!(set["has_secret"], true);
    assert!(
        !set.to_string().contains("shh"),
        "the secret is never shown: {set}"
    );
    let (status, got) = get(&app, &key).await;
    assert_eq!(status, 200);
    assert_eq!(got["url"], "http://127.0.0.1:9/h");
    assert_eq!(got["deliveries"], json!([]));

    // Another account sees none of it.
    let (_, other) = app.account_with("other@example.com", Some(100)).await;
    assert_eq!(get(&app, &other).await.0, 404);

    assert_eq!(delete(&app, &key).await, 204);
    assert_eq!(get(&app, &key).await.0, 404);
    assert_eq!(delete(&app, &key).await, 404);
}

#[tokio::test]
async fn credits_low_arrives_once_per_crossing_signed_with_the_accounts_secret() {
    let receiver = Receiver::start(vec![Behaviour::Status(204)]).await;
    let app = TestApp::spawn().await;
    let (account_id, key) = app.account_with("low@example.com", Some(14)).await;
    let (status, body) = put(
        &app,
        &key,
        json!({"url": receiver.url, "events": ["credits.low"], "credits_low_threshold": 8}),
    )
    .await;
    assert_eq!(status, 200, "{body}");

    // 14 -> 10: over the threshold. 10 -> 6: under it, one event. 6 -> 2: still under, none.
    for _ in 0..3 {
        let id = app
            .imagine_as(&key, json!({"prompt": "a lighthouse"}))
            .await;
        app.wait_final_as(&key, &id, Duration::from_secs(20)).await;
    }
    let events = wait_for(Duration::from_secs(10), || async {
        let events = of_type(&receiver, "credits.low");
        (!events.is_empty()).then_some(events)
    })
    .await
    .expect("a credits.low delivery");
    tokio::time::sleep(Duration::from_millis(700)).await;
    let events_now = of_type(&receiver, "credits.low");
    assert_eq!(
        events_now.len(),
        1,
        "one crossing, one event: {:?}",
        events_now
    );
    let (body, headers) = &events[0];
    assert_eq!(body["data"]["credits"], 6);
    assert_eq!(body["data"]["credits_low_threshold"], 8);
    assert!(body["timestamp"].as_str().unwrap().ends_with('Z'));
    let secret = app
        .store
        .account_by_id(&account_id)
        .await
        .unwrap()
        .unwrap()
        .signing_secret;
    let raw = &receiver
        .received()
        .into_iter()
        .find(|r| r.headers["webhook-id"] == headers["webhook-id"])
        .unwrap()
        .body;
    standardwebhooks::Webhook::new(&secret)
        .unwrap()
        .verify(raw, headers)
        .expect("signed with the account's signing secret");

    // Back over the threshold (an operator's grant), then under again: a second event.
    app.store.set_credits(&account_id, Some(10)).await.unwrap();
    let id = app.imagine_as(&key, json!({"prompt": "a harbour"})).await;
    app.wait_final_as(&key, &id, Duration::from_secs(20)).await;
    wait_for(Duration::from_secs(10), || async {
        (of_type(&receiver, "credits.low").len() == 2).then_some(())
    })
    .await
    .expect("a second crossing, a second event");

    // The answer lists them, delivered.
    let listed = wait_for(Duration::from_secs(5), || async {
        let (_, got) = get(&app, &key).await;
        let deliveries = got["deliveries"].as_array().cloned().unwrap_or_default();
        (deliveries.len() == 2 && deliveries.iter().all(|d| d["status"] == "delivered"))
            .then_some(deliveries)
    })
    .await
    .expect("both deliveries recorded as delivered");
    assert_eq!(listed[0]["event"], "credits.low");
    assert_eq!(listed[0]["attempts"], 1);
}

#[tokio::test]
async fn tasks_without_their_own_webhook_go_to_the_account_webhook() {
    let account_hook = Receiver::start(vec![Behaviour::Status(200)]).await;
    let own_hook = Receiver::start(vec![Behaviour::Status(200)]).await;
    let app = TestApp::spawn_with(|c| c.worker.blocked_terms = vec!["forbidden".into()]).await;
    let (_, key) = app.account_with("tasks@example.com", None).await;
    let (status, body) = put(
        &app,
        &key,
        json!({"url": account_hook.url, "events": ["task.finished", "task.failed"],
               "secret": "acct-secret"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");

    let plain = app.imagine_as(&key, json!({"prompt": "a meadow"})).await;
    let failing = app
        .imagine_as(&key, json!({"prompt": "something forbidden"}))
        .await;
    let owned = app
        .imagine_as(
            &key,
            json!({"prompt": "a river", "webhook_url": own_hook.url}),
        )
        .await;
    for id in [&plain, &failing, &owned] {
        app.wait_final_as(&key, id, Duration::from_secs(20)).await;
    }
    wait_for(Duration::from_secs(10), || async {
        (account_hook.count() >= 2 && own_hook.count() >= 1).then_some(())
    })
    .await
    .expect("the deliveries arrive");
    tokio::time::sleep(Duration::from_millis(500)).await;

    let finished = of_type(&account_hook, "task.finished");
    assert_eq!(finished.len(), 1, "{finished:?}");
    assert_eq!(finished[0].0["data"]["task_id"], plain.as_str());
    assert_eq!(finished[0].0["data"]["status"], "finished");
    assert_eq!(finished[0].1["x-webhook-secret"], "acct-secret");
    let failed = of_type(&account_hook, "task.failed");
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].0["data"]["task_id"], failing.as_str());
    assert_eq!(
        account_hook.count(),
        2,
        "the task with its own webhook is not sent here"
    );

    // The task with its own webhook got its ordinary payload, not the envelope.
    let own: Value = serde_json::from_slice(&own_hook.received()[0].body).unwrap();
    assert_eq!(own["task_id"], owned.as_str());
    assert!(own.get("type").is_none(), "{own}");

    // An event left out is not sent: only task.failed now.
    put(
        &app,
        &key,
        json!({"url": account_hook.url, "events": ["task.failed"]}),
    )
    .await;
    let id = app.imagine_as(&key, json!({"prompt": "a hill"})).await;
    app.wait_final_as(&key, &id, Duration::from_secs(20)).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(account_hook.count(), 2, "task.finished is no longer taken");
}

/// `credits.low` is queued in the charge's transaction: killed before it is delivered, easel
/// sends it after the restart, once.
#[tokio::test]
async fn credits_low_survives_a_sigkill_between_the_charge_and_the_delivery() {
    if crate::common::on_postgres() {
        return; // The binary runs on its own SQLite file; the store paths are covered above.
    }
    let receiver = Receiver::start(vec![Behaviour::Status(503)]).await;
    let dir = tempfile::tempdir().unwrap();
    // Retries far apart, so the kill comes between the failed first attempt and the next.
    let slow_retries = [("EASEL_WEBHOOK_RETRY_SCHEDULE", "1s,2s,60s")];
    let easel = Easel::start(dir.path(), &slow_retries);
    let admin = easel.first_key.clone().expect("the first key");
    // The admin account's own balance: 10 credits, and a webhook under 8.
    let res = easel
        .http
        .get(format!("{}/api/v1/admin/accounts", easel.base))
        .header("Authorization", &admin)
        .send()
        .await
        .unwrap();
    let (status, accounts) = split(res).await;
    assert_eq!(status, 200, "{accounts}");
    let id = accounts["accounts"][0]["id"].as_str().unwrap().to_string();
    let res = easel
        .http
        .patch(format!("{}/api/v1/admin/accounts/{id}", easel.base))
        .header("Authorization", &admin)
        .json(&json!({"credits": 10}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let res = easel
        .http
        .put(format!("{}/api/v1/account/webhook", easel.base))
        .header("Authorization", &admin)
        .json(&json!({"url": receiver.url, "events": ["credits.low"], "credits_low_threshold": 8}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);

    easel.imagine(&admin, json!({"prompt": "a kite"})).await;
    // The first attempt is refused (503); then the process dies before the retry.
    wait_for(Duration::from_secs(10), || async {
        (receiver.count() >= 1).then_some(())
    })
    .await
    .expect("a first attempt");
    easel.kill9();
    let seen_before = receiver.count();

    receiver.set(vec![Behaviour::Status(204)]);
    let easel = Easel::start(dir.path(), &slow_retries);
    wait_for(Duration::from_secs(15), || async {
        (receiver.count() > seen_before).then_some(())
    })
    .await
    .expect("delivered after the restart");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let events = of_type(&receiver, "credits.low");
    let ids: std::collections::BTreeSet<String> = events
        .iter()
        .map(|(_, h)| h["webhook-id"].to_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 1, "one event, attempted {} times", events.len());
    assert_eq!(events[0].0["data"]["credits"], 6);
    let res = easel
        .http
        .get(format!("{}/api/v1/account/webhook", easel.base))
        .header("Authorization", &admin)
        .send()
        .await
        .unwrap();
    let (_, got) = split(res).await;
    assert_eq!(got["deliveries"].as_array().unwrap().len(), 1, "{got}");
    assert_eq!(got["deliveries"][0]["status"], "delivered", "{got}");
}
