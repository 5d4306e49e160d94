//! Canceling tasks (`POST /api/v1/tasks/{task_id}/cancel`) and waiting for them in one request
//! (`Prefer: wait`), through the HTTP API of a server in this process. Runs on SQLite, and on
//! PostgreSQL with `EASEL_TEST_STORE=postgres`; tests/load/multinode.rs does both across two nodes.

use std::time::Duration;

use serde_json::{json, Value};

use crate::common::receiver::{Behaviour, Receiver};
use crate::common::{self, wait_for, TestApp};

const WITHIN: Duration = Duration::from_secs(30);

/// POST with a key and extra headers; status, headers and JSON body.
async fn post_with(
    app: &TestApp,
    key: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let mut request = app
        .http
        .post(app.url(path))
        .header("Authorization", key)
        .json(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let res = request.send().await.unwrap();
    let headers = res.headers().clone();
    let (status, body) = common::split(res).await;
    (status, headers, body)
}

/// GET with a key and extra headers; status, headers and JSON body.
async fn get_with(
    app: &TestApp,
    key: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, reqwest::header::HeaderMap, Value) {
    let mut request = app.http.get(app.url(path)).header("Authorization", key);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let res = request.send().await.unwrap();
    let headers = res.headers().clone();
    let (status, body) = common::split(res).await;
    (status, headers, body)
}

async fn cancel(app: &TestApp, key: &str, id: &str) -> (u16, Value) {
    app.post_as(key, &format!("/api/v1/tasks/{id}/cancel"), &json!({}))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_task_is_canceled_at_once_its_credits_come_back_and_its_webhook_says_so() {
    // No workers: the task stays queued. One queued task at most per account.
    let app = TestApp::spawn_with(|c| {
        c.worker.workers = 0;
        c.plans.default_mut().max_pending = 1;
    })
    .await;
    let (_, key) = app.account_with("canceler@example.com", Some(10)).await;
    let receiver = Receiver::start(vec![Behaviour::Status(200)]).await;
    let id = app
        .imagine_as(
            &key,
            json!({"prompt": "a quiet harbour", "webhook_url": receiver.url}),
        )
        .await;
    let (_, account) = app.get_as(&key, "/api/v1/account").await;
    assert_eq!(account["credits"], 6, "imagine costs four: {account}");

    let (status, record) = cancel(&app, &key, &id).await;
    assert_eq!(status, 200, "{record}");
    assert_eq!(record["status"], "canceled");
    assert_eq!(record["task_id"], id.as_str());
    assert!(record["finished_at"].is_string(), "{record}");
    let (_, account) = app.get_as(&key, "/api/v1/account").await;
    assert_eq!(account["credits"], 10, "the credits came back: {account}");

    // The webhook says it was canceled, and nothing more.
    let delivered = wait_for(WITHIN, || async { receiver.received().into_iter().next() })
        .await
        .expect("the webhook of a canceled task is sent");
    let payload: Value = serde_json::from_slice(&delivered.body).unwrap();
    assert_eq!(
        payload,
        json!({"task_id": id, "task_type": "imagine", "status": "canceled"})
    );

    // It is final: a second cancel is 409, and the listing's filter finds it.
    let (status, body) = cancel(&app, &key, &id).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["errors"][0]["code"], "task_already_ended");
    assert_eq!(
        body["errors"][0]["msg"],
        "task_id: the task has already canceled"
    );
    let (status, page) = app.get_as(&key, "/api/v1/tasks?status=canceled").await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["tasks"][0]["task_id"], id.as_str());

    // It no longer counts as queued: the account's one queued task may be another.
    app.imagine_as(&key, json!({"prompt": "the next one"}))
        .await;
    let (status, body) = app
        .post_as(&key, "/api/v1/imagine", &json!({"prompt": "one too many"}))
        .await;
    assert_eq!(status, 429, "the quota of one is taken again: {body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_task_is_canceled_and_its_worker_goes_on_to_the_next() {
    // One worker, and generations that take long enough to be caught running. That the worker
    // stops the generation at once is shown by tests/it/backends.rs (a ComfyUI job taken off the
    // backend before any heartbeat) and by the pool's unit test (a paced procedural job).
    let app = TestApp::spawn_with(|c| {
        c.worker.workers = 1;
        c.worker.procedural_min_duration = Duration::from_secs(3);
    })
    .await;
    let first = app.imagine(json!({"prompt": "a long exposure"})).await;
    app.wait_status(&first, "processing", WITHIN).await;
    let second = app.imagine(json!({"prompt": "a second one"})).await;
    let (status, record) = cancel(&app, &app.key, &first).await;
    assert_eq!(status, 200, "{record}");
    assert_eq!(record["status"], "canceled");

    // The worker records nothing of the canceled task and runs the next one to its end.
    let next = app.wait_final(&second, WITHIN).await;
    assert_eq!(next["status"], "finished", "{next}");
    let first = app.fetch(&first).await;
    assert_eq!(first["status"], "canceled", "{first}");
    assert!(first.get("image_urls").is_none(), "{first}");
    assert!(first.get("error").is_none(), "{first}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ended_and_unknown_tasks_cannot_be_canceled() {
    let app = TestApp::spawn().await;
    let id = app.imagine(json!({"prompt": "a finished thing"})).await;
    let done = app.wait_final(&id, WITHIN).await;
    assert_eq!(done["status"], "finished");
    let (status, body) = cancel(&app, &app.key, &id).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(
        body["errors"][0]["msg"],
        "task_id: the task has already finished"
    );
    assert_eq!(app.fetch(&id).await["status"], "finished");

    // Another account's task is not found, never revealed; nor is a made-up id.
    let other = app.key_for("someone@example.com").await;
    let (status, body) = cancel(&app, &other, &id).await;
    assert_eq!(status, 404, "{body}");
    let (status, _) = cancel(&app, &app.key, &uuid::Uuid::new_v4().to_string()).await;
    assert_eq!(status, 404);
    let (status, body) = cancel(&app, &app.key, "not-a-uuid").await;
    assert_eq!(status, 400, "{body}");
    // The key comes first.
    let (status, body) = cancel(&app, "easel_wrong", &id).await;
    assert_eq!((status, body), (401, json!({})));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submit_that_prefers_to_wait_answers_the_ended_record() {
    let app = TestApp::spawn().await;
    let (status, headers, record) = post_with(
        &app,
        &app.key,
        "/api/v1/imagine",
        &[("Prefer", "wait=30")],
        &json!({"prompt": "a lighthouse at dusk"}),
    )
    .await;
    assert_eq!(status, 200, "{record}");
    assert_eq!(headers["preference-applied"], "wait=30");
    assert_eq!(record["status"], "finished", "{record}");
    assert_eq!(record["image_urls"].as_array().unwrap().len(), 4);
    // The same record as a fetch gives.
    let id = record["task_id"].as_str().unwrap();
    assert_eq!(app.fetch(id).await, record);

    // A follow-up waits too.
    let (status, headers, upscale) = post_with(
        &app,
        &app.key,
        "/api/v1/upscale-1x",
        &[("Prefer", "respond-async, wait")],
        &json!({"parent_task_id": id, "index": 2}),
    )
    .await;
    assert_eq!(status, 200, "{upscale}");
    assert_eq!(headers["preference-applied"], "wait=60");
    assert_eq!(upscale["status"], "finished", "{upscale}");
    assert!(upscale["image_url"].is_string(), "{upscale}");

    // Without the preference, the answer is the id alone, as before.
    let (status, headers, body) = post_with(
        &app,
        &app.key,
        "/api/v1/imagine",
        &[("Prefer", "return=minimal")],
        &json!({"prompt": "no waiting"}),
    )
    .await;
    assert_eq!(status, 200);
    assert!(headers.get("preference-applied").is_none());
    assert_eq!(body.as_object().unwrap().len(), 1, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_that_runs_out_answers_the_task_as_it_is() {
    let app = TestApp::spawn_with(|c| c.worker.workers = 0).await;
    let id = app.imagine(json!({"prompt": "never picked up"})).await;
    let (status, headers, record) = get_with(
        &app,
        &app.key,
        &format!("/api/v1/tasks/{id}"),
        &[("Prefer", "wait=1")],
    )
    .await;
    assert_eq!(status, 200, "{record}");
    assert_eq!(headers["preference-applied"], "wait=1");
    assert_eq!(record["status"], "pending");
    // Nobody is left watching the task.
    assert_eq!(app.store.wakeups().events.listened().0, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_requests_are_answered_when_their_task_is_canceled() {
    let app = TestApp::spawn_with(|c| c.worker.workers = 0).await;
    let id = app.imagine(json!({"prompt": "waited on"})).await;
    let other = app.imagine(json!({"prompt": "not waited on"})).await;
    let waiters: Vec<_> = (0..20)
        .map(|_| {
            let (http, url, key) = (
                app.http.clone(),
                app.url(&format!("/api/v1/tasks/{id}")),
                app.key.clone(),
            );
            tokio::spawn(async move {
                let res = http
                    .get(url)
                    .header("Authorization", key)
                    .header("Prefer", "wait=60")
                    .send()
                    .await
                    .unwrap();
                common::split(res).await
            })
        })
        .collect();
    // Every waiter is registered, on one entry for the task.
    wait_for(WITHIN, || async {
        (app.store.wakeups().events.listened().0 == 1).then_some(())
    })
    .await
    .expect("the waiters watch their task");
    // Another task's end wakes none of them.
    let (status, _) = cancel(&app, &app.key, &other).await;
    assert_eq!(status, 200);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(waiters.iter().all(|w| !w.is_finished()));

    let (status, _) = cancel(&app, &app.key, &id).await;
    assert_eq!(status, 200);
    for waiter in waiters {
        let (status, record) = tokio::time::timeout(WITHIN, waiter)
            .await
            .expect("woken by the cancel")
            .unwrap();
        assert_eq!(status, 200, "{record}");
        assert_eq!(record["status"], "canceled");
    }
    assert_eq!(app.store.wakeups().events.listened().0, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_wait_is_a_400_after_the_key_is_checked() {
    let app = TestApp::spawn_with(|c| c.worker.workers = 0).await;
    let id = app.imagine(json!({"prompt": "something"})).await;
    for bad in ["wait=0", "wait=61", "wait=soon"] {
        let (status, _, body) = post_with(
            &app,
            &app.key,
            "/api/v1/imagine",
            &[("Prefer", bad)],
            &json!({"prompt": "x"}),
        )
        .await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert_eq!(body["errors"][0]["code"], "invalid_value");
        assert!(
            body["errors"][0]["msg"]
                .as_str()
                .unwrap()
                .starts_with("Prefer: wait must be"),
            "{body}"
        );
        let (status, _, body) = get_with(
            &app,
            &app.key,
            &format!("/api/v1/tasks/{id}"),
            &[("Prefer", bad)],
        )
        .await;
        assert_eq!(status, 400, "{bad}: {body}");
        let (status, _, body) = get_with(
            &app,
            "easel_wrong",
            &format!("/api/v1/tasks/{id}"),
            &[("Prefer", bad)],
        )
        .await;
        assert_eq!((status, body), (401, json!({})));
    }
    // Nothing was stored by the refused submits.
    let (_, page) = app.get("/api/v1/tasks").await;
    assert_eq!(page["tasks"].as_array().unwrap().len(), 1, "{page}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_longest_wait_outlasts_the_idle_connection_timeout() {
    if common::sqlite_only("the HTTP server's connection timeouts") {
        return;
    }
    // A connection is closed after 60 s of silence between requests; a request that waits is
    // not silence, so the full minute ends in an answer, not a closed connection.
    let app = TestApp::spawn_with(|c| c.worker.workers = 0).await;
    let id = app
        .imagine(json!({"prompt": "waited on for a minute"}))
        .await;
    let (status, headers, record) = get_with(
        &app,
        &app.key,
        &format!("/api/v1/tasks/{id}"),
        &[("Prefer", "wait")],
    )
    .await;
    assert_eq!(status, 200, "{record}");
    assert_eq!(headers["preference-applied"], "wait=60");
    assert_eq!(record["status"], "pending");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_submit_lets_its_idempotency_key_go_and_a_replay_can_wait_too() {
    let app = TestApp::spawn_with(|c| c.worker.workers = 0).await;
    let body = json!({"prompt": "submitted once, asked twice"});
    let first = {
        let (http, url, key, body) = (
            app.http.clone(),
            app.url("/api/v1/imagine"),
            app.key.clone(),
            body.clone(),
        );
        tokio::spawn(async move {
            let res = http
                .post(url)
                .header("Authorization", key)
                .header("Idempotency-Key", "order-17")
                .header("Prefer", "wait=5")
                .json(&body)
                .send()
                .await
                .unwrap();
            common::split(res).await
        })
    };
    // Once the task is stored, the first request only waits: the same key is a replay, not 409.
    wait_for(WITHIN, || async {
        let (_, page) = app.get("/api/v1/tasks").await;
        (page["tasks"].as_array().unwrap().len() == 1).then_some(())
    })
    .await
    .expect("the first submit stores its task");
    // The key is let go as soon as the store has answered, a moment after the commit that makes
    // the task visible: a 409 in that moment says to retry shortly, and the retry is a replay
    // long before the first request's 5 s wait is over.
    let (status, headers, replay) = wait_for(Duration::from_secs(2), || async {
        let answer = post_with(
            &app,
            &app.key,
            "/api/v1/imagine",
            &[("Idempotency-Key", "order-17")],
            &body,
        )
        .await;
        (answer.0 != 409).then_some(answer)
    })
    .await
    .expect("the key is let go while the first request waits");
    assert_eq!(status, 200, "{replay}");
    assert_eq!(headers["idempotent-replayed"], "true");
    let id = replay["task_id"].as_str().unwrap().to_string();
    assert_eq!(replay.as_object().unwrap().len(), 1, "{replay}");

    // A replay that prefers to wait answers the task's record, marked as a replay.
    let (status, headers, record) = post_with(
        &app,
        &app.key,
        "/api/v1/imagine",
        &[("Idempotency-Key", "order-17"), ("Prefer", "wait=1")],
        &body,
    )
    .await;
    assert_eq!(status, 200, "{record}");
    assert_eq!(headers["idempotent-replayed"], "true");
    assert_eq!(headers["preference-applied"], "wait=1");
    assert_eq!(record["task_id"], id.as_str());
    assert_eq!(record["status"], "pending");

    let (status, record) = first.await.unwrap();
    assert_eq!(status, 200, "{record}");
    assert_eq!(record["task_id"], id.as_str());
    assert_eq!(record["status"], "pending", "the wait ran out: {record}");
    let (_, page) = app.get("/api/v1/tasks").await;
    assert_eq!(page["tasks"].as_array().unwrap().len(), 1, "one task");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_can_hold_waits_shorter_and_the_answer_says_how_long() {
    let app = TestApp::spawn_with(|c| {
        c.worker.workers = 0;
        c.limits.max_wait = Duration::from_secs(1);
    })
    .await;
    let (status, headers, record) = post_with(
        &app,
        &app.key,
        "/api/v1/imagine",
        &[("Prefer", "wait=30")],
        &json!({"prompt": "held one second"}),
    )
    .await;
    assert_eq!(status, 200, "{record}");
    assert_eq!(headers["preference-applied"], "wait=1");
    assert_eq!(record["status"], "pending");
    let id = record["task_id"].as_str().unwrap();
    let (status, headers, record) = get_with(
        &app,
        &app.key,
        &format!("/api/v1/tasks/{id}"),
        &[("Prefer", "wait")],
    )
    .await;
    assert_eq!(status, 200, "{record}");
    assert_eq!(headers["preference-applied"], "wait=1");
}
