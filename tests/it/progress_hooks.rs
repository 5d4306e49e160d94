//! Progress deliveries through real HTTP to local receivers: coalesced to one a second per task
//! with the latest state, signed like final deliveries, one attempt, nothing after `finish`, and
//! a hanging progress receiver delays no final delivery.

use std::time::{Duration, Instant};

use crate::common::receiver::{Behaviour, Receiver};
use crate::common::{self, wait_for, TestApp};
use easel::net::DestinationPolicy;
use easel::webhooks::client::WebhookClient;
use easel::webhooks::progress::{ProgressHooks, ProgressTarget};
use easel::webhooks::signing::generate_secret;
use serde_json::{json, Value};

const TOKEN: &str = "progress-metrics-token";

fn hooks(timeout: Duration, in_flight: usize) -> ProgressHooks {
    let policy = DestinationPolicy {
        allow_http: true,
        allow_private: true,
    };
    let client = WebhookClient::new(timeout, policy, "easel-test", in_flight).unwrap();
    ProgressHooks::new(client, in_flight)
}

fn target(url: &str, secret: &str) -> ProgressTarget {
    ProgressTarget {
        task_id: uuid::Uuid::new_v4().to_string(),
        task_type: "imagine".into(),
        url: url.into(),
        webhook_secret: Some("caller-secret".into()),
        signing_secret: secret.into(),
        metadata: Some(easel::domain::Metadata::parse(json!({"order": 7})).unwrap()),
    }
}

fn bodies(receiver: &Receiver) -> Vec<Value> {
    receiver
        .received()
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect()
}

#[tokio::test]
async fn fifty_states_in_two_seconds_are_at_most_three_signed_deliveries_ending_with_the_latest() {
    let receiver = Receiver::start(vec![Behaviour::Status(200)]).await;
    let secret = generate_secret();
    let target = target(&receiver.url, &secret);
    let task_id = target.task_id.clone();
    let sender = hooks(Duration::from_secs(5), 4).task(target);
    let started = Instant::now();
    for i in 1..=50 {
        let preview = (i % 10 == 0).then(|| format!("https://img.example/p{i}.jpg"));
        sender.offer(i * 2, preview);
        tokio::time::sleep(Duration::from_millis(36)).await;
    }
    let offering = started.elapsed();
    wait_for(Duration::from_secs(10), || async {
        let got = bodies(&receiver);
        (got.last()?["percentage"] == "100").then_some(())
    })
    .await
    .expect("the latest state is delivered");
    sender.finish().await;

    let got = bodies(&receiver);
    // One delivery per started second of offering at most: the first state at once, then the
    // latest each second.
    let most = 1 + offering.as_secs_f64().ceil() as usize;
    assert!(
        got.len() <= most.max(3),
        "{} deliveries in {offering:?}: {got:?}",
        got.len()
    );
    assert!(got.len() >= 2, "{got:?}");
    let received = receiver.received();
    for pair in received.windows(2) {
        let gap = pair[1].at - pair[0].at;
        assert!(
            gap >= Duration::from_millis(500),
            "deliveries {gap:?} apart"
        );
    }
    assert_eq!(got[0]["percentage"], "2", "the first state goes at once");
    let last = got.last().unwrap();
    assert_eq!(
        last,
        &json!({"task_id": task_id, "task_type": "imagine", "status": "processing",
                "percentage": "100", "preview_image_url": "https://img.example/p50.jpg",
                "metadata": {"order": 7}}),
        "the latest state"
    );
    // Percentages only rise: a newer state replaced each one not sent.
    let percentages: Vec<i64> = got
        .iter()
        .map(|b| b["percentage"].as_str().unwrap().parse().unwrap())
        .collect();
    assert!(
        percentages.windows(2).all(|w| w[0] < w[1]),
        "{percentages:?}"
    );

    // Signed and with the caller's secret like final deliveries, each its own message.
    let verifier = standardwebhooks::Webhook::new(&secret).unwrap();
    let mut ids = Vec::new();
    for r in &received {
        verifier
            .verify(&r.body, &r.headers)
            .expect("signature verifies");
        assert_eq!(r.headers["x-webhook-secret"], "caller-secret");
        assert_eq!(r.headers["content-type"], "application/json");
        ids.push(r.headers["webhook-id"].to_str().unwrap().to_string());
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), received.len(), "a fresh message id per delivery");
}

