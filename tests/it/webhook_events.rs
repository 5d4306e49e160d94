//! `webhook_events` on submit: refused when broken (nothing stored), kept with the task and shown
//! in its record, and a final event the caller left out gets no delivery.

use std::time::Duration;

use crate::common::receiver::{Behaviour, Receiver};
use crate::common::{self, wait_for, TestApp};
use serde_json::{json, Value};
use sqlx::Row;

#[tokio::test]
async fn a_broken_webhook_events_is_a_400_naming_it_and_nothing_is_stored() {
    let app = TestApp::spawn().await;
    let receiver = Receiver::start(vec![Behaviour::Status(200)]).await;
    for (events, code) in [
        (json!([]), "invalid_value"),
        (json!("failed"), "invalid_type"),
        (json!({"failed": true}), "invalid_type"),
        (json!(["failed", 3]), "invalid_type"),
        (json!(["failed", "started"]), "invalid_value"),
    ] {
        for path in ["/api/v1/imagine", "/api/v1/shorten"] {
            let (status, body) = app
                .post(
                    path,
                    &json!({"prompt": "a red fox", "webhook_url": receiver.url,
                            "webhook_events": events}),
                )
                .await;
            assert_eq!(status, 400, "{events} on {path}: {body}");
            let error = &body["errors"][0];
            assert_eq!(error["code"], code, "{events}: {body}");
            let msg = error["msg"].as_str().unwrap();
            assert!(
                msg.starts_with("webhook_events: must be a non-empty list of \"progress\", \"completed\", \"failed\", \"canceled\""),
                "{msg}"
            );
        }
    }
    assert_eq!(app.stored_tasks().await, 0);
    assert_eq!(receiver.count(), 0);
}

#[tokio::test]
async fn a_task_asking_only_for_failed_gets_no_delivery_when_it_finishes_and_one_when_it_fails() {
    let receiver = Receiver::start(vec![Behaviour::Status(200)]).await;
    let app = TestApp::spawn_with(|c| c.worker.blocked_terms = vec!["forbidden".into()]).await;
    let events = json!(["failed"]);
    let finishes = app
        .imagine(json!({"prompt": "a calm lake", "webhook_url": receiver.url,
                        "webhook_secret": "a secret of this task", "webhook_events": events}))
        .await;
    let fails = app
        .imagine(
            json!({"prompt": "something forbidden", "webhook_url": receiver.url,
                        "webhook_events": events}),
        )
        .await;
    let finished = app.wait_final(&finishes, Duration::from_secs(10)).await;
    assert_eq!(finished["status"], "finished");
    assert_eq!(
        app.wait_final(&fails, Duration::from_secs(10)).await["status"],
        "failed"
    );
    wait_for(Duration::from_secs(5), || async {
        (receiver.count() >= 1).then_some(())
    })
    .await
    .expect("the failure is delivered");

    // The finished task queued nothing: its record says so, and no delivery row exists.
    let record = app.fetch(&finishes).await;
    assert_eq!(record["webhook_events"], json!(["failed"]));
    assert_eq!(record["webhook"]["status"], "skipped", "{record}");
    assert_eq!(record["webhook"]["attempts"], 0);
    let mut db = common::database(&app.config).await;
    let rows = sqlx::query(&format!(
        "SELECT COUNT(*) AS n FROM webhook_deliveries WHERE task_id = '{finishes}'"
    ))
    .fetch_one(&mut db)
    .await
    .unwrap();
    assert_eq!(rows.get::<i64, _>("n"), 0);
    // Nor does it keep the secret it will never sign with.
    let kept = sqlx::query("SELECT COUNT(*) AS n FROM tasks WHERE webhook_secret IS NOT NULL")
        .fetch_one(&mut db)
        .await
        .unwrap();
    assert_eq!(
        kept.get::<i64, _>("n"),
        0,
        "the skipped ending's secret stays"
    );
    // And there is nothing to send again.
    let (status, body) = app
        .post(&format!("/api/v1/tasks/{finishes}/redeliver"), &json!({}))
        .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["errors"][0]["code"], "no_webhook", "{body}");
    assert!(
        body["errors"][0]["msg"]
            .as_str()
            .unwrap()
            .contains("webhook_events"),
        "{body}"
    );

    // The failed task's delivery is the only one, and it was delivered.
    let got: Vec<Value> = receiver
        .received()
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["task_id"], fails.as_str());
    assert_eq!(got[0]["status"], "failed");
    // The failure's delivery is recorded.
    let failed = app
        .wait_webhook(&fails, "delivered", Duration::from_secs(5))
        .await;
    assert_eq!(failed["webhook_events"], json!(["failed"]));
}

