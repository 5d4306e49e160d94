//! Webhook delivery against a local receiver: payload and headers, signatures, the retry
//! schedule, undeliverable, redelivery, and the SSRF defence at delivery time.

use easel::store::sqlite::SqliteStore;
use easel::store::{Outbox, Store};
use std::time::Duration;

use crate::common::receiver::{Behaviour, Receiver};
use crate::common::{self, wait_for, TestApp};
use serde_json::{json, Value};
use sqlx::Connection;

async fn signing_secret(app: &TestApp) -> String {
    app.store
        .first_account()
        .await
        .unwrap()
        .unwrap()
        .signing_secret
}

#[tokio::test]
async fn a_finished_task_is_delivered_with_exact_payload_headers_and_signature() {
    let receiver = Receiver::start(vec![Behaviour::Status(200)]).await;
    let app = TestApp::spawn().await;
    let id = app
        .imagine(json!({"prompt": "a blue whale", "webhook_url": receiver.url, "webhook_secret": "my-secret"}))
        .await;
    let record = app.wait_final(&id, Duration::from_secs(10)).await;
    assert_eq!(record["status"], "finished");
    wait_for(Duration::from_secs(5), || async {
        (receiver.count() == 1).then_some(())
    })
    .await
    .expect("one delivery");
    let got = &receiver.received()[0];

    // The body, byte for byte: the seed's fields in its order.
    let expected = format!(
        r#"{{"task_id":"{id}","task_type":"imagine","status":"finished","percentage":"100","original_image_url":{},"image_urls":{}}}"#,
        record["original_image_url"], record["image_urls"]
    );
    assert_eq!(std::str::from_utf8(&got.body).unwrap(), expected);

    let h = &got.headers;
    assert_eq!(h["content-type"], "application/json");
    assert_eq!(h["x-webhook-secret"], "my-secret");
    assert!(h["user-agent"].to_str().unwrap().starts_with("easel"));
    let msg_id = h["webhook-id"].to_str().unwrap();
    let ts: i64 = h["webhook-timestamp"].to_str().unwrap().parse().unwrap();
    assert!((chrono::Utc::now().timestamp() - ts).abs() < 30);
    assert!(h["webhook-signature"].to_str().unwrap().starts_with("v1,"));

    // An independent Standard Webhooks implementation accepts the signature.
    let secret = signing_secret(&app).await;
    assert!(secret.starts_with("whsec_"));
    let verifier = standardwebhooks::Webhook::new(&secret).unwrap();
    verifier.verify(&got.body, h).expect("signature verifies");
    let other = standardwebhooks::Webhook::new("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
    assert!(
        other.verify(&got.body, h).is_err(),
        "a different secret does not verify"
    );

    // The record shows the delivery once its attempt is recorded, which follows the receiver's
    // answer (attempt records are group-committed, up to 1 ms apart).
    let record = app
        .wait_webhook(&id, "delivered", Duration::from_secs(5))
        .await;
    assert_eq!(record["webhook"]["attempts"], 1);
    assert_eq!(record["webhook"]["last_status_code"], 200);
    assert!(record["webhook"].get("next_attempt_at").is_none());
    assert!(!msg_id.is_empty());

    // The secret is stored once: with the delivery, no longer with the task.
    let mut conn = common::database(&app.config).await;
    let stored: (Option<String>, Option<String>) = sqlx::query_as(&format!(
        "SELECT t.webhook_secret, d.webhook_secret
         FROM tasks t JOIN webhook_deliveries d ON d.task_seq = t.seq WHERE d.task_id = '{id}'"
    ))
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(stored, (None, Some("my-secret".into())));
}

#[tokio::test]
async fn a_failed_task_is_delivered_without_the_secret_header_when_none_was_given() {
    let receiver = Receiver::start(vec![Behaviour::Status(204)]).await;
    let app = TestApp::spawn_with(|c| c.worker.blocked_terms = vec!["forbidden".into()]).await;
    let id = app
        .imagine(json!({"prompt": "something forbidden", "webhook_url": receiver.url}))
        .await;
    app.wait_final(&id, Duration::from_secs(10)).await;
    wait_for(Duration::from_secs(5), || async {
        (receiver.count() == 1).then_some(())
    })
    .await
    .expect("one delivery");
    let got = &receiver.received()[0];
    let body: Value = serde_json::from_slice(&got.body).unwrap();
    assert_eq!(body["task_id"], id.as_str());
    assert_eq!(body["status"], "failed");
    assert!(body["error"]
        .as_str()
        .unwrap()
        .starts_with("content policy violation"));
    assert_eq!(body.as_object().unwrap().len(), 4);
    assert!(got.headers.get("x-webhook-secret").is_none());
}

#[tokio::test]
async fn failed_attempts_follow_the_schedule_then_the_webhook_is_undeliverable() {
    let receiver = Receiver::start(vec![Behaviour::Status(500)]).await;
    let app = TestApp::spawn().await;
    let id = app
        .imagine(json!({"prompt": "retry me", "webhook_url": receiver.url}))
        .await;
    let record = app
        .wait_webhook(&id, "undeliverable", Duration::from_secs(20))
        .await;
    assert_eq!(record["webhook"]["attempts"], 4);
    assert_eq!(record["webhook"]["last_status_code"], 500);
    // The result stays available.
    assert_eq!(record["status"], "finished");
    assert_eq!(record["image_urls"].as_array().unwrap().len(), 4);

    tokio::time::sleep(Duration::from_millis(500)).await;
    let got = receiver.received();
    assert_eq!(got.len(), 4, "exactly four attempts");
    // Same webhook-id on every retry.
    let ids: Vec<_> = got
        .iter()
        .map(|r| r.headers["webhook-id"].clone())
        .collect();
    assert!(ids.windows(2).all(|w| w[0] == w[1]));
    // Retries at about 300, 600 and 900 ms after the initial failure.
    let first = got[0].at;
    for (i, expected_ms) in [300u64, 600, 900].iter().enumerate() {
        let actual = got[i + 1].at.duration_since(first).as_millis() as i64;
        assert!(
            (actual - *expected_ms as i64).abs() < 250,
            "retry {} at {actual} ms, expected about {expected_ms} ms",
            i + 1
        );
    }
}

#[tokio::test]
async fn a_delivery_that_recovers_is_marked_delivered() {
    let receiver = Receiver::start(vec![
        Behaviour::Status(503),
        Behaviour::Redirect("/elsewhere".into()),
        Behaviour::Status(200),
    ])
    .await;
    let app = TestApp::spawn().await;
    let id = app
        .imagine(json!({"prompt": "eventually", "webhook_url": receiver.url}))
        .await;
    let record = app
        .wait_webhook(&id, "delivered", Duration::from_secs(15))
        .await;
    assert_eq!(record["webhook"]["attempts"], 3);
    // The redirect was not followed: only /hook was hit, three times.
    assert_eq!(receiver.count(), 3);
}

#[tokio::test]
async fn timeouts_and_endless_bodies_fail_the_attempt() {
    let receiver = Receiver::start(vec![
        Behaviour::Hang(Duration::from_secs(5)),
        Behaviour::EndlessBody,
        Behaviour::Status(200),
    ])
    .await;
    let app = TestApp::spawn_with(|c| c.webhooks.timeout = Duration::from_millis(500)).await;
    let id = app
        .imagine(json!({"prompt": "slow receiver", "webhook_url": receiver.url}))
        .await;
    let record = app
        .wait_webhook(&id, "delivered", Duration::from_secs(15))
        .await;
    assert_eq!(record["webhook"]["attempts"], 3);
}

#[tokio::test]
async fn redeliver_starts_a_fresh_schedule() {
    let receiver = Receiver::start(vec![Behaviour::Status(200)]).await;
    let app = TestApp::spawn().await;
    let id = app
        .imagine(json!({"prompt": "again", "webhook_url": receiver.url}))
        .await;
    wait_for(Duration::from_secs(10), || async {
        (receiver.count() == 1).then_some(())
    })
    .await
    .expect("first delivery");
    let (status, record) = app
        .post(&format!("/api/v1/tasks/{id}/redeliver"), &json!({}))
        .await;
    assert_eq!(status, 202, "{record}");
    assert_eq!(record["task_id"], id.as_str());
    wait_for(Duration::from_secs(10), || async {
        (receiver.count() == 2).then_some(())
    })
    .await
    .expect("second delivery");
    let got = receiver.received();
    assert_eq!(got[0].body, got[1].body);

    // No webhook, or not ended yet: 409.
    let plain = app.imagine(json!({"prompt": "no hook"})).await;
    app.wait_final(&plain, Duration::from_secs(10)).await;
    let (status, err) = app
        .post(&format!("/api/v1/tasks/{plain}/redeliver"), &json!({}))
        .await;
    assert_eq!(
        (status, err["errors"][0]["code"].as_str()),
        (409, Some("no_webhook"))
    );
    let (status, _) = app
        .post(
            &format!("/api/v1/tasks/{}/redeliver", uuid::Uuid::new_v4()),
            &json!({}),
        )
        .await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn deliveries_to_private_addresses_are_refused_when_not_allowed() {
    // Accepted at submit under a permissive policy, then delivered by a strict one: the
    // dispatcher checks again, so a policy change or DNS answer cannot reach internal hosts.
    let receiver = Receiver::start(vec![Behaviour::Status(200)]).await;
    let app = TestApp::spawn().await;
    let id = app
        .imagine(json!({"prompt": "ssrf", "webhook_url": format!("http://localhost:{}/hook", receiver.port)}))
        .await;
    app.wait_final(&id, Duration::from_secs(10)).await;
    let (dir, mut config) = app.stop().await;
    wait_for(Duration::from_secs(5), || async {
        (receiver.count() >= 1).then_some(())
    })
    .await;
    let before = receiver.count();
    config.webhooks.allow_private = false;
    let app = TestApp::start(dir, config).await;
    let (status, _) = app
        .post(&format!("/api/v1/tasks/{id}/redeliver"), &json!({}))
        .await;
    assert_eq!(status, 202);
    let record = app
        .wait_webhook(&id, "undeliverable", Duration::from_secs(10))
        .await;
    assert!(
        record["webhook"]["last_error"]
            .as_str()
            .unwrap()
            .contains("non-public")
            || record["webhook"]["last_error"]
                .as_str()
                .unwrap()
                .contains("private"),
        "{record}"
    );
    assert_eq!(receiver.count(), before, "nothing reached the receiver");
}

#[tokio::test]
async fn a_hanging_receiver_does_not_hold_up_deliveries_to_others() {
    let slow = Receiver::start(vec![Behaviour::Hang(Duration::from_secs(9))]).await;
    let fast = Receiver::start(vec![Behaviour::Status(200)]).await;
    let app = TestApp::spawn_with(|c| c.webhooks.timeout = Duration::from_secs(10)).await;
    let mut slow_ids = Vec::new();
    for i in 0..5 {
        slow_ids.push(
            app.imagine(json!({"prompt": format!("slow {i}"), "webhook_url": slow.url}))
                .await,
        );
    }
    wait_for(Duration::from_secs(10), || async {
        (slow.count() == 5).then_some(())
    })
    .await
    .expect("all five slow deliveries in flight at once");
    let fast_id = app
        .imagine(json!({"prompt": "fast", "webhook_url": fast.url}))
        .await;
    let delivered = wait_for(Duration::from_secs(7), || async {
        (fast.count() == 1).then_some(())
    })
    .await;
    assert!(
        delivered.is_some(),
        "the fast receiver got its delivery while five others hung"
    );
    let first_slow = slow.received()[0].at;
    assert!(fast.received()[0].at.duration_since(first_slow) < Duration::from_secs(9));
    // The receiver has the body before the dispatcher records the attempt: wait for the record.
    let recorded = wait_for(Duration::from_secs(2), || async {
        (app.fetch(&fast_id).await["webhook"]["status"] == "delivered").then_some(())
    })
    .await;
    assert!(
        recorded.is_some(),
        "the fast delivery is recorded as delivered"
    );
}

/// Claimed deliveries wait in a queue ahead of the senders. Those still waiting at shutdown are
/// handed back at once; only the one being sent keeps its lease, which is long enough for a
/// queued delivery to wait out two rounds of attempts before its own.
#[tokio::test]
async fn a_shutdown_hands_back_claimed_deliveries_that_were_not_sent() {
    let receiver = Receiver::start(vec![Behaviour::Hang(Duration::from_secs(30))]).await;
    let app = TestApp::spawn_with(|c| {
        c.webhooks.concurrency = 1;
        c.webhooks.timeout = Duration::from_secs(10);
        c.server.shutdown_timeout = Duration::from_millis(500);
    })
    .await;
    for i in 0..4 {
        let id = app
            .imagine(json!({"prompt": format!("held {i}"), "webhook_url": receiver.url}))
            .await;
        app.wait_final(&id, Duration::from_secs(20)).await;
    }
    let mut db = common::database(&app.config).await;
    let leases = "SELECT lease_until FROM webhook_deliveries
                  WHERE status = 'pending' AND attempts = 0 ORDER BY id";
    // One being sent, two claimed into the queue behind it (two rounds of one), one left in
    // the database.
    let started = std::time::Instant::now();
    let held = loop {
        let leases: Vec<Option<i64>> = sqlx::query_scalar(leases).fetch_all(&mut db).await.unwrap();
        if receiver.count() == 1 && leases.iter().flatten().count() == 3 {
            break leases;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "one delivery in flight and two queued: {} sent, leases {leases:?}",
            receiver.count()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(held.len(), 4);
    // Held no longer than the queue allows: the fourth waits unclaimed.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let still: Vec<Option<i64>> = sqlx::query_scalar(leases).fetch_all(&mut db).await.unwrap();
    assert_eq!(still.iter().flatten().count(), 3, "{still:?}");
    let now = chrono::Utc::now().timestamp_millis();
    for lease in held.iter().flatten() {
        assert!(
            *lease > now + 30_000,
            "a lease covers a wait for two rounds of attempts (3 x 10 s + 5 s): {}",
            lease - now
        );
    }

    app.stop().await;
    let after: Vec<Option<i64>> = sqlx::query_scalar(leases).fetch_all(&mut db).await.unwrap();
    assert_eq!(after.len(), 4, "all four still pending, none attempted");
    assert_eq!(
        after.iter().flatten().count(),
        1,
        "only the delivery cut off while sending keeps its lease: {after:?}"
    );
    assert_eq!(
        receiver.count(),
        1,
        "nothing was sent after the shutdown began"
    );
}

/// The single steps, without any background loop: run one task, then send what is due.
#[tokio::test]
async fn the_queue_and_the_outbox_can_be_driven_one_step_at_a_time() {
    let receiver = Receiver::start(vec![Behaviour::Status(200)]).await;
    let dir = tempfile::tempdir().unwrap();
    let app = easel::Application::build(common::test_config(dir.path()))
        .await
        .unwrap();
    let account = app.store().first_account().await.unwrap().unwrap();
    let task = easel::store::NewTask {
        operation: easel::domain::Operation::Imagine,
        prompt: "one step at a time".into(),
        aspect_ratio: easel::domain::AspectRatio::SQUARE,
        process_mode: easel::domain::ProcessMode::Fast,
        priority: 1,
        seed: 1,
        parent_seq: None,
        webhook_url: Some(receiver.url.clone()),
        webhook_secret: None,
        cost: 0,
        idempotency: None,
        extras: Default::default(),
    };
    let key = common::key_hash(app.store().as_ref(), &account.id).await;
    let task_id = match app.store().submit(&task, &key, &10.into()).await.unwrap() {
        easel::store::Submitted::Queued {
            account_id,
            task_id,
            ..
        } => {
            assert_eq!(account_id, account.id);
            task_id
        }
        other => panic!("not queued: {other:?}"),
    };
    assert_eq!(
        app.dispatcher().dispatch_due(10).await.unwrap(),
        0,
        "nothing due yet"
    );

    let never = tokio_util::sync::CancellationToken::new();
    let ran = app.worker().run_one_task(&never).await.unwrap();
    assert_eq!(ran, easel::worker::Ran::Completed);
    assert_eq!(
        app.worker().run_one_task(&never).await.unwrap(),
        easel::worker::Ran::Idle
    );
    assert_eq!(app.dispatcher().dispatch_due(10).await.unwrap(), 1);
    assert_eq!(receiver.count(), 1);
    let body: Value = serde_json::from_slice(&receiver.received()[0].body).unwrap();
    assert_eq!(body["task_id"], task_id.to_string());
    assert_eq!(body["status"], "finished");
    assert_eq!(
        app.dispatcher().dispatch_due(10).await.unwrap(),
        0,
        "delivered once"
    );
}

#[tokio::test]
async fn a_delivery_rescheduled_from_outside_is_picked_up_by_the_next_poll() {
    let receiver = Receiver::start(vec![Behaviour::Status(503), Behaviour::Status(200)]).await;
    let app = TestApp::spawn_with(|c| {
        c.webhooks.retry_schedule = vec![Duration::from_secs(3600)];
        c.worker.poll_interval = Duration::from_millis(300);
    })
    .await;
    let id = app
        .imagine(json!({"prompt": "moved up", "webhook_url": receiver.url}))
        .await;
    // The first attempt fails; the retry is an hour away, and the dispatcher knows it.
    wait_for(Duration::from_secs(15), || async {
        (app.fetch(&id).await["webhook"]["attempts"] == 1).then_some(())
    })
    .await
    .expect("first attempt");
    // Another process (an operator's SQL, another node) moves it to now, telling nobody.
    let mut db = common::database(&app.config).await;
    let now = chrono::Utc::now().timestamp_millis();
    sqlx::query(&format!(
        "UPDATE webhook_deliveries SET next_attempt_at = {now}"
    ))
    .execute(&mut db)
    .await
    .unwrap();
    // Delivered once its new time came, not an hour later.
    let record = app
        .wait_webhook(&id, "delivered", Duration::from_secs(10))
        .await;
    assert_eq!(record["webhook"]["attempts"], 2);
    assert_eq!(receiver.count(), 2);
}

/// A task with a webhook, taken and finished through `idle`'s store, so that its delivery is due;
/// its id.
async fn finished_with_webhook(idle: &common::Idle) -> uuid::Uuid {
    let store = idle.store();
    let task = easel::store::NewTask {
        webhook_url: Some("http://127.0.0.1:9/hook".into()),
        ..common::new_task("fast", 1)
    };
    let task_id = common::insert(store.as_ref(), &task, &idle.key).await;
    let claimed = store.claim_task("w", 60_000).await.unwrap().unwrap();
    assert_eq!(claimed.id, task_id.to_string());
    let done = easel::store::Ending::new(
        easel::store::Outcome::Finished(easel::domain::Output::Grid {
            grid_key: "g".into(),
            image_keys: vec!["i".into(); 4],
            width: 8,
            height: 8,
        }),
        &easel::domain::PayloadHead::of(&claimed.id, "imagine"),
        &|k| k.to_string(),
    );
    assert!(store
        .complete_task(claimed.seq, claimed.attempts, &done)
        .await
        .unwrap());
    task_id
}

/// The status codes of the task's recorded delivery attempts, oldest first.
async fn attempt_codes(
    store: &dyn easel::store::Store,
    account_id: &str,
    task: &uuid::Uuid,
) -> Vec<Option<i64>> {
    let attempts = store
        .delivery_attempts(account_id, task)
        .await
        .unwrap()
        .unwrap();
    attempts.iter().map(|a| a.status_code).collect()
}

#[tokio::test]
async fn a_stale_dispatcher_records_nothing_and_one_attempt_wins_a_race() {
    use easel::store::AttemptRecord;
    // Built but not running: this test is the only dispatcher.
    let idle = common::Idle::build().await;
    let (store, account) = (idle.store(), &idle.account);
    let task = finished_with_webhook(&idle).await;

    let failed = |code: u16| AttemptRecord {
        attempted_at: easel::store::now_ms(),
        duration_ms: 3,
        status_code: Some(code),
        error: None,
        delivered: false,
        next_attempt_at: Some(easel::store::now_ms() - 1),
        first_failed_at: Some(easel::store::now_ms()),
    };
    // The first dispatcher's lease runs out at once; a second one claims the same delivery.
    let first = store.claim_due_deliveries(10, -1).await.unwrap();
    let second = store.claim_due_deliveries(10, 60_000).await.unwrap();
    assert_eq!((first.len(), second.len()), (1, 1));
    assert_eq!(first[0].id, second[0].id);
    assert!(store
        .record_attempt(&second[0], &failed(500))
        .await
        .unwrap());
    assert!(
        !store.record_attempt(&first[0], &failed(501)).await.unwrap(),
        "the stale dispatcher's record is fenced off"
    );

    // Two records for the same claim at once (they share a batch or not): exactly one counts.
    let again = store.claim_due_deliveries(10, 60_000).await.unwrap();
    assert_eq!(again.len(), 1);
    let (r502, r503) = (failed(502), failed(503));
    let (a, b) = tokio::join!(
        store.record_attempt(&again[0], &r502),
        store.record_attempt(&again[0], &r503),
    );
    assert!(
        a.unwrap() ^ b.unwrap(),
        "exactly one of the two is recorded"
    );

    let codes = attempt_codes(store.as_ref(), &account.id, &task).await;
    assert_eq!(codes.len(), 2, "one row per recorded attempt: {codes:?}");
    assert_eq!(codes[0], Some(500));
    assert!(codes[1] == Some(502) || codes[1] == Some(503), "{codes:?}");
}

#[tokio::test]
async fn an_attempt_record_that_fails_part_way_is_undone_whole_and_the_writer_goes_on() {
    if common::sqlite_only("the SQLite writer's transactions") {
        return;
    }
    use easel::store::AttemptRecord;
    let idle = common::Idle::build().await;
    let (store, account) = (idle.store(), &idle.account);
    let task = finished_with_webhook(&idle).await;
    let due = store.claim_due_deliveries(10, 60_000).await.unwrap();
    assert_eq!(due.len(), 1);

    // From another connection, as an operator could: make the record's second statement (the
    // attempt row) fail once its first (the update of the delivery) has run.
    let db = format!("sqlite://{}", idle.dir.path().join("easel.db").display());
    let mut other = sqlx::SqliteConnection::connect(&db).await.unwrap();
    sqlx::query(
        "CREATE TRIGGER refuse_attempt BEFORE INSERT ON webhook_attempts
         BEGIN SELECT RAISE(ABORT, 'refused by the test'); END",
    )
    .execute(&mut other)
    .await
    .unwrap();
    let delivered = AttemptRecord {
        attempted_at: easel::store::now_ms(),
        duration_ms: 4,
        status_code: Some(200),
        error: None,
        delivered: true,
        next_attempt_at: None,
        first_failed_at: None,
    };
    let failed = store.record_attempt(&due[0], &delivered).await;
    assert!(failed.is_err(), "the record cannot be written: {failed:?}");
    let attempts = || async {
        store
            .delivery_attempts(&account.id, &task)
            .await
            .unwrap()
            .unwrap()
    };
    assert!(attempts().await.is_empty());
    let record = store
        .task_for_account(&account.id, &task)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        record.webhook.map(|w| (w.status, w.attempts)),
        Some(("pending".to_string(), 0)),
        "the update of the delivery, made before the failure, is undone with it"
    );

    // The writer is not left inside the failed transaction: once the cause is gone, the same
    // record goes through.
    sqlx::query("DROP TRIGGER refuse_attempt")
        .execute(&mut other)
        .await
        .unwrap();
    other.close().await.unwrap();
    assert!(store.record_attempt(&due[0], &delivered).await.unwrap());
    let recorded = attempts().await;
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].status_code, Some(200));
    let record = store
        .task_for_account(&account.id, &task)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.webhook.unwrap().status, "delivered");
}

