//! Cost and usage: each finished or failed task's record (and, for a caller that sent
//! `metadata`, its final webhook) says what it cost and used, adding up to the credit ledger;
//! `GET /api/v1/usage` groups them by day, model and key as JSON and as CSV (read back with
//! Python's `csv`), an operator may ask for one account or every one, and bad ranges are refused
//! by field. Runs on both stores.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::receiver::{Behaviour, Receiver};
use crate::common::{split, wait_for, TestApp};

const WITHIN: Duration = Duration::from_secs(30);

fn with_costs(c: &mut easel::config::Config) {
    c.accounts.costs.insert("imagine".into(), 3);
}

async fn usage(app: &TestApp, key: &str, query: &str) -> Value {
    let (status, body) = app.get_as(key, &format!("/api/v1/usage{query}")).await;
    assert_eq!(status, 200, "{query}: {body}");
    body
}

/// The credits the ledger took for each task and did not give back, by task id.
async fn ledger_by_task(app: &TestApp, account: &str) -> HashMap<String, i64> {
    let mut spent = HashMap::new();
    for row in app.store.credit_ledger(account, 10_000).await.unwrap() {
        if let Some(task) = row.task_id {
            *spent.entry(task).or_insert(0) -= row.delta;
        }
    }
    spent
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_and_webhooks_say_cost_and_usage_and_they_add_up_to_the_ledger() {
    let app = TestApp::spawn_with(with_costs).await;
    let receiver = Receiver::start(vec![Behaviour::Status(200)]).await;
    let (account, key) = app.account_with("payer@example.com", Some(100)).await;
    let told = app
        .imagine_as(
            &key,
            json!({ "prompt": "a red fox", "webhook_url": receiver.url, "metadata": { "n": 1 } }),
        )
        .await;
    let plain = app
        .imagine_as(
            &key,
            json!({ "prompt": "a blue fox", "webhook_url": receiver.url }),
        )
        .await;
    // Blocked at the worker: it fails and its credits go back.
    let failed = app
        .imagine_as(
            &key,
            json!({ "prompt": "nsfw fox", "metadata": { "n": 2 } }),
        )
        .await;
    let mut records = HashMap::new();
    for id in [&told, &plain, &failed] {
        records.insert(id.clone(), app.wait_final_as(&key, id, WITHIN).await);
    }
    let done = &records[&told];
    assert_eq!(done["status"], "finished", "{done}");
    assert_eq!(done["cost"], 3, "{done}");
    let used = &done["usage"];
    assert!(used["backend"].is_string(), "{used}");
    assert_eq!(used["model"], Value::Null, "no [[models]]: {used}");
    assert_eq!(used["images"], 4);
    assert_eq!(used["pixels"], 4 * 128 * 128, "{used}");
    assert!(used["backend_seconds"].as_f64().unwrap() >= 0.0, "{used}");
    let no = &records[&failed];
    assert_eq!(no["status"], "failed", "{no}");
    assert_eq!(no["cost"], 0, "refunded: {no}");
    assert_eq!(no["usage"]["images"], 0, "{no}");
    assert_eq!(no["usage"]["pixels"], 0, "{no}");
    assert_eq!(
        no["usage"]["backend"],
        Value::Null,
        "never reached a backend: {no}"
    );

    // Each record's cost is what the ledger kept of its charge.
    let spent = ledger_by_task(&app, &account).await;
    for (id, record) in &records {
        assert_eq!(
            record["cost"].as_i64().unwrap(),
            spent.get(id).copied().unwrap_or(0),
            "{id}: {record}"
        );
    }
    let total: i64 = records.values().map(|r| r["cost"].as_i64().unwrap()).sum();
    let (_, me) = app.get_as(&key, "/api/v1/account").await;
    assert_eq!(me["credits"], 100 - total);

    // The final webhook carries them for the caller that sent metadata, as `actions`.
    for id in [&told, &plain] {
        wait_for(WITHIN, || async {
            let t = app.fetch_as(&key, id).await;
            (t["webhook"]["status"] == "delivered").then_some(())
        })
        .await
        .unwrap_or_else(|| panic!("{id}'s webhook not delivered"));
    }
    let bodies: Vec<Value> = receiver
        .received()
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect();
    let hook = bodies
        .iter()
        .find(|b| b["task_id"] == told.as_str())
        .unwrap();
    assert_eq!(hook["cost"], 3, "{hook}");
    assert_eq!(hook["usage"], done["usage"], "{hook}");
    let bare = bodies
        .iter()
        .find(|b| b["task_id"] == plain.as_str())
        .unwrap();
    assert!(
        bare.get("cost").is_none() && bare.get("usage").is_none(),
        "{bare}"
    );

    // The usage of the day, model and key: from the rollup moved with each end.
    let day = usage(&app, &key, "").await;
    assert_eq!(day["group"], "day");
    let rows = day["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{day}");
    assert_eq!(rows[0]["day"], day["to"], "{day}");
    assert_eq!(rows[0]["tasks"], 3);
    assert_eq!(rows[0]["images"], 8);
    assert_eq!(rows[0]["pixels"], 8 * 128 * 128);
    assert_eq!(rows[0]["cost"], total);
    let by_model = usage(&app, &key, "?group=model").await;
    assert_eq!(by_model["rows"][0]["model"], "", "{by_model}");
    assert_eq!(by_model["rows"][0]["tasks"], 3);
    let key_id = app.store.account_keys(&account).await.unwrap()[0]
        .id
        .clone();
    let by_key = usage(&app, &key, "?group=key").await;
    assert_eq!(
        by_key["rows"],
        json!([{
            "key_id": key_id, "tasks": 3, "images": 8, "pixels": 8 * 128 * 128,
            "backend_seconds": rows[0]["backend_seconds"], "cost": total
        }])
    );

    // As CSV, read with Python's csv module.
    let res = app
        .http
        .get(app.url("/api/v1/usage?group=key"))
        .header("Authorization", &key)
        .header("Accept", "text/csv")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert!(res.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/csv"));
    let parsed = python_csv(&res.text().await.unwrap());
    assert_eq!(
        parsed["columns"],
        json!([
            "key_id",
            "tasks",
            "images",
            "pixels",
            "backend_seconds",
            "cost"
        ])
    );
    assert_eq!(parsed["rows"][0]["key_id"], key_id.as_str());
    assert_eq!(parsed["rows"][0]["tasks"], "3");
    assert_eq!(parsed["rows"][0]["cost"], total.to_string());

    // An operator's key: every account's rows, each saying whose; or one account's.
    let (_, all) = app.get("/api/v1/usage?group=model").await;
    let mine: Vec<&Value> = all["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["account_id"] == account.as_str())
        .collect();
    assert_eq!(mine.len(), 1, "{all}");
    assert_eq!(mine[0]["tasks"], 3);
    let (status, one) = app
        .get(&format!("/api/v1/usage?account={account}&group=day"))
        .await;
    assert_eq!(status, 200, "{one}");
    assert_eq!(one["rows"], day["rows"]);
    app.stop().await;
}

/// The CSV's header and rows as Python's `csv.DictReader` reads them.
fn python_csv(text: &str) -> Value {
    use std::io::Write;
    let mut child = std::process::Command::new("python3")
        .args([
            "-c",
            "import csv, json, sys\n\
             r = csv.DictReader(sys.stdin)\n\
             rows = list(r)\n\
             print(json.dumps({'columns': r.fieldnames, 'rows': rows}))",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test]
async fn bad_ranges_groups_and_accounts_are_refused_by_field() {
    let app = TestApp::spawn_with(|c| c.worker.workers = 0).await;
    let (account, key) = app.account_with("ann@example.com", None).await;
    for (query, field) in [
        ("?from=2026-13-01", "from"),
        ("?to=yesterday", "to"),
        ("?from=2026-02-01&to=2026-01-31", "to"),
        ("?from=2025-01-01&to=2026-01-02", "from"),
        ("?group=week", "group"),
        ("?group=day&group=key", "group"),
        (&format!("?account={account}") as &str, "account"),
    ] {
        let (status, body) = app.get_as(&key, &format!("/api/v1/usage{query}")).await;
        assert_eq!(status, 400, "{query}: {body}");
        let msg = body["errors"][0]["msg"].as_str().unwrap();
        assert!(msg.starts_with(&format!("{field}:")), "{query}: {msg}");
    }
    // 366 days, both ends included, is the most.
    let year = usage(&app, &key, "?from=2024-01-01&to=2024-12-31").await;
    assert_eq!(year["rows"], json!([]));
    let res = app
        .http
        .get(app.url("/api/v1/usage?account=no-such-account"))
        .header("Authorization", &app.key)
        .send()
        .await
        .unwrap();
    let (status, body) = split(res).await;
    assert_eq!(status, 404, "{body}");
    app.stop().await;
}
