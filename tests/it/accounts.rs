//! Accounts through the real interfaces: credits (402, refunds, the ledger), the task listing
//! (`GET /api/v1/tasks`: order, cursors, filters, other accounts), key revocation seen by a
//! second node at once, and `easel accounts` through the real binary. Runs on SQLite, and on
//! PostgreSQL with `EASEL_TEST_STORE=postgres`.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{self, TestApp};
use easel::store::{Accounts, Store};

async fn balance(app: &TestApp, key: &str) -> Value {
    let (status, body) = app.get_as(key, "/api/v1/account").await;
    assert_eq!(status, 200, "{body}");
    body["credits"].clone()
}

async fn ledger_sum(app: &TestApp, account: &str) -> i64 {
    app.store
        .credit_ledger(account, 10_000)
        .await
        .unwrap()
        .iter()
        .map(|r| r.delta)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submits_spend_credits_402_when_short_and_failed_tasks_give_them_back() {
    let app = TestApp::spawn_with(|c| {
        c.accounts.costs.insert("imagine".into(), 3);
        c.accounts.costs.insert("shorten".into(), 2);
    })
    .await;
    let (account, key) = app.account_with("payer@example.com", Some(7)).await;
    assert_eq!(balance(&app, &key).await, json!(7));

    // 3 + 3 of 7: a third imagine is refused, and stores nothing.
    let mut ids = Vec::new();
    for prompt in ["a red fox", "a blue fox"] {
        ids.push(app.imagine_as(&key, json!({ "prompt": prompt })).await);
    }
    assert_eq!(balance(&app, &key).await, json!(1));
    let (status, body) = app
        .post_as(
            &key,
            "/api/v1/imagine",
            &json!({ "prompt": "one too many" }),
        )
        .await;
    assert_eq!(status, 402, "{body}");
    assert_eq!(body["errors"][0]["code"], "insufficient_credits");
    assert!(body["errors"][0]["msg"]
        .as_str()
        .unwrap()
        .contains("costs 3"));
    let (status, body) = app
        .post_as(&key, "/api/v1/shorten", &json!({ "prompt": "a fox" }))
        .await;
    assert_eq!(status, 402, "2 credits are more than 1: {body}");
    let (_, listed) = app.get_as(&key, "/api/v1/tasks?limit=100").await;
    assert_eq!(listed["tasks"].as_array().unwrap().len(), 2, "{listed}");

    // An operator adds 3; a blocked prompt spends them, fails at the worker, and its 3 credits
    // come back with its failure.
    assert!(app.store.set_credits(&account, Some(4)).await.unwrap());
    ids.push(app.imagine_as(&key, json!({ "prompt": "nsfw fox" })).await);
    let failed = app
        .wait_final_as(&key, &ids[2], Duration::from_secs(30))
        .await;
    assert_eq!(failed["status"], "failed", "{failed}");
    for id in &ids[..2] {
        let done = app.wait_final_as(&key, id, Duration::from_secs(30)).await;
        assert_eq!(done["status"], "finished", "{done}");
    }
    assert_eq!(balance(&app, &key).await, json!(4));
    let rows = app.store.credit_ledger(&account, 100).await.unwrap();
    let mut reasons: Vec<(&str, i64)> = rows.iter().map(|r| (r.reason.as_str(), r.delta)).collect();
    reasons.reverse();
    assert_eq!(
        reasons,
        [
            ("signup", 7),
            ("submit", -3),
            ("submit", -3),
            ("admin", 3),
            ("submit", -3),
            ("refund", 3)
        ]
    );
    assert_eq!(rows[0].task_id.as_deref(), Some(ids[2].as_str()));
    assert_eq!(
        ledger_sum(&app, &account).await,
        4,
        "the ledger sums to the balance"
    );

    // An unlimited account is never refused nor charged.
    let (unlimited, free_key) = app.account_with("free@example.com", None).await;
    app.imagine_as(&free_key, json!({ "prompt": "free" })).await;
    assert_eq!(balance(&app, &free_key).await, Value::Null);
    assert!(app
        .store
        .credit_ledger(&unlimited, 10)
        .await
        .unwrap()
        .is_empty());
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_submits_never_spend_more_than_the_balance() {
    // No workers: nothing fails and gives credits back while the submits race.
    let app = TestApp::spawn_with(|c| c.worker.workers = 0).await;
    let (account, key) = app.account_with("race@example.com", Some(41)).await;
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..20 {
        let (http, url, key) = (app.http.clone(), app.url("/api/v1/imagine"), key.clone());
        calls.spawn(async move {
            let res = http
                .post(url)
                .header("Authorization", key)
                .json(&json!({ "prompt": format!("race {i}") }))
                .send()
                .await
                .unwrap();
            res.status().as_u16()
        });
    }
    let mut statuses = Vec::new();
    while let Some(done) = calls.join_next().await {
        statuses.push(done.unwrap());
    }
    // Imagine costs 4 by default: 10 fit in 41.
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        10,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 402).count(),
        10,
        "{statuses:?}"
    );
    assert_eq!(balance(&app, &key).await, json!(1));
    assert_eq!(ledger_sum(&app, &account).await, 1);
    // An operator's change is one more row, and the sum still holds.
    assert!(app.store.set_credits(&account, Some(100)).await.unwrap());
    assert_eq!(balance(&app, &key).await, json!(100));
    assert_eq!(ledger_sum(&app, &account).await, 100);
    app.stop().await;
}

