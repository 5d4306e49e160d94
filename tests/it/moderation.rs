//! Moderation lists as data: written by operators while easel serves (the admin API, `easel
//! moderation`), refusing the next submit on every node, through the spellings that evade a
//! plain word match.

use std::io::Write;
use std::process::Stdio;
use std::time::Duration;

use easel::config::Plan;
use serde_json::{json, Value};

use crate::common::{self, binary::Easel, TestApp};

const LISTS: &str = "/api/v1/admin/moderation/lists";

async fn put(app: &TestApp, key: &str, name: &str, body: Value) -> (u16, Value) {
    let res = app
        .http
        .put(app.url(&format!("{LISTS}/{name}")))
        .header("Authorization", key)
        .json(&body)
        .send()
        .await
        .unwrap();
    common::split(res).await
}

#[tokio::test]
async fn a_list_written_while_serving_refuses_the_next_submit_through_evasions() {
    let app = TestApp::spawn_with(|c| c.worker.workers = 0).await;
    let (status, body) = put(
        &app,
        &app.key,
        "adult",
        json!({"terms": ["nsfw", "nude", "re:\\bn+u+d+e+s\\b"]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["name"], "adult");

    let before = app.stored_tasks().await;
    for prompt in [
        "a nsfw cat",
        "a ｎｓｆｗ cat",
        "a ns\u{200B}fw cat",
        "a n s f w cat",
        "a n.s.f.w cat",
        "a nüde figure",
        "so nnuuddees",
    ] {
        let (status, answer) = app
            .post("/api/v1/imagine", &json!({ "prompt": prompt }))
            .await;
        assert_eq!(status, 400, "{prompt:?}: {answer}");
        assert_eq!(answer["errors"][0]["code"], "content_policy", "{answer}");
        let message = answer["errors"][0]["msg"].as_str().unwrap();
        assert!(message.contains("\"adult\""), "names the list: {message}");
        assert!(!message.contains("nsfw"), "not the term: {message}");
    }
    assert_eq!(app.stored_tasks().await, before, "nothing stored");
    // The same letters in ordinary words pass; so does a negative prompt that names them.
    for body in [
        json!({"prompt": "Scunthorpe at dawn"}),
        json!({"prompt": "a nudibranch on a reef"}),
        json!({"prompt": "a portrait", "negative_prompt": "nude, nsfw"}),
    ] {
        let (status, answer) = app.post("/api/v1/imagine", &body).await;
        assert_eq!(status, 200, "{body}: {answer}");
    }

    // Bad lists change nothing.
    for (name, body, field) in [
        ("adult", json!({"terms": ["re:("]}), "terms: "),
        ("adult", json!({"terms": ["?!"]}), "terms: "),
        ("adult", json!({"terms": "nsfw"}), "terms: "),
        ("adult", json!({"terms": [5]}), "terms[0]: "),
        ("adult", json!({"terms": [], "color": "red"}), "color: "),
        ("adult", json!({}), "terms: "),
        ("Adult!", json!({"terms": ["x"]}), "name: "),
    ] {
        let (status, answer) = put(&app, &app.key, name, body.clone()).await;
        assert_eq!(status, 400, "{body}: {answer}");
        let message = answer["errors"][0]["msg"].as_str().unwrap();
        assert!(message.starts_with(field), "{body}: {message}");
    }
    let (status, lists) = app.get(LISTS).await;
    assert_eq!(status, 200, "{lists}");
    assert_eq!(
        lists["lists"][0]["terms"].as_array().unwrap().len(),
        3,
        "{lists}"
    );

    // Only operators see or change lists.
    let other = app.key_for("someone@example.com").await;
    let (status, _) = app.get_as(&other, LISTS).await;
    assert_eq!(status, 404);
    let (status, _) = put(&app, &other, "adult", json!({"terms": []})).await;
    assert_eq!(status, 404);

    // Removed: the prompt passes again.
    let removed = app
        .http
        .delete(app.url(&format!("{LISTS}/adult")))
        .header("Authorization", &app.key)
        .send()
        .await
        .unwrap();
    assert_eq!(removed.status(), 204);
    let (status, answer) = app
        .post("/api/v1/imagine", &json!({"prompt": "a nsfw cat"}))
        .await;
    assert_eq!(status, 200, "{answer}");
    let again = app
        .http
        .delete(app.url(&format!("{LISTS}/adult")))
        .header("Authorization", &app.key)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 404);

    // Each change is in the audit log, who and what, before and after; the refused ones are not.
    let (status, audit) = app.get("/api/v1/admin/audit").await;
    assert_eq!(status, 200, "{audit}");
    let changes: Vec<&Value> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e["action"]
                .as_str()
                .unwrap_or("")
                .starts_with("moderation.")
        })
        .collect();
    assert_eq!(changes.len(), 2, "{audit}");
    let removed = changes[0];
    assert_eq!(
        removed["action"], "moderation.remove",
        "newest first: {audit}"
    );
    assert_eq!(removed["before"]["terms"].as_array().unwrap().len(), 3);
    assert!(removed["after"]["terms"].is_null());
    let put = changes[1];
    assert_eq!(put["action"], "moderation.put");
    assert!(
        put["actor"].as_str().unwrap().starts_with("admin:"),
        "{put}"
    );
    assert_eq!(put["after"]["list"], "adult");
}