#[tokio::test]
async fn upgrading_moves_each_webhook_secret_from_its_task_to_its_delivery() {
    // A database as the release before migration 0003 left it: a pending delivery whose secret
    // is still on its task, and a task still running with its secret.
    let (_dir, url, mut conn) = common::database_before(3).await;
    sqlx::query(
        "INSERT INTO accounts (id, email, signing_secret, created_at)
         VALUES ('a1', 'a@example.com', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 0);
         INSERT INTO tasks (id, account_id, task_type, status, priority, prompt, aspect_ratio,
             process_mode, seed, created_at, webhook_url, webhook_secret)
         VALUES ('t-ended', 'a1', 'imagine', 'finished', 1, 'p', '1:1', 'fast', 1, 0,
                 'http://127.0.0.1:9/h', 'ended-secret'),
                ('t-running', 'a1', 'imagine', 'processing', 1, 'p', '1:1', 'fast', 1, 0,
                 'http://127.0.0.1:9/h', 'running-secret');
         INSERT INTO webhook_deliveries (id, task_id, account_id, url, payload, status,
             next_attempt_at, created_at, updated_at)
         VALUES ('msg_1', 't-ended', 'a1', 'http://127.0.0.1:9/h', '{}', 'pending', 0, 0, 0);",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();

    let store = SqliteStore::open(&url, false).await.unwrap();
    let due = store.claim_due_deliveries(10, 60_000).await.unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].webhook_secret.as_deref(), Some("ended-secret"));
    store.close().await;
    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    let left: Vec<(String, Option<String>)> =
        sqlx::query_as("SELECT id, webhook_secret FROM tasks ORDER BY id")
            .fetch_all(&mut conn)
            .await
            .unwrap();
    assert_eq!(
        left,
        vec![
            ("t-ended".to_string(), None),
            ("t-running".to_string(), Some("running-secret".to_string())),
        ],
        "the ended task's copy is cleared; the running task keeps its secret until it ends"
    );
}