/// Every task of a listing, following `next_cursor` from the first page.
async fn walk(app: &TestApp, key: &str, query: &str, limit: u32) -> (Vec<String>, usize) {
    let mut ids = Vec::new();
    let mut pages = 0;
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/api/v1/tasks?limit={limit}{query}");
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={c}"));
        }
        let (status, body) = app.get_as(key, &path).await;
        assert_eq!(status, 200, "{path}: {body}");
        pages += 1;
        let tasks = body["tasks"].as_array().unwrap();
        assert!(tasks.len() <= limit as usize);
        ids.extend(
            tasks
                .iter()
                .map(|t| t["task_id"].as_str().unwrap().to_string()),
        );
        match body["next_cursor"].as_str() {
            Some(c) => {
                assert_eq!(tasks.len(), limit as usize, "only the last page is short");
                cursor = Some(c.to_string());
            }
            None => return (ids, pages),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_are_listed_newest_first_page_by_page_and_only_the_accounts_own() {
    let app = TestApp::spawn_with(|c| c.worker.workers = 0).await;
    let (_, mine) = app.account_with("lister@example.com", None).await;
    let (_, theirs) = app.account_with("other@example.com", None).await;
    let mut submitted = Vec::new();
    for i in 0..23 {
        let (op, body) = if i % 4 == 3 {
            ("shorten", json!({ "prompt": format!("words {i}") }))
        } else {
            ("imagine", json!({ "prompt": format!("picture {i}") }))
        };
        let (status, body) = app.post_as(&mine, &format!("/api/v1/{op}"), &body).await;
        assert_eq!(status, 200, "{body}");
        submitted.push((body["task_id"].as_str().unwrap().to_string(), op));
        // Another account's tasks in between must never show.
        app.post_as(
            &theirs,
            "/api/v1/imagine",
            &json!({ "prompt": "not yours" }),
        )
        .await;
    }
    let newest_first: Vec<String> = submitted.iter().rev().map(|(id, _)| id.clone()).collect();

    // Default page: 20, with the records' fields.
    let (status, body) = app.get_as(&mine, "/api/v1/tasks").await;
    assert_eq!(status, 200);
    let first = body["tasks"].as_array().unwrap();
    assert_eq!(first.len(), 20);
    assert_eq!(first[0]["task_id"], newest_first[0].as_str());
    assert_eq!(first[0]["status"], "pending");
    assert!(body["next_cursor"].is_string());

    for limit in [1, 5, 7, 23, 100] {
        let (ids, pages) = walk(&app, &mine, "", limit).await;
        assert_eq!(ids, newest_first, "limit {limit}");
        // One read more than the page tells whether another follows: no empty last page.
        assert_eq!(pages, 23usize.div_ceil(limit as usize), "limit {limit}");
    }
    let shorten: Vec<String> = submitted
        .iter()
        .rev()
        .filter(|(_, op)| *op == "shorten")
        .map(|(id, _)| id.clone())
        .collect();
    assert_eq!(walk(&app, &mine, "&type=shorten", 2).await.0, shorten);
    assert_eq!(
        walk(&app, &mine, "&status=pending&type=imagine", 4)
            .await
            .0
            .len(),
        23 - shorten.len()
    );
    assert!(walk(&app, &mine, "&status=finished", 4).await.0.is_empty());

    // The other account sees only its own 23, and never through a cursor of mine.
    let (ids, _) = walk(&app, &theirs, "", 50).await;
    assert_eq!(ids.len(), 23);
    assert!(ids.iter().all(|id| !newest_first.contains(id)));
    let (status, body) = app
        .get_as(
            &theirs,
            &format!("/api/v1/tasks?cursor={}", newest_first[3]),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["errors"][0]["code"], "invalid_value");
    assert!(body["errors"][0]["msg"]
        .as_str()
        .unwrap()
        .starts_with("cursor:"));
    let (status, _) = app
        .get_as(&theirs, &format!("/api/v1/tasks/{}", newest_first[3]))
        .await;
    assert_eq!(status, 404);

    // Bad values are 400 in the contract's shape, naming the parameter; a bad key is 401 first.
    for (query, field) in [
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("limit=ten", "limit"),
        ("limit=-1", "limit"),
        ("cursor=nope", "cursor"),
        ("cursor=6d6f0a52-2f0c-4d8e-9a37-3c5cfe0a9b11", "cursor"),
        ("status=done", "status"),
        ("type=paint", "type"),
        ("limit=5&limit=6", "limit"),
    ] {
        let (status, body) = app.get_as(&mine, &format!("/api/v1/tasks?{query}")).await;
        assert_eq!(status, 400, "{query}: {body}");
        let msg = body["errors"][0]["msg"].as_str().unwrap();
        assert!(msg.starts_with(&format!("{field}:")), "{query}: {msg}");
    }
    let (status, body) = app.get_as("easel_nope", "/api/v1/tasks?limit=0").await;
    assert_eq!((status, body), (401, json!({})));
    let unique: HashSet<&String> = newest_first.iter().collect();
    assert_eq!(unique.len(), 23);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_key_is_refused_at_once_by_every_node() {
    let first = TestApp::spawn_with(|c| c.worker.workers = 0).await;
    // A second node on the same PostgreSQL database, when the suite runs there; on SQLite one
    // node owns the file, so the check is the first node's alone.
    let second = if common::on_postgres() {
        let url = first.config.database.url.clone();
        Some(
            TestApp::spawn_with(move |c| {
                c.database.url = url;
                c.worker.workers = 0;
            })
            .await,
        )
    } else {
        None
    };
    let (account, key) = first.account_with("revoker@example.com", None).await;
    let nodes: Vec<&TestApp> = std::iter::once(&first).chain(second.as_ref()).collect();
    for node in &nodes {
        let (status, _) = node.get_as(&key, "/api/v1/account").await;
        assert_eq!(status, 200);
    }
    let keys = first.store.account_keys(&account).await.unwrap();
    assert_eq!(keys.len(), 1);
    // Not revocable by another account.
    let (other, _) = first.account_with("not-owner@example.com", None).await;
    assert!(!first
        .store
        .revoke_account_key(&other, &keys[0].id)
        .await
        .unwrap());
    assert!(first
        .store
        .revoke_account_key(&account, &keys[0].id)
        .await
        .unwrap());
    // The very next request, on every node, through every kind of route.
    for node in &nodes {
        assert_eq!(node.get_as(&key, "/api/v1/account").await, (401, json!({})));
        assert_eq!(node.get_as(&key, "/api/v1/tasks").await, (401, json!({})));
        assert_eq!(
            node.post_as(&key, "/api/v1/imagine", &json!({ "prompt": "x" }))
                .await,
            (401, json!({}))
        );
    }
    let listed = first.store.account_keys(&account).await.unwrap();
    assert!(listed[0].revoked_at.is_some());
    // Disabling an account refuses its keys the same way, and enabling it gives them back.
    let key2 = easel::auth::create_key(first.store.as_ref(), &account, "second")
        .await
        .unwrap();
    assert!(first.store.set_disabled(&account, true).await.unwrap());
    for node in &nodes {
        assert_eq!(
            node.get_as(&key2, "/api/v1/account").await,
            (401, json!({}))
        );
        assert_eq!(
            node.post_as(&key2, "/api/v1/imagine", &json!({ "prompt": "x" }))
                .await,
            (401, json!({}))
        );
    }
    assert!(first.store.set_disabled(&account, false).await.unwrap());
    assert_eq!(
        nodes[nodes.len() - 1]
            .get_as(&key2, "/api/v1/account")
            .await
            .0,
        200
    );
    if let Some(second) = second {
        second.stop().await;
    }
    first.stop().await;
}

/// `easel accounts ...` through the real binary, on a SQLite data dir of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_password_reads_stdin_checks_the_rules_and_signs_the_account_out() {
    use std::io::Write;
    use std::process::Stdio;
    let dir = tempfile::tempdir().unwrap();
    let cli = |args: &[&str], stdin: &str| {
        let mut child = common::binary::command(dir.path(), &[])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        (
            out.status.success(),
            String::from_utf8(out.stdout).unwrap() + &String::from_utf8(out.stderr).unwrap(),
        )
    };
    let (ok, out) = cli(&["accounts", "create", "Ann@Example.com"], "");
    assert!(ok, "{out}");
    let (ok, out) = cli(&["accounts", "create", "ann@example.COM"], "");
    assert!(!ok, "one account per email, whatever its case: {out}");
    let (ok, out) = cli(
        &["accounts", "set-password", "ann@example.com"],
        "too short\n",
    );
    assert!(!ok);
    assert!(out.contains("at least 10 characters"), "{out}");
    let (ok, out) = cli(
        &["accounts", "set-password", "ann@example.com"],
        "1234567890\n",
    );
    assert!(!ok);
    assert!(
        out.contains("too easy to guess (this is a top-100 common password)"),
        "{out}"
    );
    let (ok, out) = cli(
        &["accounts", "set-password", "nobody@example.com"],
        "long enough pw\n",
    );
    assert!(!ok);
    assert!(out.contains("no account"), "{out}");

    // A session, to see it go when the password changes.
    let url = format!("sqlite://{}", dir.path().join("data/easel.db").display());
    let store = easel::store::sqlite::SqliteStore::open(&url, false)
        .await
        .unwrap();
    let account = store
        .account_by_email("ANN@example.com")
        .await
        .unwrap()
        .unwrap();
    assert!(!account.has_password);
    assert!(!account.admin);
    let (_, token) = easel::accounts::new_session_token();
    store
        .create_session(&account.id, &token, easel::store::now_ms() + 60_000)
        .await
        .unwrap();
    store.close().await;

    let (ok, out) = cli(
        &["accounts", "set-password", "ann@example.com"],
        "correct horse battery staple\r\n",
    );
    assert!(ok, "{out}");
    let store = easel::store::sqlite::SqliteStore::open(&url, false)
        .await
        .unwrap();
    let (found, hash) = store
        .account_for_sign_in("ann@example.com")
        .await
        .unwrap()
        .unwrap();
    assert!(found.has_password);
    let hash = hash.unwrap();
    assert!(hash.starts_with("$argon2id$"), "only the hash is stored");
    assert!(
        easel::accounts::verify_password("correct horse battery staple".into(), hash.clone()).await
    );
    assert!(!easel::accounts::verify_password("correct horse battery staple\r".into(), hash).await);
    assert!(
        store
            .session_account(&token, easel::store::now_ms())
            .await
            .unwrap()
            .is_none(),
        "a new password signs the account out everywhere"
    );
    store.close().await;

    let (ok, out) = cli(&["accounts", "credits", "ann@example.com", "12"], "");
    assert!(ok, "{out}");
    let (ok, out) = cli(&["accounts", "list"], "");
    assert!(ok, "{out}");
    let line = out
        .lines()
        .find(|l| l.starts_with("Ann@Example.com"))
        .unwrap();
    assert!(line.contains(" 12 "), "{line}");
    let (ok, _) = cli(&["accounts", "credits", "ann@example.com", "-3"], "");
    assert!(!ok);

    // An account made here starts with `signup_credits`, as a sign-up would; an operator is
    // unlimited, as the first account is; `--credits` says otherwise for either.
    for args in [
        &["accounts", "create", "bea@example.com"][..],
        &["accounts", "create", "op@example.com", "--admin"],
        &[
            "accounts",
            "create",
            "cy@example.com",
            "--credits",
            "unlimited",
        ],
        &[
            "accounts",
            "create",
            "di@example.com",
            "--admin",
            "--credits",
            "5",
        ],
    ] {
        let (ok, out) = cli(args, "");
        assert!(ok, "{out}");
    }
    let (ok, _) = cli(
        &["accounts", "create", "ed@example.com", "--credits", "lots"],
        "",
    );
    assert!(!ok);
    let (_, out) = cli(&["accounts", "list"], "");
    let credits = |email: &str| {
        let line = out.lines().find(|l| l.starts_with(email)).unwrap();
        line.split_whitespace().nth(3).unwrap().to_string()
    };
    let grant = easel::config::SIGNUP_CREDITS.to_string();
    assert_eq!(credits("bea@example.com"), grant);
    assert_eq!(credits("op@example.com"), "unlimited");
    assert_eq!(credits("cy@example.com"), "unlimited");
    assert_eq!(credits("di@example.com"), "5");
    assert!(!out.contains("ed@example.com"));
}