/// Each plan applies the lists it names; a plan that names none gets every list. A plan change
/// by an operator applies to the next submit.
#[tokio::test]
async fn each_plan_applies_the_lists_it_names_and_a_plan_change_applies_at_once() {
    let app = TestApp::spawn_with(|c| {
        c.worker.workers = 0;
        c.plans.plans.insert(
            "self-hosted".into(),
            Plan {
                moderation: Some(vec!["adult".into()]),
                ..Plan::default()
            },
        );
        c.plans.plans.insert(
            "brands".into(),
            Plan {
                moderation: Some(vec!["brand-safety".into()]),
                ..Plan::default()
            },
        );
        c.plans.plans.insert("every".into(), Plan::default());
    })
    .await;
    for (name, term) in [("adult", "nsfw"), ("brand-safety", "acme")] {
        let (status, body) = put(&app, &app.key, name, json!({ "terms": [term] })).await;
        assert_eq!(status, 200, "{body}");
    }
    let (id, key) = app.account_with("plans@example.com", None).await;
    let submit = |prompt: &'static str| {
        let key = key.clone();
        let app = &app;
        async move {
            let (status, body) = app
                .post_as(&key, "/api/v1/imagine", &json!({ "prompt": prompt }))
                .await;
            match status {
                200 => None,
                400 => Some(body["errors"][0]["msg"].as_str().unwrap().to_string()),
                other => panic!("{prompt}: {other} {body}"),
            }
        }
    };
    // The default plan names `adult` only.
    assert!(submit("a nsfw cat").await.unwrap().contains("\"adult\""));
    assert_eq!(submit("an acme anvil").await, None);

    for (plan, nsfw, acme) in [
        ("brands", false, true),
        ("every", true, true),
        ("self-hosted", true, false),
    ] {
        let res = app
            .http
            .patch(app.url(&format!("/api/v1/admin/accounts/{id}")))
            .header("Authorization", &app.key)
            .json(&json!({ "plan": plan }))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200, "{plan}");
        assert_eq!(submit("a nsfw cat").await.is_some(), nsfw, "{plan}: nsfw");
        assert_eq!(
            submit("an acme anvil").await.is_some(),
            acme,
            "{plan}: acme"
        );
    }
}

/// Two nodes on one PostgreSQL database; a list added with `easel moderation add` (against the
/// database, no node told) refuses the next submit on both within the refresh time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_added_by_the_cli_reaches_both_postgres_nodes_within_the_refresh() {
    let Some(postgres) = common::postgres() else {
        let _ = writeln!(
            std::io::stderr(),
            "tests/it/moderation.rs: skipped (EASEL_TEST_POSTGRES not set; scripts/test.sh sets it)"
        );
        return;
    };
    let database_url = common::fresh_postgres_url(&postgres);
    let env = [
        ("EASEL_DATABASE_URL", database_url.as_str()),
        ("EASEL_DATABASE_MAX_CONNECTIONS", "4"),
    ];
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = Easel::start_serve(dir_a.path(), &["--role", "api"], &env, Stdio::inherit());
    let b = Easel::start_serve(dir_b.path(), &["--role", "api"], &env, Stdio::inherit());
    let key = a.first_key.clone().expect("the first node prints a key");
    let body = json!({"prompt": "a quiet harbour at dawn"});
    for node in [&a, &b] {
        let (status, answer) = node.post(&key, "/api/v1/imagine", body.clone()).await;
        assert_eq!(status, 200, "{answer}");
    }

    let out = common::binary::command(dir_a.path(), &env)
        .args(["moderation", "add", "places", "harbour", "re:^lighthouse"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let added = std::time::Instant::now();
    for node in [&a, &b] {
        let refused = common::wait_for(Duration::from_secs(5), || async {
            let (status, answer) = node.post(&key, "/api/v1/imagine", body.clone()).await;
            (status == 400).then_some(answer)
        })
        .await
        .expect("refused within the refresh time");
        assert_eq!(refused["errors"][0]["code"], "content_policy", "{refused}");
    }
    let took = added.elapsed();
    eprintln!("both nodes refused {took:?} after the list was added");
    assert!(took < Duration::from_secs(4), "{took:?}");

    // A pattern that does not compile is refused by the command, and nothing changes.
    let out = common::binary::command(dir_a.path(), &env)
        .args(["moderation", "add", "places", "re:("])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("is not a pattern"), "{stderr}");
    let out = common::binary::command(dir_a.path(), &env)
        .args(["moderation", "show", "places"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "harbour\nre:^lighthouse\n"
    );
}
