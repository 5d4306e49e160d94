//! Batches through the HTTP API, on either store (EASEL_TEST_STORE=postgres): `POST
//! /api/v1/batch`, and an imagine prompt's `--repeat N` and `{a, b}` permutations. All are
//! stored or none (a bad member, too many, too few credits), one `Idempotency-Key` covers the
//! batch, each task is an ordinary task (record, webhook), and a batch is fairly queued.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::receiver::{Behaviour, Receiver};
use crate::common::{self, TestApp};
use crate::fairness::queue_only;

/// POST `body` to `path` with `key` and an `Idempotency-Key` if given: status, whether it was
/// a replay, and the answer.
async fn send(
    app: &TestApp,
    key: &str,
    path: &str,
    idempotency: Option<&str>,
    body: &Value,
) -> (u16, bool, Value) {
    let mut req = app
        .http
        .post(app.url(path))
        .header("Authorization", key)
        .json(body);
    if let Some(k) = idempotency {
        req = req.header("Idempotency-Key", k);
    }
    let res = req.send().await.unwrap();
    let replayed = res.headers().get("idempotent-replayed").is_some();
    let (status, body) = common::split(res).await;
    (status, replayed, body)
}

fn imagine(prompt: &str) -> Value {
    json!({"operation": "imagine", "body": {"prompt": prompt}})
}

fn ids(answer: &Value) -> Vec<String> {
    answer["task_ids"]
        .as_array()
        .unwrap_or_else(|| panic!("no task_ids: {answer}"))
        .iter()
        .map(|id| id.as_str().unwrap().to_string())
        .collect()
}

fn first_error(body: &Value) -> (String, String) {
    let e = &body["errors"][0];
    (
        e["code"].as_str().unwrap_or_default().to_string(),
        e["msg"].as_str().unwrap_or_default().to_string(),
    )
}

#[tokio::test]
async fn a_batch_stores_ordinary_tasks_in_order_each_with_its_webhook() {
    let app = TestApp::spawn().await;
    let receiver = Receiver::start(vec![Behaviour::Status(200)]).await;
    let requests = json!({"requests": [
        {"operation": "imagine",
         "body": {"prompt": "a red kite", "webhook_url": receiver.url,
                  "metadata": {"n": 1}}},
        imagine("a blue kite --ar 2:1"),
        {"operation": "shorten", "body": {"prompt": "a very long prompt about a green kite"}},
    ]});
    let (status, _, answer) = send(&app, &app.key, "/api/v1/batch", None, &requests).await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.get("task_id").is_none(), "{answer}");
    let ids = ids(&answer);
    assert_eq!(ids.len(), 3);
    let records: Vec<Value> = {
        let mut records = Vec::new();
        for id in &ids {
            records.push(app.wait_final(id, Duration::from_secs(30)).await);
        }
        records
    };
    assert_eq!(records[0]["prompt"], "a red kite");
    assert_eq!(records[0]["metadata"], json!({"n": 1}));
    assert_eq!(records[1]["prompt"], "a blue kite");
    assert_eq!(records[1]["aspect_ratio"], "2:1");
    assert_eq!(records[2]["task_type"], "shorten");
    for record in &records {
        assert_eq!(record["status"], "finished", "{record}");
    }
    // The first has its own webhook, delivered as any task's.
    app.wait_webhook(&ids[0], "delivered", Duration::from_secs(20))
        .await;
    let bodies: Vec<Value> = receiver
        .received()
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect();
    assert!(bodies.iter().any(|b| b["task_id"] == ids[0].as_str()));
    // And the tasks are the account's, listed like any.
    let (_, list) = app.get("/api/v1/tasks").await;
    let listed: Vec<&str> = list["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["task_id"].as_str().unwrap())
        .collect();
    for id in &ids {
        assert!(listed.contains(&id.as_str()), "{id} listed");
    }
}