#[tokio::test]
async fn upgrading_moves_each_payload_to_a_table_of_its_own_and_sends_it_unchanged() {
    // A database as the release before migration 0006 left it: two pending deliveries with
    // their payloads in their rows, one of them already attempted once.
    let (_dir, url, mut conn) = common::database_before(6).await;
    sqlx::query(
        r#"INSERT INTO accounts (id, email, signing_secret, created_at)
         VALUES ('a1', 'a@example.com', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 0);
         INSERT INTO tasks (seq, account_id, task_type, status, priority, prompt, aspect_ratio,
             process_mode, seed, created_at, finished_at, webhook_url)
         VALUES (1, 'a1', 'imagine', 'finished', 1, 'p', '1:1', 'fast', 1, 0, 5,
                 'http://127.0.0.1:9/h'),
                (2, 'a1', 'imagine', 'failed', 1, 'p', '1:1', 'fast', 1, 0, 5,
                 'http://127.0.0.1:9/h');
         INSERT INTO webhook_deliveries (id, task_seq, task_id, account_id, url, payload, status,
             attempts, next_attempt_at, first_failed_at, created_at, updated_at)
         VALUES ('msg_1', 1, 't-1', 'a1', 'http://127.0.0.1:9/h', '{"task_id":"t-1","n":1}',
                 'pending', 0, 0, NULL, 5, 5),
                ('msg_2', 2, 't-2', 'a1', 'http://127.0.0.1:9/h', '{"task_id":"t-2","n":2}',
                 'pending', 1, 0, 4, 5, 5);
         INSERT INTO webhook_attempts (delivery_id, attempted_at, duration_ms, error,
             next_attempt_at)
         VALUES ('msg_2', 4, 1, 'HTTP 503', 0);"#,
    )
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();

    let store = SqliteStore::open(&url, false).await.unwrap();
    let mut due = store.claim_due_deliveries(10, 60_000).await.unwrap();
    due.sort_by(|a, b| a.id.cmp(&b.id));
    let claimed: Vec<(&str, &str, i64)> = due
        .iter()
        .map(|d| (d.id.as_str(), d.payload.as_str(), d.attempts))
        .collect();
    assert_eq!(
        claimed,
        vec![
            ("msg_1", r#"{"task_id":"t-1","n":1}"#, 0),
            ("msg_2", r#"{"task_id":"t-2","n":2}"#, 1),
        ]
    );
    store.close().await;
    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    let columns: Vec<String> =
        sqlx::query_scalar("SELECT name FROM pragma_table_info('webhook_deliveries')")
            .fetch_all(&mut conn)
            .await
            .unwrap();
    assert!(!columns.iter().any(|c| c == "payload"), "{columns:?}");
    let attempts: i64 = sqlx::query_scalar("SELECT count(*) FROM webhook_attempts")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(attempts, 1, "the earlier attempt is kept");
}

#[tokio::test]
async fn records_sharing_a_batch_each_land_on_their_own_delivery() {
    use easel::store::AttemptRecord;
    let idle = common::Idle::build().await;
    let (store, account) = (idle.store(), &idle.account);
    for _ in 0..7 {
        finished_with_webhook(&idle).await;
    }
    let due = store.claim_due_deliveries(10, 60_000).await.unwrap();
    assert_eq!(due.len(), 7);
    // All at once, so that they share batches (7 records go in chunks of 4, 2 and 1): each
    // with a status code of its own; the last one fenced off by a stale attempt count.
    let record = |code: u16| AttemptRecord {
        attempted_at: easel::store::now_ms(),
        duration_ms: 3,
        status_code: Some(code),
        error: Some(format!("status {code}")),
        delivered: false,
        next_attempt_at: Some(easel::store::now_ms() + 60_000),
        first_failed_at: Some(easel::store::now_ms()),
    };
    let records: Vec<AttemptRecord> = (0..7).map(|i| record(500 + i)).collect();
    let recorded =
        futures::future::join_all(due.iter().zip(&records).enumerate().map(|(i, (d, r))| {
            let mut claim = d.clone();
            if i == 6 {
                claim.attempts += 1;
            }
            async move { store.record_attempt(&claim, r).await }
        }))
        .await;
    let recorded: Vec<bool> = recorded.into_iter().map(Result::unwrap).collect();
    assert_eq!(recorded, [true, true, true, true, true, true, false]);

    for (i, d) in due.iter().enumerate() {
        let task: uuid::Uuid = d.task_id.parse().unwrap();
        let codes = attempt_codes(store.as_ref(), &account.id, &task).await;
        let row = store
            .task_for_account(&account.id, &task)
            .await
            .unwrap()
            .unwrap()
            .webhook
            .unwrap();
        if i < 6 {
            assert_eq!(codes, [Some(500 + i as i64)], "delivery {i}");
            assert_eq!(row.last_status_code, Some(500 + i as i64));
            assert_eq!(row.attempts, 1);
            assert_eq!(row.last_error, Some(format!("status {}", 500 + i)));
        } else {
            assert!(
                codes.is_empty(),
                "the fenced-off record left no attempt: {codes:?}"
            );
            assert_eq!((row.attempts, row.last_status_code), (0, None));
        }
        assert_eq!(row.status, "pending");
    }
}
