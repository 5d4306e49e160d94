//! Task life: the state machine, progress, images, content policy, queue order, leases, restarts.

use std::time::Duration;

use crate::common::{self, TestApp};
use easel::domain::{Output, PayloadHead, TaskStatus};
use easel::store::{Ending, Outcome, Submitted};
use serde_json::json;

#[tokio::test]
async fn a_task_runs_to_finished_with_four_images_and_a_grid() {
    let app = TestApp::spawn_with(|c| {
        c.worker.procedural_min_duration = Duration::from_millis(1500);
        c.worker.heartbeat = Duration::from_millis(100);
    })
    .await;
    let id = app
        .imagine(json!({"prompt": "a red sunset over the ocean", "aspect_ratio": "2:1"}))
        .await;
    // A task not yet drawing is at 0 (under load a worker may already have begun it).
    let first = app.fetch(&id).await;
    if first["status"] == "pending" {
        assert_eq!(first["percentage"], "0", "{first}");
    }

    // Watch it move through the states, with the percentage rising while processing.
    let mut seen: Vec<String> = Vec::new();
    let mut percentages = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let record = loop {
        let t = app.fetch(&id).await;
        let status = t["status"].as_str().unwrap().to_string();
        if seen.last() != Some(&status) {
            seen.push(status.clone());
        }
        if status == "processing" {
            percentages.push(t["percentage"].as_str().unwrap().parse::<u32>().unwrap());
        }
        if status == "finished" || status == "failed" {
            break t;
        }
        assert!(std::time::Instant::now() < deadline, "task ends in time");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(record["status"], "finished", "{record}");
    assert_eq!(record["percentage"], "100");
    assert!(seen.contains(&"processing".to_string()), "{seen:?}");
    let order = ["pending", "starting", "processing", "finished"];
    let positions: Vec<usize> = seen
        .iter()
        .map(|s| order.iter().position(|o| o == s).unwrap())
        .collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
    assert!(
        percentages.windows(2).all(|w| w[0] <= w[1]),
        "{percentages:?}"
    );
    assert!(
        percentages.iter().any(|p| *p > 0 && *p < 100),
        "progress visible while processing: {percentages:?}"
    );
    assert!(record["started_at"].is_string() && record["finished_at"].is_string());
    assert!(record.get("error").is_none());

    // The images: four plus the grid, real PNGs at the requested aspect ratio, cacheable forever.
    let urls: Vec<String> = record["image_urls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u.as_str().unwrap().to_string())
        .collect();
    assert_eq!(urls.len(), 4);
    let grid = record["original_image_url"].as_str().unwrap().to_string();
    let mut bodies = Vec::new();
    for url in urls.iter().chain([&grid]) {
        assert!(url.starts_with(&format!("{}/files/", app.base)), "{url}");
        let res = app.http.get(url).send().await.unwrap();
        assert_eq!(res.status(), 200, "{url}");
        assert_eq!(res.headers()["content-type"], "image/png");
        let cache = res.headers()["cache-control"].to_str().unwrap().to_string();
        assert!(
            cache.contains("immutable") && cache.contains("max-age=31536000"),
            "{cache}"
        );
        let bytes = res.bytes().await.unwrap();
        let image = easel::images::decode_png(&bytes).unwrap();
        assert_eq!((image.width, image.height), (128, 64), "{url}");
        bodies.push(bytes);
    }
    for i in 0..4 {
        for j in i + 1..4 {
            assert_ne!(bodies[i], bodies[j], "images {i} and {j} differ");
        }
    }
    // Addresses are unguessable: a random token in the path, not just the task id.
    let token = urls[0].split('/').rev().nth(1).unwrap();
    assert_eq!(token.len(), 32, "{}", urls[0]);
    let (_, account) = app.get("/api/v1/account").await;
    assert_eq!(account["total_images"], 4);
}

#[tokio::test]
async fn files_are_made_durable_and_an_earlier_attempts_files_are_removed() {
    let app = TestApp::spawn_with(|c| {
        c.worker.procedural_min_duration = Duration::from_millis(800);
        // Durable storage: every file and the folders holding them are fsynced.
        c.database.sqlite_synchronous = easel::config::SqliteSynchronous::Full;
    })
    .await;
    let id = app
        .imagine(json!({"prompt": "what a lost worker leaves"}))
        .await;
    // What a worker killed after writing its files and before recording them leaves behind.
    let task_dir = app.dir.path().join("files").join(&id);
    let stale = task_dir.join("0123456789abcdef0123456789abcdef");
    std::fs::create_dir_all(&stale).unwrap();
    std::fs::write(stale.join("grid.png"), b"an earlier attempt").unwrap();

    let record = app.wait_final(&id, Duration::from_secs(20)).await;
    assert_eq!(record["status"], "finished", "{record}");
    let grid = record["original_image_url"].as_str().unwrap();
    let token = grid.split('/').rev().nth(1).unwrap();
    // The earlier attempt's folder and this attempt's previews are removed once the end is
    // recorded (only then is this attempt known to be the one kept), so shortly after.
    let folders = || {
        std::fs::read_dir(&task_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect::<Vec<String>>()
    };
    let cleaned = common::wait_for(Duration::from_secs(5), || async {
        (folders() == vec![token.to_string()]).then_some(())
    })
    .await;
    assert!(
        cleaned.is_some(),
        "only the recorded attempt's folder stays: {:?}",
        folders()
    );
    assert!(task_dir.join(token).join("grid.png").is_file());
    assert_eq!(app.http.get(grid).send().await.unwrap().status(), 200);
}

#[tokio::test]
async fn the_lease_reaper_fails_a_task_out_of_attempts_and_removes_its_files() {
    // No worker of this process: the task is taken by one that then disappears.
    let app = TestApp::spawn_with(|c| {
        c.worker.workers = 0;
        c.worker.max_attempts = 1;
    })
    .await;
    let id = app
        .imagine(json!({"prompt": "a worker that vanished"}))
        .await;
    let claimed = app.store.claim_task("lost", 1).await.unwrap().unwrap();
    assert_eq!((claimed.id.as_str(), claimed.attempts), (id.as_str(), 1));
    // The files it wrote before it vanished, never recorded.
    let task_dir = app.dir.path().join("files").join(&id);
    let folder = task_dir.join("0123456789abcdef0123456789abcdef");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join("grid.png"), b"never recorded").unwrap();

    let record = app.wait_final(&id, Duration::from_secs(10)).await;
    assert_eq!(record["status"], "failed", "{record}");
    assert!(
        record["error"].as_str().unwrap().contains("worker lost"),
        "{record}"
    );
    let removed = common::wait_for(Duration::from_secs(5), || async {
        (!task_dir.exists()).then_some(())
    })
    .await;
    assert!(removed.is_some(), "{} is still there", task_dir.display());
}

#[tokio::test]
async fn content_policy_violations_fail_with_a_clear_error() {
    let app =
        TestApp::spawn_with(|c| c.worker.blocked_terms = vec!["forbidden thing".into()]).await;
    let id = app
        .imagine(json!({"prompt": "A FORBIDDEN thing, in oils"}))
        .await;
    let record = app.wait_final(&id, Duration::from_secs(10)).await;
    assert_eq!(record["status"], "failed");
    let error = record["error"].as_str().unwrap();
    assert!(error.starts_with("content policy violation"), "{error}");
    assert!(record.get("image_urls").is_none());
    let fine = app.imagine(json!({"prompt": "a thing, forbidden"})).await;
    assert_eq!(
        app.wait_final(&fine, Duration::from_secs(10)).await["status"],
        "finished"
    );
}

#[tokio::test]
async fn the_queue_serves_turbo_then_fast_then_relax_first_come_first_served() {
    // Built but not running: this test is the only worker.
    let idle = common::Idle::build().await;
    let (store, account, key) = (idle.store(), &idle.account, idle.key);
    let order = [
        ("relax", 2),
        ("fast", 1),
        ("relax", 2),
        ("turbo", 0),
        ("fast", 1),
    ];
    let mut ids = Vec::new();
    for (mode, priority) in order {
        let t = common::new_task(mode, priority);
        match store.submit(&t, &key, &100.into()).await.unwrap() {
            Submitted::Queued {
                account_id,
                task_id,
                ..
            } => {
                assert_eq!(account_id, account.id);
                ids.push(task_id.to_string());
            }
            other => panic!("not queued: {other:?}"),
        }
    }
    let mut claimed = Vec::new();
    while let Some(t) = store.claim_task("test", 60_000).await.unwrap() {
        claimed.push(t.id);
    }
    let expected = [&ids[3], &ids[1], &ids[4], &ids[0], &ids[2]];
    assert_eq!(claimed.iter().collect::<Vec<_>>(), expected);
}

#[tokio::test]
async fn a_stale_worker_cannot_overwrite_a_newer_attempt_and_lost_tasks_fail_after_max_attempts() {
    let idle = common::Idle::build().await;
    let (store, account, key) = (idle.store(), &idle.account, idle.key);
    let task_id = common::insert(store.as_ref(), &common::new_task("fast", 1), &key).await;
    let id = task_id.to_string();

    // Attempt 1 claims with a lease that runs out at once.
    let first = store.claim_task("w1", -1).await.unwrap().unwrap();
    assert_eq!(first.attempts, 1);
    assert_eq!(store.recover_expired(3).await.unwrap(), (1, vec![]));
    // Attempt 2 takes over.
    let second = store.claim_task("w2", 60_000).await.unwrap().unwrap();
    assert_eq!((second.id.as_str(), second.attempts), (id.as_str(), 2));
    let seq = second.seq;
    let ending = |outcome: Outcome| {
        Ending::new(outcome, &PayloadHead::of(&id, "imagine"), &|k| {
            k.to_string()
        })
    };
    let stale = ending(Outcome::Failed {
        error: "stale".into(),
    });
    assert!(store
        .heartbeat(seq, 1, 60_000, Some(&progress(50)))
        .await
        .unwrap()
        .is_none());
    assert!(
        !store.complete_task(seq, 1, &stale).await.unwrap(),
        "fenced"
    );
    assert!(store
        .mark_processing(seq, 2, 60_000, 0)
        .await
        .unwrap()
        .is_some());
    let done = ending(Outcome::Finished(Output::Grid {
        grid_key: "u".into(),
        image_keys: vec!["a".into(); 4],
        width: 8,
        height: 8,
    }));
    assert!(store.complete_task(seq, 2, &done).await.unwrap());
    assert!(
        !store.complete_task(seq, 2, &stale).await.unwrap(),
        "final is final"
    );
    let row = store
        .task_for_account(&account.id, &task_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.status, TaskStatus::Finished);

    // A task that keeps losing its worker fails after max_attempts with a clear error.
    let doomed = common::insert(store.as_ref(), &common::new_task("fast", 1), &key).await;
    for attempt in 1..=3 {
        let t = store.claim_task("w", -1).await.unwrap().unwrap();
        assert_eq!(t.attempts, attempt);
        let (requeued, failed) = store.recover_expired(3).await.unwrap();
        assert_eq!(
            (requeued, failed),
            if attempt < 3 {
                (1, vec![])
            } else {
                (0, vec![doomed.to_string()])
            }
        );
    }
    let row = store
        .task_for_account(&account.id, &doomed)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.status, TaskStatus::Failed);
    assert!(row.error.unwrap().contains("interrupted 3 times"));
}

#[tokio::test]
async fn accepted_tasks_survive_a_restart_and_finish() {
    let app = TestApp::spawn_with(|c| {
        c.worker.workers = 1;
        c.worker.procedural_min_duration = Duration::from_millis(400);
        c.server.shutdown_timeout = Duration::from_millis(50);
    })
    .await;
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(
            app.imagine(json!({ "prompt": format!("restart {i}") }))
                .await,
        );
    }
    let (dir, config) = app.stop().await;
    let app = TestApp::start(dir, config).await;
    for id in &ids {
        let record = app.wait_final(id, Duration::from_secs(20)).await;
        assert_eq!(record["status"], "finished", "{record}");
    }
}