#[tokio::test]
async fn a_failed_progress_delivery_is_not_retried() {
    let receiver = Receiver::start(vec![Behaviour::Status(500)]).await;
    let sender = hooks(Duration::from_secs(5), 4).task(target(&receiver.url, &generate_secret()));
    sender.offer(10, None);
    wait_for(Duration::from_secs(5), || async {
        (receiver.count() == 1).then_some(())
    })
    .await
    .expect("the one attempt");
    // Past the interval, a retry would have gone before the next state does.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    sender.offer(20, Some("https://img.example/p.jpg".into()));
    wait_for(Duration::from_secs(5), || async {
        (receiver.count() == 2).then_some(())
    })
    .await
    .expect("the next state");
    sender.finish().await;
    let got = bodies(&receiver);
    assert_eq!(got.len(), 2);
    assert_eq!(got[0]["percentage"], "10");
    assert_eq!(got[1]["percentage"], "20");
    assert_eq!(got[1]["preview_image_url"], "https://img.example/p.jpg");
}

#[tokio::test]
async fn nothing_is_sent_after_finish_even_with_a_request_in_flight_to_a_hanging_receiver() {
    let receiver = Receiver::start(vec![Behaviour::Hang(Duration::from_secs(60))]).await;
    let sender = hooks(Duration::from_secs(60), 4).task(target(&receiver.url, &generate_secret()));
    sender.offer(10, None);
    wait_for(Duration::from_secs(5), || async {
        (receiver.count() == 1).then_some(())
    })
    .await
    .expect("the request is in flight");
    // A newer state waits behind the hanging request.
    sender.offer(20, None);
    let finishing = Instant::now();
    sender.finish().await;
    assert!(
        finishing.elapsed() < Duration::from_secs(10),
        "finish waited for the hanging request: {:?}",
        finishing.elapsed()
    );
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(receiver.count(), 1, "nothing after finish");
}

