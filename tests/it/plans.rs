//! Plans and operators: an account moved to a plan gets its limits on the next request, the
//! admin API (404 for anyone else, bad input refused by field with nothing changed), expiry, the
//! audit log, and `easel accounts plan|expire` through the real binary. Runs on both stores.

use std::time::Duration;

use easel::config::{Config, Plan};
use serde_json::{json, Value};

use crate::common::{self, split, TestApp};

const IMAGINE: &str = "/api/v1/imagine";

/// Two plans: `self-hosted` (the default) with one pending task, `pro` with three.
fn two_plans(c: &mut Config) {
    c.worker.workers = 0;
    c.plans.plans.insert(
        "self-hosted".into(),
        Plan {
            max_pending: 1,
            ..Plan::default()
        },
    );
    c.plans.plans.insert(
        "pro".into(),
        Plan {
            max_pending: 3,
            ..Plan::default()
        },
    );
}

async fn patch(app: &TestApp, key: &str, id: &str, body: Value) -> (u16, Value) {
    let res = app
        .http
        .patch(app.url(&format!("/api/v1/admin/accounts/{id}")))
        .header("Authorization", key)
        .json(&body)
        .send()
        .await
        .unwrap();
    split(res).await
}

/// How many of `n` submits of `key` are let in; the others must be 429 `quota_exceeded`.
async fn submits_let_in(app: &TestApp, key: &str, n: usize) -> usize {
    let mut ok = 0;
    for i in 0..n {
        let (status, body) = app
            .post_as(key, IMAGINE, &json!({ "prompt": format!("try {i}") }))
            .await;
        match status {
            200 => ok += 1,
            429 => assert_eq!(body["errors"][0]["code"], "quota_exceeded", "{body}"),
            other => panic!("{other} {body}"),
        }
    }
    ok
}

#[tokio::test]
async fn an_account_moved_to_a_plan_gets_its_limits_on_the_next_request() {
    let app = TestApp::spawn_with(two_plans).await;
    let (id, key) = app.account_with("ann@example.com", None).await;
    assert_eq!(submits_let_in(&app, &key, 3).await, 1, "self-hosted: one");

    let (status, body) = patch(&app, &app.key, &id, json!({ "plan": "pro" })).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["plan"], "pro");
    assert_eq!(body["email"], "ann@example.com");
    assert_eq!(submits_let_in(&app, &key, 4).await, 2, "pro: three in all");

    let (status, listed) = app
        .get("/api/v1/admin/accounts?email=ANN@example.com")
        .await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["accounts"].as_array().unwrap().len(), 1);
    assert_eq!(listed["accounts"][0]["plan"], "pro");
    assert_eq!(listed["accounts"][0]["credits"], "unlimited");
    assert_eq!(listed["accounts"][0]["expires_at"], Value::Null);

    // The audit log has the change: who, what, before and after.
    let (status, audit) = app.get("/api/v1/admin/audit").await;
    assert_eq!(status, 200, "{audit}");
    let entry = &audit["entries"][0];
    let operator = app.store.first_account().await.unwrap().unwrap();
    assert_eq!(entry["actor"], format!("admin:{}", operator.email));
    assert_eq!(entry["action"], "account.update");
    assert_eq!(entry["account_id"], id.as_str());
    assert_eq!(entry["before"], json!({ "plan": "self-hosted" }));
    assert_eq!(entry["after"], json!({ "plan": "pro" }));
}