#[tokio::test]
async fn the_quota_frees_up_as_tasks_end() {
    let app = TestApp::spawn_with(|c| {
        c.plans.default_mut().max_pending = 2;
        c.worker.blocked_terms = vec!["blocked".into()];
    })
    .await;
    let a = app.imagine(json!({"prompt": "first"})).await;
    let b = app.imagine(json!({"prompt": "second, blocked"})).await;
    // Two active: a third may be refused until they end (they may already have).
    app.wait_final(&a, Duration::from_secs(10)).await;
    app.wait_final(&b, Duration::from_secs(10)).await;
    // Both ended (one finished, one failed): the account has room for two again.
    let c = app.imagine(json!({"prompt": "third"})).await;
    let d = app.imagine(json!({"prompt": "fourth"})).await;
    assert_ne!(c, d);
    let (_, account) = app.get("/api/v1/account").await;
    assert!(account["total_images"].as_i64().unwrap() >= 4);
}

#[tokio::test]
async fn the_checkpointer_copies_committed_pages_into_the_database_file() {
    if common::sqlite_only("SQLite's WAL checkpoints") {
        return;
    }
    let app = TestApp::spawn_with(|c| c.worker.workers = 0).await;
    let db = app.config.data_dir.join("easel.db");
    let size = || std::fs::metadata(&db).unwrap().len();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = size();
    // About 300 KiB of tasks: the writer alone would keep them in the WAL (it checkpoints only
    // past 64 MiB), so only the checkpointer can grow the database file.
    for i in 0..300 {
        let prompt = format!("{i} {}", "a quiet harbour at dawn ".repeat(40));
        app.imagine(json!({ "prompt": prompt.trim() })).await;
    }
    let grown = common::wait_for(Duration::from_secs(10), || async {
        (size() >= before + 200 * 1024).then_some(size())
    })
    .await;
    assert!(grown.is_some(), "database file stayed at {} bytes", size());
}