#[tokio::test]
async fn a_hanging_progress_receiver_delays_no_final_delivery() {
    let hanging = Receiver::start(vec![Behaviour::Hang(Duration::from_secs(60))]).await;
    let finals = Receiver::start(vec![Behaviour::Status(200)]).await;
    let app = TestApp::spawn_with(|c| {
        c.server.metrics_token = Some(TOKEN.into());
        c.webhooks.concurrency = 1;
        c.webhooks.progress_concurrency = 2;
        c.webhooks.progress_timeout = Duration::from_secs(60);
    })
    .await;
    let secret = generate_secret();
    // More running tasks than the node's progress slots, all to a receiver that hangs.
    let senders: Vec<_> = (0..4)
        .map(|_| app.progress.task(target(&hanging.url, &secret)))
        .collect();
    for s in &senders {
        s.offer(5, None);
    }
    wait_for(Duration::from_secs(5), || async {
        (hanging.count() == 2).then_some(())
    })
    .await
    .expect("the node's two progress slots are taken");
    let dropped = r#"easel_webhook_progress_deliveries_total{outcome="dropped"}"#;
    let counted = wait_for(Duration::from_secs(5), || async {
        let text = app
            .http
            .get(app.url("/metrics"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        text.contains(dropped).then_some(())
    })
    .await;
    assert!(counted.is_some(), "states that found no slot are counted");
    assert!(app.metric(TOKEN, dropped).await >= 2.0);

    let started = Instant::now();
    let id = app
        .imagine(json!({"prompt": "a quiet street", "webhook_url": finals.url}))
        .await;
    app.wait_final(&id, Duration::from_secs(20)).await;
    wait_for(Duration::from_secs(20), || async {
        (finals.count() == 1).then_some(())
    })
    .await
    .expect("the final delivery arrives while progress requests hang");
    assert!(
        started.elapsed() < Duration::from_secs(40),
        "not held up by the 60 s hang"
    );
    assert_eq!(
        hanging.count(),
        2,
        "the hanging requests are still the only ones"
    );
    for s in senders {
        s.finish().await;
    }
}

#[tokio::test]
async fn the_store_gives_a_running_tasks_webhook_target_and_its_progress_goes_there() {
    let receiver = Receiver::start(vec![Behaviour::Status(200)]).await;
    let idle = common::Idle::build().await;
    let store = idle.store();
    let mut task = common::new_task("fast", 0);
    task.webhook_url = Some(receiver.url.clone());
    task.webhook_secret = Some("caller-secret".into());
    task.extras.webhook_events =
        Some(easel::domain::WebhookEvents::parse(&json!(["progress"])).unwrap());
    let id = common::insert(store.as_ref(), &task, &idle.key).await;
    let plain = common::insert(store.as_ref(), &common::new_task("relax", 0), &idle.key).await;

    let account = idle.account.id.as_str();
    let seq_hooked = store
        .task_for_account(account, &id)
        .await
        .unwrap()
        .unwrap()
        .seq;
    let seq_plain = store
        .task_for_account(account, &plain)
        .await
        .unwrap()
        .unwrap()
        .seq;
    assert!(
        store.webhook_target(seq_hooked).await.unwrap().is_none(),
        "not while it waits"
    );
    let claimed = store.claim_task("test", 60_000).await.unwrap().unwrap();
    assert_eq!(claimed.seq, seq_hooked);
    let target = store
        .webhook_target(seq_hooked)
        .await
        .unwrap()
        .expect("a target");
    assert_eq!(target.url, receiver.url);
    assert_eq!(target.webhook_secret.as_deref(), Some("caller-secret"));
    assert_eq!(target.signing_secret, idle.account.signing_secret);
    assert!(!format!("{target:?}").contains("caller-secret"));
    let other = store.claim_task("test", 60_000).await.unwrap().unwrap();
    assert_eq!(other.seq, seq_plain);
    assert!(
        store.webhook_target(seq_plain).await.unwrap().is_none(),
        "no webhook_url"
    );

    // As a worker wires it: the claimed task and its target.
    let sender = idle.app.progress_hooks().task(ProgressTarget {
        task_id: claimed.id.clone(),
        task_type: claimed.task_type.as_str().into(),
        url: target.url,
        webhook_secret: target.webhook_secret,
        signing_secret: target.signing_secret,
        metadata: claimed.extras.metadata.clone(),
    });
    sender.offer(42, None);
    wait_for(Duration::from_secs(5), || async {
        (receiver.count() == 1).then_some(())
    })
    .await
    .expect("the progress delivery");
    sender.finish().await;
    let got = &receiver.received()[0];
    standardwebhooks::Webhook::new(&idle.account.signing_secret)
        .unwrap()
        .verify(&got.body, &got.headers)
        .expect("signed with the account's secret");
    assert_eq!(
        serde_json::from_slice::<Value>(&got.body).unwrap(),
        json!({"task_id": claimed.id, "task_type": "imagine", "status": "processing",
               "percentage": "42"})
    );

    // Its failure was not asked for: ending it queues no final delivery, and no target stays.
    let ending = easel::store::Ending::new(
        easel::store::Outcome::Failed {
            error: "backend said no".into(),
        },
        &claimed.payload_head(),
        &|key| key.to_string(),
    );
    assert!(!ending.delivers);
    assert!(store
        .complete_task(seq_hooked, claimed.attempts, &ending)
        .await
        .unwrap());
    assert!(store.webhook_target(seq_hooked).await.unwrap().is_none());
    let record = store
        .task_for_account(&idle.account.id, &id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.webhook.unwrap().status, "skipped");
    let due = store.claim_due_deliveries(10, 60_000).await.unwrap();
    assert!(due.is_empty(), "{due:?}");
}