#[tokio::test]
async fn every_operator_change_is_in_the_audit_log_newest_first_paged_by_cursor() {
    let app = TestApp::spawn_with(two_plans).await;
    let (id, _) = app.account_with("bob@example.com", Some(10)).await;
    let at = "2099-01-31T00:00:00.000Z";
    for body in [
        json!({ "credits": 25 }),
        json!({ "credits": "unlimited", "disabled": true }),
        json!({ "expires_at": at }),
        json!({ "disabled": false, "expires_at": null }),
    ] {
        let (status, answer) = patch(&app, &app.key, &id, body).await;
        assert_eq!(status, 200, "{answer}");
    }
    let (_, first) = app.get("/api/v1/admin/audit?limit=3").await;
    let entries = first["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 3);
    assert_eq!(
        entries[0]["before"],
        json!({ "disabled": true, "expires_at": at })
    );
    assert_eq!(
        entries[0]["after"],
        json!({ "disabled": false, "expires_at": null })
    );
    assert_eq!(entries[1]["after"], json!({ "expires_at": at }));
    assert_eq!(
        entries[2]["before"],
        json!({ "credits": 25, "disabled": false })
    );
    let next = first["next"].as_i64().expect("a next page");
    let (_, rest) = app
        .get(&format!("/api/v1/admin/audit?limit=3&before={next}"))
        .await;
    assert_eq!(rest["entries"].as_array().unwrap().len(), 1, "{rest}");
    assert_eq!(rest["entries"][0]["before"], json!({ "credits": 10 }));
    assert_eq!(rest["entries"][0]["after"], json!({ "credits": 25 }));
    assert!(rest.get("next").is_none(), "{rest}");
    // The balance set through the API is one `admin` ledger row of the difference.
    let ledger = app.store.credit_ledger(&id, 10).await.unwrap();
    assert_eq!(ledger[0].reason, "admin");
    assert_eq!(ledger[0].delta, 15);
}

#[tokio::test]
async fn the_admin_api_is_404_for_anyone_but_an_operator() {
    let app = TestApp::spawn_with(two_plans).await;
    let (id, key) = app.account_with("eve@example.com", None).await;
    for path in [
        "/api/v1/admin/accounts".to_string(),
        format!("/api/v1/admin/accounts/{id}"),
        "/api/v1/admin/audit".to_string(),
    ] {
        let (status, body) = app.get_as(&key, &path).await;
        assert_eq!(status, 404, "{path}: {body}");
        assert_eq!(body["errors"][0]["code"], "route_not_found");
    }
    let (status, _) = patch(&app, &key, &id, json!({ "plan": "pro" })).await;
    assert_eq!(status, 404);
    let (status, _) = app.get_as("not-a-key", "/api/v1/admin/audit").await;
    assert_eq!(status, 401);
    let account = app.store.account_by_id(&id).await.unwrap().unwrap();
    assert_eq!(account.plan, "self-hosted", "nothing changed");
}

#[tokio::test]
async fn bad_changes_are_400_naming_the_field_and_change_nothing() {
    let app = TestApp::spawn_with(two_plans).await;
    let (id, _) = app.account_with("kim@example.com", Some(5)).await;
    for (body, field, says) in [
        (
            json!({ "plan": "gold" }),
            "plan",
            "the plans are `pro`, `self-hosted`",
        ),
        (json!({ "plan": 3 }), "plan", "name of a plan"),
        (json!({ "credits": "lots" }), "credits", "whole number"),
        (json!({ "credits": -1 }), "credits", "whole number"),
        (json!({ "credits": 1.5 }), "credits", "whole number"),
        (
            json!({ "expires_at": "2020-01-01T00:00:00Z" }),
            "expires_at",
            "in the past",
        ),
        (
            json!({ "expires_at": "next week" }),
            "expires_at",
            "RFC 3339",
        ),
        (json!({ "disabled": "yes" }), "disabled", "true or false"),
        (json!({ "colour": "red" }), "colour", "not a field"),
        // A good field beside a bad one changes nothing either.
        (
            json!({ "plan": "pro", "credits": -1 }),
            "credits",
            "whole number",
        ),
    ] {
        let (status, answer) = patch(&app, &app.key, &id, body.clone()).await;
        assert_eq!(status, 400, "{body}: {answer}");
        let msg = answer["errors"][0]["msg"].as_str().unwrap();
        assert!(msg.starts_with(&format!("{field}: ")), "{body}: {msg}");
        assert!(msg.contains(says), "{body}: {msg}");
    }
    let account = app.store.account_by_id(&id).await.unwrap().unwrap();
    assert_eq!(
        (account.plan.as_str(), account.credits, account.expires_at),
        ("self-hosted", Some(5), None)
    );
    let (_, audit) = app.get("/api/v1/admin/audit").await;
    assert_eq!(audit["entries"], json!([]), "nothing recorded");
    let (status, body) = patch(&app, &app.key, "no-such-account", json!({ "plan": "pro" })).await;
    assert_eq!(status, 404);
    assert_eq!(body["errors"][0]["code"], "account_not_found");
}

#[tokio::test]
async fn an_expired_account_gets_402_and_its_queued_task_still_finishes() {
    let app = TestApp::spawn_with(two_plans).await;
    let (id, key) = app.account_with("lee@example.com", None).await;
    let task = app
        .imagine_as(&key, json!({ "prompt": "before the end" }))
        .await;
    let (status, body) = patch(
        &app,
        &app.key,
        &id,
        json!({ "expires_at": "2099-12-31T23:59:59Z" }),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["expires_at"], "2099-12-31T23:59:59.000Z");
    assert_eq!(app.get_as(&key, "/api/v1/account").await.0, 200);
    // Time passes: the expiry is now behind (no operator can set one in the past).
    let mut db = common::database(&app.config).await;
    sqlx::query(&format!(
        "UPDATE accounts SET expires_at = 1000 WHERE id = '{id}'"
    ))
    .execute(&mut db)
    .await
    .unwrap();
    let (status, body) = app
        .post_as(&key, IMAGINE, &json!({ "prompt": "after the end" }))
        .await;
    assert_eq!(status, 402, "{body}");
    assert_eq!(body["errors"][0]["code"], "account_expired");
    let (status, body) = app.get_as(&key, "/api/v1/account").await;
    assert_eq!(status, 402, "{body}");
    assert_eq!(body["errors"][0]["code"], "account_expired");
    // Its queued task runs once workers do, and the account can still read it.
    let (dir, mut config) = app.stop().await;
    config.worker.workers = 1;
    let app = TestApp::start(dir, config).await;
    let done = app
        .wait_final_as(&key, &task, Duration::from_secs(20))
        .await;
    assert_eq!(done["status"], "finished", "{done}");
}

/// `easel accounts plan|expire|credits` through the real binary, on a SQLite data dir of its own
/// with plans in its `easel.toml`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_sets_plans_and_expiry_refusing_bad_input_and_records_each_change() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("easel.toml"),
        "[plans.self-hosted]\n[plans.pro]\nmax_running = 2\n",
    )
    .unwrap();
    let cli = |args: &[&str]| {
        let out = common::binary::command(dir.path(), &[])
            .env("USER", "ops")
            .args(args)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8(out.stdout).unwrap() + &String::from_utf8(out.stderr).unwrap(),
        )
    };
    let (ok, out) = cli(&["accounts", "create", "ann@example.com"]);
    assert!(ok, "{out}");
    let (ok, out) = cli(&["accounts", "plan", "ann@example.com", "gold"]);
    assert!(!ok, "{out}");
    assert!(
        out.contains("plan: `gold` is not a plan; the plans are `pro`, `self-hosted`"),
        "{out}"
    );
    let (ok, out) = cli(&["accounts", "plan", "ann@example.com", "pro"]);
    assert!(ok && out.contains("is on the plan pro"), "{out}");
    for bad in ["2020-01-01", "someday"] {
        let (ok, out) = cli(&["accounts", "expire", "ann@example.com", bad]);
        assert!(!ok && out.contains("expires_at: "), "{bad}: {out}");
    }
    let (ok, out) = cli(&["accounts", "expire", "ann@example.com", "2099-01-31"]);
    assert!(
        ok && out.contains("expires at 2099-01-31T23:59:59.999Z"),
        "{out}"
    );
    let (ok, out) = cli(&["accounts", "expire", "ann@example.com", "never"]);
    assert!(ok && out.contains("never expires"), "{out}");

    let (ok, out) = cli(&[
        "keys",
        "create",
        "--name",
        "t",
        "--account",
        "ann@example.com",
    ]);
    assert!(ok, "{out}");
    let (ok, listed) = cli(&["keys", "list"]);
    assert!(ok, "{listed}");
    let key_id = listed
        .lines()
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    let (ok, out) = cli(&["keys", "revoke", &key_id]);
    assert!(ok, "{out}");

    // An old per-plan key stops the command, saying where it went.
    std::fs::write(
        dir.path().join("easel.toml"),
        "max_pending_per_account = 5\n",
    )
    .unwrap();
    let (ok, out) = cli(&["accounts", "list"]);
    assert!(!ok, "{out}");
    assert!(out.contains("`max_pending_per_account` moved"), "{out}");
    assert!(
        out.contains("`max_pending` of a `[plans.NAME]` table"),
        "{out}"
    );

    let database = easel::config::Database::default();
    let store = easel::store::open(&database, &dir.path().join("data"))
        .await
        .unwrap();
    let account = store
        .account_by_email("ann@example.com")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((account.plan.as_str(), account.expires_at), ("pro", None));
    let mut audit = store.audit_log(None, 10).await.unwrap();
    let revoked = audit.remove(0);
    assert_eq!(
        (revoked.actor.as_str(), revoked.action.as_str()),
        ("cli:ops", "key.revoke")
    );
    assert_eq!(revoked.after, json!({ "key": key_id, "revoked": true }));
    let seen: Vec<(&str, Value, Value)> = audit
        .iter()
        .map(|e| (e.actor.as_str(), e.before.clone(), e.after.clone()))
        .collect();
    assert_eq!(
        seen,
        [
            (
                "cli:ops",
                json!({ "expires_at": "2099-01-31T23:59:59.999Z" }),
                json!({ "expires_at": null })
            ),
            (
                "cli:ops",
                json!({ "expires_at": null }),
                json!({ "expires_at": "2099-01-31T23:59:59.999Z" })
            ),
            (
                "cli:ops",
                json!({ "plan": "self-hosted" }),
                json!({ "plan": "pro" })
            ),
        ]
    );
    store.close().await;
}