#[tokio::test]
async fn without_webhook_events_every_final_event_is_delivered_and_nothing_more_is_stored() {
    let receiver = Receiver::start(vec![Behaviour::Status(200)]).await;
    let app = TestApp::spawn().await;
    let plain = app
        .imagine(json!({"prompt": "a green hill", "webhook_url": receiver.url}))
        .await;
    // Naming every final event is the default, stored as nothing.
    let all_final = app
        .imagine(json!({"prompt": "a grey hill", "webhook_url": receiver.url,
                        "webhook_events": ["completed", "canceled", "failed", "completed"]}))
        .await;
    // Accepted without `webhook_url`: kept and shown, with nothing to send.
    let no_url = app
        .imagine(json!({"prompt": "a pink hill", "webhook_events": ["progress"]}))
        .await;
    for id in [&plain, &all_final, &no_url] {
        app.wait_final(id, Duration::from_secs(10)).await;
    }
    wait_for(Duration::from_secs(5), || async {
        (receiver.count() == 2).then_some(())
    })
    .await
    .expect("both final deliveries");
    for id in [&plain, &all_final] {
        let record = app
            .wait_webhook(id, "delivered", Duration::from_secs(5))
            .await;
        assert!(record.get("webhook_events").is_none(), "{record}");
    }
    let record = app.fetch(&no_url).await;
    assert_eq!(record["webhook_events"], json!(["progress"]));
    assert!(record.get("webhook").is_none());

    // Stored alike: the default writes nothing of its own.
    let mut db = common::database(&app.config).await;
    // SQLite keeps a task's extras in a table of their own, PostgreSQL in the task's row.
    let read = if common::on_postgres() {
        "SELECT extras FROM tasks ORDER BY seq"
    } else {
        "SELECT x.extras FROM tasks t LEFT JOIN task_extras x ON x.seq = t.seq ORDER BY t.seq"
    };
    let extras: Vec<Option<String>> = sqlx::query(read)
        .fetch_all(&mut db)
        .await
        .unwrap()
        .iter()
        .map(|r| r.get("extras"))
        .collect();
    assert_eq!(extras.len(), 3);
    assert_eq!(extras[0], extras[1]);
    assert!(!extras[0]
        .as_deref()
        .unwrap_or("")
        .contains("webhook_events"));
    assert!(extras[2]
        .as_deref()
        .unwrap()
        .contains(r#""webhook_events":["progress"]"#));
}

#[tokio::test]
async fn a_canceled_task_is_delivered_only_when_its_events_name_canceled() {
    let receiver = Receiver::start(vec![Behaviour::Status(200)]).await;
    // No workers: the tasks wait until they are canceled.
    let app = TestApp::spawn_with(|c| c.worker.workers = 0).await;
    let skipped = app
        .imagine(json!({"prompt": "a windmill", "webhook_url": receiver.url,
                        "webhook_events": ["completed", "failed"]}))
        .await;
    let sent = app
        .imagine(json!({"prompt": "a watermill", "webhook_url": receiver.url,
                        "webhook_events": ["canceled"]}))
        .await;
    for id in [&skipped, &sent] {
        let (status, body) = app
            .post(&format!("/api/v1/tasks/{id}/cancel"), &json!({}))
            .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["status"], "canceled");
    }
    wait_for(Duration::from_secs(5), || async {
        (receiver.count() >= 1).then_some(())
    })
    .await
    .expect("the canceled event is delivered");
    let record = app
        .wait_webhook(&sent, "delivered", Duration::from_secs(5))
        .await;
    assert_eq!(record["webhook_events"], json!(["canceled"]));
    assert_eq!(app.fetch(&skipped).await["webhook"]["status"], "skipped");
    let got: Vec<Value> = receiver
        .received()
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["task_id"], sent.as_str());
    assert_eq!(got[0]["status"], "canceled");
}