#[tokio::test]
async fn a_bad_member_too_many_requests_or_a_bad_shape_store_nothing() {
    let app = TestApp::spawn_with(|c| {
        c.worker.workers = 0;
        c.plans.default_mut().batch_max = 3;
    })
    .await;
    let before = app.stored_tasks().await;
    let missing = uuid::Uuid::new_v4().to_string();
    for (body, status, code, starts) in [
        (
            json!({"requests": [imagine("a cat"), imagine(""), imagine("a dog")]}),
            400,
            "invalid_value",
            "requests[1].prompt: ",
        ),
        (
            json!({"requests": [imagine("a cat"), {"operation": "paint", "body": {}}]}),
            400,
            "invalid_value",
            "requests[1].operation: ",
        ),
        (
            json!({"requests": [imagine("a cat"), {"operation": "imagine"}]}),
            400,
            "missing_field",
            "requests[1].body: ",
        ),
        (
            json!({"requests": [imagine("a cat"), imagine("a {red, blue} dog")]}),
            400,
            "invalid_value",
            "requests[1].prompt: {...} permutations",
        ),
        (
            json!({"requests": [imagine("a cat --repeat 2")]}),
            400,
            "invalid_value",
            "requests[0].prompt: --repeat",
        ),
        (
            json!({"requests": [imagine("a"), imagine("b"), imagine("c"), imagine("d")]}),
            400,
            "invalid_value",
            "requests: holds 4 requests, more than the plan's batch_max of 3",
        ),
        (json!({"requests": []}), 400, "invalid_value", "requests: "),
        (json!({"requests": "x"}), 400, "invalid_type", "requests: "),
        (json!({}), 400, "missing_field", "requests: "),
        (
            json!({"requests": [imagine("a cat"),
                                {"operation": "upscale-1x",
                                 "body": {"parent_task_id": missing, "index": 1}}]}),
            404,
            "task_not_found",
            "",
        ),
    ] {
        let (got, _, answer) = send(&app, &app.key, "/api/v1/batch", None, &body).await;
        assert_eq!(got, status, "{body}: {answer}");
        let (got_code, msg) = first_error(&answer);
        assert_eq!(got_code, code, "{body}: {answer}");
        assert!(msg.starts_with(starts), "{body}: {msg}");
    }
    assert_eq!(app.stored_tasks().await, before, "nothing was stored");
    // A key that is not live learns nothing of the body.
    let (status, _, _) = send(
        &app,
        "easel_notakey",
        "/api/v1/batch",
        None,
        &json!({"requests": []}),
    )
    .await;
    assert_eq!(status, 401);
}

#[tokio::test]
async fn a_batch_over_the_accounts_credits_stores_nothing() {
    let app = TestApp::spawn_with(|c| {
        c.worker.workers = 0;
        c.accounts.costs.insert("imagine".into(), 4);
    })
    .await;
    let (account, key) = app.account_with("thrifty@example.com", Some(10)).await;
    let before = app.stored_tasks().await;
    let three = json!({"requests": [imagine("a"), imagine("b"), imagine("c")]});
    let (status, _, answer) = send(&app, &key, "/api/v1/batch", None, &three).await;
    assert_eq!(status, 402, "{answer}");
    let (code, msg) = first_error(&answer);
    assert_eq!(code, "insufficient_credits");
    assert!(msg.contains("batch of 3 tasks, which costs 12"), "{msg}");
    assert_eq!(app.stored_tasks().await, before, "nothing was stored");
    let (_, me) = app.get_as(&key, "/api/v1/account").await;
    assert_eq!(me["credits"], 10, "nothing was charged: {me}");
    // A prompt's --repeat is the same batch.
    let (status, answer) = app
        .post_as(&key, "/api/v1/imagine", &json!({"prompt": "a --repeat 3"}))
        .await;
    assert_eq!(status, 402, "{answer}");
    assert_eq!(app.stored_tasks().await, before, "nothing was stored");
    // Two fit: both stored, each charged with a ledger row.
    let two = json!({"requests": [imagine("a"), imagine("b")]});
    let (status, _, answer) = send(&app, &key, "/api/v1/batch", None, &two).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(app.stored_tasks().await, before + 2);
    let (_, me) = app.get_as(&key, "/api/v1/account").await;
    assert_eq!(me["credits"], 2, "{me}");
    let ledger = app.store.credit_ledger(&account, 100).await.unwrap();
    assert_eq!(ledger.iter().filter(|r| r.delta == -4).count(), 2);
}

#[tokio::test]
async fn one_idempotency_key_covers_the_whole_batch() {
    let app = queue_only(|_| {}).await;
    let body = json!({"requests": [imagine("a"), imagine("b"), imagine("c")]});
    let (status, replayed, first) = send(&app, &app.key, "/api/v1/batch", Some("k1"), &body).await;
    assert_eq!((status, replayed), (200, false), "{first}");
    let stored = app.stored_tasks().await;
    let (status, replayed, again) = send(&app, &app.key, "/api/v1/batch", Some("k1"), &body).await;
    assert_eq!((status, replayed), (200, true), "{again}");
    assert_eq!(again, first, "the same ids, in the same order");
    assert_eq!(app.stored_tasks().await, stored, "nothing more stored");
    // Another body with the same key: refused, as for one submit.
    let other = json!({"requests": [imagine("a"), imagine("b")]});
    let (status, _, answer) = send(&app, &app.key, "/api/v1/batch", Some("k1"), &other).await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(first_error(&answer).0, "idempotency_key_reused");
    // The same body to a single submit's route is another request.
    let (status, _, answer) = send(
        &app,
        &app.key,
        "/api/v1/imagine",
        Some("k1"),
        &json!({"prompt": "a"}),
    )
    .await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(app.stored_tasks().await, stored);

    // A --repeat submit's key replays its whole answer.
    let repeat = json!({"prompt": "a gull --repeat 3"});
    let (status, _, first) = send(&app, &app.key, "/api/v1/imagine", Some("k2"), &repeat).await;
    assert_eq!(status, 200, "{first}");
    let (status, replayed, again) =
        send(&app, &app.key, "/api/v1/imagine", Some("k2"), &repeat).await;
    assert_eq!((status, replayed), (200, true), "{again}");
    assert_eq!(again, first);
    assert_eq!(ids(&again).len(), 3);
    assert_eq!(app.stored_tasks().await, stored + 3);
}

