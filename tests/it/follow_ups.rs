//! What a caller sends beside an operation and gets back to act on: `metadata` echoed unchanged in
//! records and every webhook, `actions` ready to send on every finished image task, and Apiframe
//! v1's older routes answered as easel's operations.

use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

use crate::common::receiver::{Behaviour, Receiver};
use crate::common::{wait_for, TestApp};
use serde_json::{json, Value};

const LONG: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extras_stored_in_the_tasks_row_before_sqlites_migration_0026_move_out_and_are_kept() {
    if crate::common::sqlite_only("SQLite's migration that moves extras out of the tasks' rows") {
        return;
    }
    let (dir, url, mut conn) = crate::common::database_before(26).await;
    for statement in [
        "INSERT INTO accounts (id, email, signing_secret, created_at)
         VALUES ('acct-1', 'old@example.com', 's', 0)",
        // A task with extras and one without, as the release before the migration stored them.
        r#"INSERT INTO tasks (account_id, task_type, status, priority, prompt, aspect_ratio,
             process_mode, seed, created_at, extras)
         VALUES ('acct-1', 'imagine', 'pending', 1, 'an old lighthouse', '1:1', 'fast', 1, 0,
             '{"metadata":{"order":"A-1","lines":[1,2]}}'),
             ('acct-1', 'imagine', 'pending', 1, 'an old harbour', '1:1', 'fast', 2, 1, NULL)"#,
    ] {
        sqlx::query(statement).execute(&mut conn).await.unwrap();
    }
    drop(conn);
    let mut config = crate::common::test_config(dir.path());
    config.database.url = Some(url);
    let app = TestApp::start(dir, config).await;
    let key = easel::auth::create_key(app.store.as_ref(), "acct-1", "old")
        .await
        .unwrap();
    // Both ran (the worker read the moved extras with the claim) and keep what they had.
    let (status, page) = app.get_as(&key, "/api/v1/tasks").await;
    assert_eq!(status, 200, "{page}");
    for task in page["tasks"].as_array().unwrap() {
        let id = task["task_id"].as_str().unwrap();
        let record = app.wait_final_as(&key, id, LONG).await;
        assert_eq!(record["status"], "finished", "{record}");
        match record["prompt"].as_str().unwrap() {
            "an old lighthouse" => {
                assert_eq!(record["metadata"], json!({"order": "A-1", "lines": [1, 2]}))
            }
            _ => assert!(record.get("metadata").is_none(), "{record}"),
        }
    }
    // A new task's extras go to their own table too; the tasks' rows have no column for them.
    let body = json!({"prompt": "a new lighthouse", "metadata": {"order": "B-2"}});
    let (status, answer) = app.post_as(&key, "/api/v1/imagine", &body).await;
    assert_eq!(status, 200, "{answer}");
    let mut db = crate::common::database(&app.config).await;
    let (column, rows): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT COUNT(*) FROM pragma_table_info('tasks') WHERE name = 'extras'),
                (SELECT COUNT(*) FROM task_extras)",
    )
    .fetch_one(&mut db)
    .await
    .unwrap();
    assert_eq!((column, rows), (0, 2));
    let record = app
        .wait_final_as(&key, answer["task_id"].as_str().unwrap(), LONG)
        .await;
    assert_eq!(record["metadata"], json!({"order": "B-2"}));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_comes_back_unchanged_in_the_record_and_every_webhook() {
    let receiver = Receiver::start(vec![Behaviour::Status(200)]).await;
    let app = TestApp::spawn_with(|c| c.worker.blocked_terms = vec!["forbidden".into()]).await;
    // Key order, nesting and every JSON type, as the caller wrote them.
    let metadata = json!({"zeta": 1, "alpha": {"list": [true, null, 2.5, "x"]}, "empty": {}});
    let body = json!({"prompt": "a red fox", "metadata": metadata, "webhook_url": receiver.url});
    let record = app.finished("imagine", body.clone(), LONG).await;
    assert_eq!(
        serde_json::to_string(&record["metadata"]).unwrap(),
        serde_json::to_string(&metadata).unwrap()
    );
    let failing =
        json!({"prompt": "a forbidden fox", "metadata": {"n": 2}, "webhook_url": receiver.url});
    let (_, answer) = app.post("/api/v1/imagine", &failing).await;
    let failed = app
        .wait_final(answer["task_id"].as_str().unwrap(), LONG)
        .await;
    assert_eq!(failed["status"], "failed");
    assert_eq!(failed["metadata"], json!({"n": 2}));
    wait_for(Duration::from_secs(10), || async {
        (receiver.count() == 2).then_some(())
    })
    .await
    .expect("two deliveries");
    let payloads: Vec<Value> = receiver
        .received()
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect();
    let finished_payload = payloads.iter().find(|p| p["status"] == "finished").unwrap();
    let raw = receiver
        .received()
        .iter()
        .map(|r| String::from_utf8(r.body.to_vec()).unwrap())
        .find(|raw| raw.contains(r#""status":"finished""#))
        .unwrap();
    assert!(raw.contains(r#""metadata":{"zeta":1,"alpha":"#), "{raw}");
    assert_eq!(finished_payload["metadata"], metadata);
    // A caller who sent metadata opted into the newer payload: the actions come with it.
    assert_eq!(finished_payload["actions"], record["actions"]);
    let failed_payload = payloads.iter().find(|p| p["status"] == "failed").unwrap();
    assert_eq!(failed_payload["metadata"], json!({"n": 2}));

    // A follow-up carries only its own.
    let parent = record["task_id"].as_str().unwrap();
    let child = app
        .finished(
            "upscale-1x",
            json!({"parent_task_id": parent, "index": 1}),
            LONG,
        )
        .await;
    assert!(child.get("metadata").is_none(), "{child}");

    // Bad metadata is refused naming the rule, and nothing is stored.
    let before = app.get("/api/v1/tasks").await.1["tasks"]
        .as_array()
        .unwrap()
        .len();
    for (bad, rule) in [
        (json!([1, 2]), "must be a JSON object"),
        (json!("text"), "must be a JSON object"),
        (
            json!({"k": "x".repeat(4096)}),
            "must be at most 4096 bytes as JSON",
        ),
    ] {
        let (status, answer) = app
            .post("/api/v1/imagine", &json!({"prompt": "p", "metadata": bad}))
            .await;
        assert_eq!(status, 400, "{answer}");
        let message = answer["errors"][0]["msg"].as_str().unwrap();
        assert!(
            message.starts_with(&format!("metadata: {rule}")),
            "{message}"
        );
    }
    let after = app.get("/api/v1/tasks").await.1["tasks"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(before, after);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_action_of_every_finished_task_type_is_accepted_as_sent() {
    let app = TestApp::spawn().await;
    let imagine = app
        .finished("imagine", json!({"prompt": "a lighthouse at dusk"}), LONG)
        .await;
    let labels: Vec<&str> = imagine["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["label"].as_str().unwrap())
        .collect();
    assert_eq!(
        labels,
        ["U1", "U2", "U3", "U4", "🔄", "V1", "V2", "V3", "V4"]
    );
    // Breadth first over task types: each type's first finished task has every one of its
    // actions sent as is, and each must finish; a type seen before is not expanded again.
    let mut seen = BTreeSet::from(["imagine".to_string()]);
    let mut queue = VecDeque::from([imagine]);
    let mut sent = 0;
    while let Some(record) = queue.pop_front() {
        for action in record["actions"].as_array().into_iter().flatten() {
            let op = action["operation"].as_str().unwrap();
            let done = app.finished(op, action["body"].clone(), LONG).await;
            sent += 1;
            assert_eq!(done["task_type"], op);
            assert_eq!(done["parent_task_id"], record["task_id"]);
            if seen.insert(op.to_string()) {
                queue.push_back(done);
            }
        }
    }
    let expected = [
        "imagine",
        "outpaint",
        "pan",
        "reroll",
        "upscale-1x",
        "upscale-alt",
        "upscale-highres",
        "variations",
    ];
    assert_eq!(
        seen.iter().map(String::as_str).collect::<Vec<_>>(),
        expected
    );
    assert!(sent > 40, "{sent}");

    // Text and seed results offer nothing; a task whose images retention removed offers
    // nothing either (tests/it/retention.rs covers the removal itself).
    let described = app
        .finished(
            "describe",
            json!({"image_url": imagine_url(&app).await}),
            LONG,
        )
        .await;
    assert!(described.get("actions").is_none(), "{described}");
}

async fn imagine_url(app: &TestApp) -> String {
    let record = app
        .finished("imagine", json!({"prompt": "a tree"}), LONG)
        .await;
    record["image_urls"][0].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apiframe_v1s_older_routes_answer_as_easels_operations() {
    let app = TestApp::spawn().await;
    let grid = app
        .finished("imagine", json!({"prompt": "a harbour"}), LONG)
        .await;
    let grid_id = grid["task_id"].as_str().unwrap();

    let up = app
        .finished(
            "midjourney/upscale",
            json!({"taskId": grid_id, "index": 2}),
            LONG,
        )
        .await;
    assert_eq!(up["task_type"], "upscale-1x");
    assert_eq!(up["index"], 2);
    assert_eq!(up["parent_task_id"], grid_id);
    let up_id = up["task_id"].as_str().unwrap();

    let vary = app
        .finished(
            "midjourney/vary",
            json!({"taskId": grid_id, "index": "3"}),
            LONG,
        )
        .await;
    assert_eq!(
        (vary["task_type"].as_str(), vary["index"].as_u64()),
        (Some("variations"), Some(3))
    );
    for (strength, index) in [
        (json!(0.8), "strong"),
        (json!(0.2), "subtle"),
        (Value::Null, "subtle"),
    ] {
        let body = json!({"taskId": up_id, "index": 1, "strength": strength});
        let vary = app.finished("midjourney/vary", body.clone(), LONG).await;
        assert_eq!(vary["index"], index, "{strength}");
    }

    let zoom = app
        .finished("midjourney/zoom", json!({"taskId": up_id}), LONG)
        .await;
    assert_eq!(
        (zoom["task_type"].as_str(), zoom["zoom_ratio"].as_f64()),
        (Some("outpaint"), Some(2.0))
    );
    let zoom = app
        .finished(
            "midjourney/zoom",
            json!({"taskId": up_id, "zoom": 1.5}),
            LONG,
        )
        .await;
    assert_eq!(zoom["zoom_ratio"], 1.5);

    // Errors name the alias's own fields where they are its own, the operation's elsewhere.
    let refusals = [
        (
            "midjourney/upscale",
            json!({"index": 1}),
            "taskId: is required",
        ),
        (
            "midjourney/upscale",
            json!({"taskId": 7, "index": 1}),
            "taskId: must be a string",
        ),
        (
            "midjourney/upscale",
            json!({"taskId": grid_id, "index": 9}),
            "index: must be 1, 2, 3 or 4",
        ),
        (
            "midjourney/vary",
            json!({"taskId": up_id, "strength": 3}),
            "strength: must be a number from 0 to 1",
        ),
        (
            "midjourney/zoom",
            json!({"taskId": up_id, "zoom": 5}),
            "zoom_ratio: must be a number from 1 to 2",
        ),
    ];
    for (route, body, message) in refusals {
        let (status, answer) = app.post(&format!("/api/v1/{route}"), &body).await;
        assert_eq!(status, 400, "{route} {body}: {answer}");
        assert_eq!(answer["errors"][0]["msg"], message, "{route} {body}");
    }
}