#[tokio::test]
async fn upgrading_keeps_every_task_under_the_id_it_was_given_and_gives_no_id_twice() {
    use easel::store::sqlite::SqliteStore;
    use easel::store::{Outbox, Redelivery, Store, TaskQueue, Views};
    // A database as the release before migration 0004 left it, with tasks keyed by random ids:
    // one finished, with its delivery and one attempt; one queued; and the newest, deleted.
    let (_dir, url, mut conn) = common::database_before(4).await;
    let (done, queued, gone) = (
        uuid::Uuid::new_v4(),
        uuid::Uuid::new_v4(),
        uuid::Uuid::new_v4(),
    );
    sqlx::query(&format!(
        "INSERT INTO accounts (id, email, signing_secret, created_at)
         VALUES ('a1', 'a@example.com', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 0);
         INSERT INTO tasks (id, account_id, task_type, status, priority, prompt, aspect_ratio,
             process_mode, seed, created_at, finished_at, webhook_url)
         VALUES ('{done}', 'a1', 'imagine', 'finished', 1, 'p', '1:1', 'fast', 1, 0, 5,
                 'http://127.0.0.1:9/h'),
                ('{queued}', 'a1', 'imagine', 'pending', 1, 'p', '1:1', 'fast', 1, 0, NULL,
                 'http://127.0.0.1:9/h'),
                ('{gone}', 'a1', 'imagine', 'failed', 1, 'p', '1:1', 'fast', 1, 0, 5, NULL);
         INSERT INTO webhook_deliveries (id, task_id, account_id, url, payload, status,
             attempts, created_at, updated_at)
         VALUES ('msg_1', '{done}', 'a1', 'http://127.0.0.1:9/h', '{{}}', 'delivered', 1, 5, 5);
         INSERT INTO webhook_attempts (delivery_id, attempted_at, duration_ms, status_code)
         VALUES ('msg_1', 5, 3, 200);
         DELETE FROM tasks WHERE id = '{gone}';"
    ))
    .execute(&mut conn)
    .await
    .unwrap();
    drop(conn);

    let store = SqliteStore::open(&url, false).await.unwrap();
    // The finished task, its delivery and its attempts, all under its own id.
    let row = store.task_for_account("a1", &done).await.unwrap().unwrap();
    assert_eq!(
        (row.id.as_str(), row.status.as_str()),
        (&*done.to_string(), "finished")
    );
    assert_eq!(row.webhook.unwrap().status, "delivered");
    let attempts = store.delivery_attempts("a1", &done).await.unwrap().unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].status_code, Some(200));
    assert_eq!(
        store.redeliver("a1", &done).await.unwrap(),
        Redelivery::Queued
    );
    // The queued one runs to its end under its own id, and its webhook says so.
    let claimed = store.claim_task("w", 60_000).await.unwrap().unwrap();
    assert_eq!(claimed.id, queued.to_string());
    let failed = Ending::new(
        Outcome::Failed { error: "no".into() },
        &PayloadHead::of(&claimed.id, "imagine"),
        &|k| k.to_string(),
    );
    assert!(store
        .complete_task(claimed.seq, claimed.attempts, &failed)
        .await
        .unwrap());
    let due = store.claim_due_deliveries(10, 60_000).await.unwrap();
    let mut due_for: Vec<&str> = due.iter().map(|d| d.task_id.as_str()).collect();
    due_for.sort();
    let mut expected = vec![done.to_string(), queued.to_string()];
    expected.sort();
    assert_eq!(due_for, expected);
    let payload = &due
        .iter()
        .find(|d| d.task_id == queued.to_string())
        .unwrap()
        .payload;
    assert!(payload.contains(&queued.to_string()), "{payload}");

    // A new task gets the next `seq` past every one ever given (the deleted task's 3 too), and
    // the id made from it, found again after a restart.
    let key = common::key_hash(&store, "a1").await;
    let new = common::insert(&store, &common::new_task("fast", 1), &key).await;
    // Versions of stored changes (the claim, the end) come from the same counter: the new
    // task's `seq` is past them too.
    let seq = (4..100)
        .find(|s| store.task_id(*s) == new)
        .expect("the id of a seq past every one given");
    assert!(seq >= 4);
    assert_eq!(new.get_version_num(), 4);
    store.close().await;
    let store = SqliteStore::open(&url, false).await.unwrap();
    let row = store.task_for_account("a1", &new).await.unwrap().unwrap();
    assert_eq!(row.id, new.to_string());
    assert!(store.task_for_account("a1", &gone).await.unwrap().is_none());
}