/// 2027-01-01T00:00:05Z, and one month later, as Unix ms.
const JANUARY: i64 = 1_798_761_605_000;
const FEBRUARY: i64 = JANUARY + 31 * 86_400_000;

#[tokio::test]
async fn a_periodic_grant_happens_once_per_period_across_nodes_and_restarts() {
    let grants = |c: &mut Config| {
        c.worker.workers = 0;
        c.plans.plans.insert(
            "self-hosted".into(),
            Plan {
                credits_per_period: Some(50),
                ..Plan::default()
            },
        );
        c.plans.plans.insert("pro".into(), Plan::default());
    };
    let app = TestApp::spawn_with(grants).await;
    let (id, _) = app.account_with("gus@example.com", Some(7)).await;
    let (pro, _) = app.account_with("pat@example.com", Some(3)).await;
    let (legacy, _) = app.account_with("old@example.com", Some(1)).await;
    let mut db = common::database(&app.config).await;
    for (account, plan) in [(&pro, "pro"), (&legacy, "gone")] {
        sqlx::query(&format!(
            "UPDATE accounts SET plan = '{plan}' WHERE id = '{account}'"
        ))
        .execute(&mut db)
        .await
        .unwrap();
    }
    let plans = app.config.plans.clone();
    let grant_due = |store: easel::store::SharedStore, at: i64| {
        let plans = plans.clone();
        async move {
            easel::accounts::grants::grant_due(store.as_ref(), &plans, at)
                .await
                .unwrap()
        }
    };
    // The default plan's accounts, and those on a plan not configured; not `pro`, nor the
    // operator's account, which has unlimited credits.
    assert_eq!(grant_due(app.store.clone(), JANUARY).await, 2);
    assert_eq!(grant_due(app.store.clone(), JANUARY + 3_600_000).await, 0);
    // A second node on the same PostgreSQL database, at the same moment and later.
    if common::on_postgres() {
        let other = easel::store::open(&app.config.database, &app.config.data_dir)
            .await
            .unwrap();
        let (a, b) = tokio::join!(
            grant_due(other.clone(), JANUARY + 1),
            grant_due(app.store.clone(), JANUARY + 2)
        );
        assert_eq!(a + b, 0);
        other.close().await;
    }
    // A restart in the same period grants nothing more. (The restarted node grants the real
    // current period on its own, at start: the grants below are told apart by their time.)
    let (dir, config) = app.stop().await;
    let app = TestApp::start(dir, config).await;
    assert_eq!(grant_due(app.store.clone(), JANUARY + 7_200_000).await, 0);
    let store = app.store.clone();
    // The node's own pass grants the accounts one after another: wait for both.
    let own = common::wait_for(Duration::from_secs(10), || {
        let (store, ids) = (store.clone(), [id.clone(), legacy.clone()]);
        async move {
            for id in ids {
                let ledger = store.credit_ledger(&id, 100).await.unwrap();
                if !ledger
                    .iter()
                    .any(|r| r.reason == "grant" && r.created_at < JANUARY)
                {
                    return None;
                }
            }
            Some(())
        }
    })
    .await;
    assert!(own.is_some(), "the node grants the current period at start");
    // Each account's balance and its grants' (time, delta): one grant per period, the real
    // current one's (given by the node's own loop, before or after January's) included.
    let balance = |id: String| {
        let store = app.store.clone();
        async move {
            let account = store.account_by_id(&id).await.unwrap().unwrap();
            let ledger = store.credit_ledger(&id, 100).await.unwrap();
            let grants: Vec<(i64, i64)> = ledger
                .iter()
                .filter(|r| r.reason == "grant")
                .map(|r| (r.created_at, r.delta))
                .collect();
            let sum: i64 = ledger.iter().map(|r| r.delta).sum();
            assert_eq!(account.credits, Some(sum), "the ledger sums to the balance");
            (account.credits, grants)
        }
    };
    for account in [&id, &legacy] {
        let (credits, grants) = balance(account.clone()).await;
        assert_eq!(credits, Some(50));
        assert_eq!(grants.len(), 2, "{grants:?}");
        assert_eq!(grants.iter().filter(|g| g.0 == JANUARY).count(), 1);
    }
    // Its plan grants nothing. (The first node's own pass at start may have found it on the
    // default plan, before the test moved it: then it had that period's grant, before January.)
    let (credits, grants) = balance(pro.clone()).await;
    match grants[..] {
        [] => assert_eq!(credits, Some(3)),
        [(at, _)] => assert!(
            at < JANUARY && credits == Some(50),
            "{credits:?} {grants:?}"
        ),
        _ => panic!("{credits:?} {grants:?}"),
    }
    // What is left is not carried over: the next month sets the balance to the grant again.
    let (status, body) = app
        .post_as(
            &app.key_for("gus@example.com").await,
            IMAGINE,
            &json!({ "prompt": "spend" }),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(grant_due(app.store.clone(), FEBRUARY).await, 2);
    let (credits, grants) = balance(id).await;
    assert_eq!(credits, Some(50));
    assert_eq!(
        grants[0],
        (FEBRUARY, 4),
        "the 4 credits spent come back, no more"
    );
    assert_eq!(grants.len(), 3);
}