#[tokio::test]
async fn repeat_and_permutations_make_a_task_per_prompt() {
    let app = queue_only(|c| c.plans.default_mut().batch_max = 6).await;
    let prompts = |answer: &Value| {
        let app = &app;
        let ids = ids(answer);
        async move {
            let mut prompts = Vec::new();
            for id in &ids {
                let record = app.fetch(id).await;
                assert!(
                    record["parameters"].get("repeat").is_none(),
                    "--repeat is not kept: {record}"
                );
                prompts.push(record["prompt"].as_str().unwrap().to_string());
            }
            prompts
        }
    };
    let post = |body: Value| {
        let app = &app;
        async move { app.post("/api/v1/imagine", &body).await }
    };

    let (status, answer) = post(json!({"prompt": "a {red, blue} bird --repeat 2 --ar 2:1"})).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["task_id"], answer["task_ids"][0], "{answer}");
    assert_eq!(
        prompts(&answer).await,
        ["a red bird", "a red bird", "a blue bird", "a blue bird"]
    );
    let (_, answer) = post(json!({"prompt": "a bat --r 3"})).await;
    assert_eq!(prompts(&answer).await, ["a bat"; 3]);
    let (_, answer) = post(json!({"prompt": "a {big {red, blue}, small} bird"})).await;
    assert_eq!(
        prompts(&answer).await,
        ["a big red bird", "a big blue bird", "a small bird"]
    );
    // Permutations reach the parameters too.
    let (_, answer) = post(json!({"prompt": "a fox --ar {1:1, 2:1}"})).await;
    let ratios: Vec<Value> = {
        let mut ratios = Vec::new();
        for id in ids(&answer) {
            ratios.push(app.fetch(&id).await["aspect_ratio"].clone());
        }
        ratios
    };
    assert_eq!(ratios, [json!("1:1"), json!("2:1")]);
    // Escaped braces stay text: one task, answered as one.
    let (status, answer) = post(json!({"prompt": "a \\{red\\} bird"})).await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.get("task_ids").is_none(), "{answer}");
    let record = app.fetch(answer["task_id"].as_str().unwrap()).await;
    assert!(
        record["prompt"].as_str().unwrap().contains("{red"),
        "{record}"
    );

    // Over batch_max, or unbalanced: 400 and nothing stored.
    let before = app.stored_tasks().await;
    for (prompt, says) in [
        (
            "a {red, blue, green} bird --repeat 3",
            "make 9 tasks, more than the plan's batch_max of 6",
        ),
        ("a cat --repeat 7", "make 7 tasks"),
        ("{a,b}{c,d}{e,f}", "more than 6"),
        ("a {red, blue bird", "has a { without its }"),
    ] {
        let (status, answer) = post(json!({ "prompt": prompt })).await;
        assert_eq!(status, 400, "{prompt}: {answer}");
        let (code, msg) = first_error(&answer);
        assert_eq!(code, "invalid_value");
        assert!(
            msg.starts_with("prompt: ") && msg.contains(says),
            "{prompt}: {msg}"
        );
    }
    assert_eq!(app.stored_tasks().await, before);
}

#[tokio::test]
async fn a_forty_task_batch_does_not_hold_back_another_accounts_task() {
    let app = queue_only(|c| c.plans.default_mut().batch_max = 40).await;
    let mut owners = HashMap::new();
    let (a, a_key) = app.account_with("bulk@example.com", None).await;
    let (b, b_key) = app.account_with("single@example.com", None).await;
    owners.insert(a, 'a');
    owners.insert(b, 'b');
    let requests: Vec<Value> = (0..40).map(|i| imagine(&format!("kite {i}"))).collect();
    let (status, _, answer) = send(
        &app,
        &a_key,
        "/api/v1/batch",
        None,
        &json!({ "requests": requests }),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    app.imagine_as(&b_key, json!({"prompt": "a lone kite"}))
        .await;
    // Claimed one at a time, as one worker would.
    let mut order = String::new();
    while let Some(task) = app.store.claim_task("one", 60_000).await.unwrap() {
        order.push(owners[&task.account_id]);
    }
    assert_eq!(order.len(), 41);
    assert!(
        order.starts_with("ab"),
        "B's task goes second, not after A's batch: {order}"
    );
}