#[tokio::test]
async fn submits_sharing_a_transaction_each_get_their_own_answer_and_the_counters_add_up() {
    if common::sqlite_only("the SQLite writer's shared transactions") {
        return;
    }
    use easel::store::Submitted;
    use sqlx::Connection;
    let idle = common::Idle::build().await;
    let store = idle.store().clone();
    // A second account; a key of the first account that is then revoked.
    let other = store
        .ensure_account(
            "other@example.com",
            &easel::webhooks::signing::generate_secret(),
        )
        .await
        .unwrap();
    let other_key = common::key_hash(store.as_ref(), &other.id).await;
    let revoked = common::key_hash(store.as_ref(), &idle.account.id).await;
    let revoked_id = store.key_owner(&revoked).await.unwrap().unwrap().key_id;
    assert!(store.revoke_api_key(&revoked_id).await.unwrap());

    // 60 submits at once, so that they share batches: 20 per key, the first account limited to
    // 7 tasks queued or running.
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..60 {
        let store = store.clone();
        let (key, limit) = match i % 3 {
            0 => (idle.key, 7),
            1 => (other_key, 1000),
            _ => (revoked, 1000),
        };
        calls.spawn(async move {
            let task = common::new_task("fast", 1);
            (
                i % 3,
                store.submit(&task, &key, &limit.into()).await.unwrap(),
            )
        });
    }
    let mut queued = [0; 3];
    let mut ids = std::collections::HashSet::new();
    while let Some(done) = calls.join_next().await {
        let (who, submitted) = done.unwrap();
        match (who, submitted) {
            (0 | 1, Submitted::Queued { task_id, .. }) => {
                queued[who] += 1;
                assert!(ids.insert(task_id), "an id given twice");
            }
            (0, Submitted::QuotaFull) => {}
            (2, Submitted::KeyNotLive) => {}
            (who, other) => panic!("key {who}: {other:?}"),
        }
    }
    assert_eq!(queued, [7, 20, 0]);

    // Every id given is the task's own, and each account's counter of active tasks is the
    // number of its tasks queued.
    for id in &ids {
        assert!(
            store
                .task_for_account(&idle.account.id, id)
                .await
                .unwrap()
                .is_some()
                || store
                    .task_for_account(&other.id, id)
                    .await
                    .unwrap()
                    .is_some()
        );
    }
    let url = format!("sqlite://{}", idle.dir.path().join("easel.db").display());
    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    let counters: Vec<(String, i64, i64)> = sqlx::query_as(
        "SELECT a.id, a.active_tasks,
                (SELECT count(*) FROM tasks t WHERE t.account_id = a.id AND t.status = 'pending')
         FROM accounts a ORDER BY a.id",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    assert_eq!(counters.len(), 2);
    for (account, counter, pending) in counters {
        let expected = if account == idle.account.id { 7 } else { 20 };
        assert_eq!(
            (counter, pending),
            (expected, expected),
            "account {account}"
        );
    }
}

#[tokio::test]
async fn a_write_that_fails_inside_a_shared_transaction_fails_alone() {
    if common::sqlite_only("the SQLite writer's shared transactions") {
        return;
    }
    use easel::store::Submitted;
    use sqlx::Connection;
    let idle = common::Idle::build().await;
    let store = idle.store().clone();
    // From another connection, as an operator could: refuse tasks whose prompt is "poison".
    let url = format!("sqlite://{}", idle.dir.path().join("easel.db").display());
    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    sqlx::query(
        "CREATE TRIGGER refuse_poison BEFORE INSERT ON tasks WHEN NEW.prompt = 'poison'
         BEGIN SELECT RAISE(ABORT, 'refused by the test'); END",
    )
    .execute(&mut conn)
    .await
    .unwrap();

    // All at once, so that they share the writer's transactions: 60 submits of which every
    // fifth is refused (never the first of a group, so that a refused one comes after others
    // that must then be undone with it and written again alone), and 10 new keys of which
    // every other names no account (a foreign key that cannot hold).
    let mut submits = tokio::task::JoinSet::new();
    for i in 0..60 {
        let store = store.clone();
        let key = idle.key;
        submits.spawn(async move {
            let mut task = common::new_task("fast", 1);
            let poison = i % 5 == 4;
            if poison {
                task.prompt = "poison".into();
            }
            (poison, store.submit(&task, &key, &1000.into()).await)
        });
    }
    let mut keys = tokio::task::JoinSet::new();
    for i in 0..10 {
        let store = store.clone();
        let account = if i % 2 == 0 {
            idle.account.id.clone()
        } else {
            "no-such-account".to_string()
        };
        keys.spawn(async move {
            let hash = easel::auth::hash_key(&format!("test-key-{i}"));
            let stored = store
                .insert_api_key(&account, &format!("k{i}"), "easel_test", &hash)
                .await;
            (i % 2 == 0, hash, stored)
        });
    }

    let mut queued = std::collections::HashSet::new();
    let mut refused = 0;
    while let Some(done) = submits.join_next().await {
        match done.unwrap() {
            (false, Ok(Submitted::Queued { task_id, .. })) => assert!(queued.insert(task_id)),
            (true, Err(_)) => refused += 1,
            (poison, other) => panic!("poison {poison}: {other:?}"),
        }
    }
    assert_eq!((queued.len(), refused), (48, 12));
    while let Some(done) = keys.join_next().await {
        let (good, hash, stored) = done.unwrap();
        assert_eq!(stored.is_ok(), good, "{stored:?}");
        assert_eq!(store.key_owner(&hash).await.unwrap().is_some(), good);
    }

    // What was refused left nothing behind; what was let in is all there, counted once.
    for id in &queued {
        let task = store.task_for_account(&idle.account.id, id).await.unwrap();
        assert_eq!(task.expect("a queued task is stored").prompt, "fast task");
    }
    let (tasks, counter): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM tasks), active_tasks FROM accounts WHERE id = ?",
    )
    .bind(&idle.account.id)
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!((tasks, counter), (48, 48));
}

/// Progress a worker stores with its heartbeat.
fn progress(percentage: i64) -> easel::store::StoredProgress {
    easel::store::StoredProgress {
        percentage,
        preview_key: None,
        retrying: None,
    }
}
