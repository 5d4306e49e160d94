//! Fair sharing of the workers between accounts (docs/design.md, "The queue"), through HTTP on
//! either store (EASEL_TEST_STORE=postgres), and across two PostgreSQL nodes: accounts take
//! turns, a running limit holds back only its own account, relax is not starved.

use std::collections::HashMap;
use std::time::Duration;

use crate::common::{self, TestApp};
use easel::config::Config;
use serde_json::json;
use sqlx::Row;

/// A task's life as stored: who owned it, when it started and ended, how often it was taken.
#[derive(Debug, Clone)]
struct Life {
    id: String,
    account: String,
    mode: String,
    created: i64,
    started: Option<i64>,
    finished: Option<i64>,
    attempts: i64,
}

/// Every task's life, in the order the tasks started (those not started last).
async fn lives(app: &TestApp) -> Vec<Life> {
    let mut db = common::database(&app.config).await;
    let rows = sqlx::query(
        "SELECT seq, account_id, process_mode, created_at, started_at, finished_at, attempts
         FROM tasks",
    )
    .fetch_all(&mut db)
    .await
    .unwrap();
    let mut lives: Vec<(i64, Life)> = rows
        .iter()
        .map(|r| {
            let seq: i64 = r.get(0);
            (
                seq,
                Life {
                    id: app.store.task_id(seq).to_string(),
                    account: r.get(1),
                    mode: r.get(2),
                    created: r.get(3),
                    started: r.get(4),
                    finished: r.get(5),
                    attempts: r.get(6),
                },
            )
        })
        .collect();
    lives.sort_by_key(|(seq, l)| (l.started.is_none(), l.started, *seq));
    lives.into_iter().map(|(_, l)| l).collect()
}

/// Submit `n` imagine tasks with `key` (in `mode`), a few at a time; their ids in submit order.
async fn submit(app: &TestApp, key: &str, n: usize, mode: &str) -> Vec<String> {
    let mut ids = Vec::new();
    for _ in 0..n {
        let body = json!({"prompt": "a lighthouse", "process_mode": mode});
        ids.push(app.imagine_as(key, body).await);
    }
    ids
}

/// A node with no workers, so that what is submitted waits; `adjust` sets the rest.
pub(crate) async fn queue_only(adjust: impl FnOnce(&mut Config)) -> TestApp {
    TestApp::spawn_with(|c| {
        c.worker.workers = 0;
        adjust(c);
    })
    .await
}

/// The same store again, now with `workers` workers (and `adjust`).
async fn restart(app: TestApp, workers: usize, adjust: impl FnOnce(&mut Config)) -> TestApp {
    let (dir, mut config) = app.stop().await;
    config.worker.workers = workers;
    adjust(&mut config);
    TestApp::start(dir, config).await
}

/// Wait until every task has ended.
async fn all_ended(app: &TestApp, within: Duration) -> Vec<Life> {
    common::wait_for(within, || async {
        let lives = lives(app).await;
        lives.iter().all(|l| l.finished.is_some()).then_some(lives)
    })
    .await
    .expect("every task ended in time")
}

#[tokio::test]
async fn one_accounts_backlog_does_not_hold_back_another() {
    let app = TestApp::spawn_with(|c| {
        c.worker.workers = 2;
        c.worker.procedural_min_duration = Duration::from_millis(300);
    })
    .await;
    let a = app.account_with("backlog@example.com", None).await.1;
    let b = app.account_with("newcomer@example.com", None).await.1;
    submit(&app, &a, 300, "fast").await;
    let mine = submit(&app, &b, 1, "fast").await.remove(0);
    let finished = common::wait_for(Duration::from_secs(30), || async {
        let (_, record) = app
            .post_as(&b, "/api/v1/fetch", &json!({"task_id": mine}))
            .await;
        (record["status"] == "finished").then_some(())
    })
    .await;
    assert!(finished.is_some(), "B's task did not finish in time");

    // Between B's submit and its start, at most one of A's tasks started per worker: B joined
    // the round being served, not the end of A's backlog.
    let lives = lives(&app).await;
    let b_life = lives.iter().find(|l| l.id == mine).unwrap().clone();
    let submitted = b_life.created;
    let started = b_life.started.unwrap();
    let a_between = lives
        .iter()
        .filter(|l| l.id != mine)
        .filter_map(|l| l.started)
        .filter(|&s| s > submitted && s < started)
        .count();
    assert!(a_between <= 2, "{a_between} of A's tasks started first");
    let a_left = lives
        .iter()
        .filter(|l| l.id != mine && l.started.is_none_or(|s| s > started))
        .count();
    assert!(
        a_left > 200,
        "only {a_left} of A's tasks were still waiting"
    );
}

#[tokio::test]
async fn accounts_with_backlogs_of_different_lengths_are_served_in_turn() {
    let app = queue_only(|_| {}).await;
    let mut owners = HashMap::new();
    for (name, n) in [("a", 6), ("b", 3), ("c", 1)] {
        let (account, key) = app.account_with(&format!("{name}@example.com"), None).await;
        owners.insert(account, name);
        submit(&app, &key, n, "fast").await;
    }
    // Claimed one at a time, as one worker would (a node's several workers claim at once, and
    // their start times would not tell the claims' order apart).
    let mut order = String::new();
    while let Some(task) = app.store.claim_task("one", 60_000).await.unwrap() {
        order.push_str(owners[&task.account_id]);
    }
    assert_eq!(order, "abcababaaa", "the order of claims");
    // Now the queue is empty. A queues two more, then D (an account with nothing waiting) one:
    // D's joins the round being served, between A's two.
    let (d, key) = app.account_with("d@example.com", None).await;
    owners.insert(d, "d");
    let a_key = app.key_for("a@example.com").await;
    submit(&app, &a_key, 2, "fast").await;
    submit(&app, &key, 1, "fast").await;
    let mut order = String::new();
    while let Some(task) = app.store.claim_task("one", 60_000).await.unwrap() {
        order.push_str(owners[&task.account_id]);
    }
    assert_eq!(
        order, "ada",
        "a newcomer goes second, not after A's backlog"
    );
}

#[tokio::test]
async fn a_waiting_tasks_record_says_where_it_stands_and_why() {
    let app = queue_only(|c| c.plans.default_mut().max_running = 1).await;
    let (_, a) = app.account_with("a@example.com", None).await;
    let (_, b) = app.account_with("b@example.com", None).await;
    let a_ids = submit(&app, &a, 2, "fast").await;
    let b_ids = submit(&app, &b, 1, "fast").await;
    // A's first is taken (by hand, as a worker of another node would): A is at its limit.
    let claimed = app
        .store
        .claim_next("elsewhere", 60_000, &easel::store::ClaimRules::default())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claimed.id, a_ids[0]);
    let record = |key: String, id: String| {
        let app = &app;
        async move {
            let (status, body) = app
                .post_as(&key, "/api/v1/fetch", &json!({"task_id": id}))
                .await;
            assert_eq!(status, 200, "{body}");
            body
        }
    };
    let started = record(a.clone(), a_ids[0].clone()).await;
    assert_eq!(started["waiting_for"], "backend", "{started}");
    assert_eq!(started["queue_position"], 0, "{started}");
    let held = record(a.clone(), a_ids[1].clone()).await;
    assert_eq!(held["waiting_for"], "running_limit", "{held}");
    let next = record(b.clone(), b_ids[0].clone()).await;
    assert_eq!(next["waiting_for"], "turn", "{next}");
    // Only the claimed task is ahead of B's: A's held task is passed over.
    assert_eq!(next["queue_position"], 1, "{next}");
}

#[tokio::test]
async fn a_restart_keeps_the_round_being_served() {
    // A's backlog is half claimed (its claims still running) when the node restarts: the head
    // stands where the claims got to, so a newcomer goes after A's task of that round, not first.
    let app = queue_only(|_| {}).await;
    let mut owners = HashMap::new();
    let (a, a_key) = app.account_with("a@example.com", None).await;
    owners.insert(a, "a");
    submit(&app, &a_key, 6, "fast").await;
    for _ in 0..3 {
        assert!(app.store.claim_task("one", 60_000).await.unwrap().is_some());
    }
    let app = restart(app, 0, |_| {}).await;
    let (b, b_key) = app.account_with("b@example.com", None).await;
    owners.insert(b, "b");
    submit(&app, &b_key, 1, "fast").await;
    let mut order = String::new();
    while let Some(task) = app.store.claim_task("one", 60_000).await.unwrap() {
        order.push_str(owners[&task.account_id]);
    }
    assert_eq!(order, "abaa", "the order of claims after the restart");
}

#[tokio::test]
async fn an_account_at_its_running_limit_does_not_hold_back_another() {
    let app = queue_only(|c| {
        c.plans.default_mut().max_running = 1;
        c.plans.plans.insert(
            "pro".into(),
            easel::config::Plan {
                max_running: 2,
                ..Default::default()
            },
        );
    })
    .await;
    let (a_id, a) = app.account_with("limited@example.com", None).await;
    let (b_id, b) = app.account_with("pro@example.com", None).await;
    let mut db = common::database(&app.config).await;
    sqlx::query(&format!(
        "UPDATE accounts SET plan = 'pro' WHERE id = '{b_id}'"
    ))
    .execute(&mut db)
    .await
    .unwrap();
    submit(&app, &a, 4, "fast").await;
    submit(&app, &b, 4, "fast").await;
    let running = Running::watch(&app.config).await;
    let app = restart(app, 3, |c| {
        c.worker.procedural_min_duration = Duration::from_millis(400);
    })
    .await;
    let lives = all_ended(&app, Duration::from_secs(60)).await;
    let most = running.most().await;
    assert!(lives.iter().all(|l| l.attempts == 1));
    assert_eq!(most[&a_id], 1, "A's plan allows one at a time");
    assert_eq!(most[&b_id], 2, "B's plan allows two");
    // With three workers and A held to one, B's tasks did not wait for A's: B's last task
    // started before A's last.
    let last = |account: &str| {
        lives
            .iter()
            .filter(|l| l.account == account)
            .filter_map(|l| l.started)
            .max()
            .unwrap()
    };
    assert!(last(&b_id) < last(&a_id));
}

/// Watches how many tasks each account has running, as the database says at each look (every
/// few milliseconds), until stopped: the most seen per account. Times written by the nodes
/// cannot show this: a claim takes its clock before it waits for the row an ending holds.
struct Running {
    stop: tokio::sync::oneshot::Sender<()>,
    seen: tokio::task::JoinHandle<HashMap<String, i64>>,
}

impl Running {
    async fn watch(config: &Config) -> Running {
        let mut db = common::database(config).await;
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        let seen = tokio::spawn(async move {
            let mut most: HashMap<String, i64> = HashMap::new();
            while stopped.try_recv().is_err() {
                let rows = sqlx::query(
                    "SELECT account_id, COUNT(*) FROM tasks
                     WHERE status IN ('starting', 'processing') GROUP BY account_id",
                )
                .fetch_all(&mut db)
                .await
                .unwrap();
                for row in rows {
                    let n: i64 = row.get(1);
                    let at = most.entry(row.get(0)).or_default();
                    *at = (*at).max(n);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            most
        });
        Running { stop, seen }
    }

    async fn most(self) -> HashMap<String, i64> {
        let _ = self.stop.send(());
        self.seen.await.unwrap()
    }
}

#[tokio::test]
async fn relax_is_served_under_a_steady_stream_of_fast() {
    let app = queue_only(|c| c.worker.relax_every = 4).await;
    let key = app.key.clone();
    submit(&app, &key, 12, "fast").await;
    let relax = submit(&app, &key, 1, "relax").await.remove(0);
    let app = restart(app, 1, |c| {
        c.worker.procedural_min_duration = Duration::from_millis(100);
    })
    .await;
    // More fast work keeps coming while the relax task waits.
    submit(&app, &key, 8, "fast").await;
    let record = app.wait_final(&relax, Duration::from_secs(30)).await;
    assert_eq!(record["status"], "finished");
    let lives = lives(&app).await;
    // The node's fourth claim takes it; its workers claim at once (procedural's concurrency
    // raises their number), so its start may come a few places later.
    let at = lives.iter().position(|l| l.id == relax).unwrap();
    assert!(at < 8, "the relax task started {}th", at + 1);
    // Ahead of fast tasks queued before it, which strict mode order would have run first.
    let relax_life = &lives[at];
    let overtaken = lives
        .iter()
        .filter(|l| l.mode == "fast" && l.created < relax_life.created)
        .filter(|l| l.started.is_none_or(|s| s > relax_life.started.unwrap()))
        .count();
    assert!(overtaken > 0, "relax overtook no earlier fast task");
    let fast_waiting = lives
        .iter()
        .filter(|l| l.mode == "fast" && l.started.is_none_or(|s| s > lives[at].started.unwrap()))
        .count();
    assert!(
        fast_waiting > 10,
        "fast work was still waiting: {fast_waiting}"
    );
}

#[tokio::test]
async fn two_postgresql_nodes_share_the_queue_fairly_and_claim_each_task_once() {
    let Some(base) = common::postgres() else {
        eprintln!("skipped: no PostgreSQL (EASEL_TEST_POSTGRES)");
        return;
    };
    let url = common::fresh_postgres_url(&base);
    let node = |workers: usize| {
        let url = url.clone();
        async move {
            let dir = tempfile::tempdir().unwrap();
            let mut config = common::test_config(dir.path());
            config.database.url = Some(url);
            config.worker.workers = workers;
            config.worker.procedural_min_duration = Duration::from_millis(150);
            config.plans.default_mut().max_running = 1;
            TestApp::start(dir, config).await
        }
    };
    let api = node(0).await;
    let mut owners = HashMap::new();
    for (name, n) in [("a", 12), ("b", 6), ("c", 3)] {
        let (account, key) = api.account_with(&format!("{name}@example.com"), None).await;
        owners.insert(account, name);
        submit(&api, &key, n, "fast").await;
    }
    let running = Running::watch(&api.config).await;
    let (one, two) = tokio::join!(node(2), node(2));
    let lives = all_ended(&api, Duration::from_secs(60)).await;
    let most = running.most().await;
    assert_eq!(lives.len(), 21);
    assert!(
        lives.iter().all(|l| l.attempts == 1),
        "a task was claimed twice: {lives:?}"
    );
    for (account, name) in &owners {
        assert_eq!(
            most[account], 1,
            "{name} ran {} at once over two nodes",
            most[account]
        );
    }
    // In turn: by the time C's three had started, A had started at most four.
    let order: Vec<&str> = lives.iter().map(|l| owners[&l.account]).collect();
    let c_done = order.iter().rposition(|&o| o == "c").unwrap();
    let a_before = order[..c_done].iter().filter(|&&o| o == "a").count();
    assert!(a_before <= 4, "the order of starts: {order:?}");
    drop((one, two));
}

#[tokio::test]
async fn the_metrics_count_tasks_queued_and_running_by_plan() {
    let token = "a-metrics-token-of-some-length";
    let app = queue_only(|c| c.server.metrics_token = Some(token.into())).await;
    let (pro, key) = app.account_with("pro@example.com", None).await;
    let mut db = common::database(&app.config).await;
    sqlx::query(&format!(
        "UPDATE accounts SET plan = 'pro' WHERE id = '{pro}'"
    ))
    .execute(&mut db)
    .await
    .unwrap();
    submit(&app, &key, 3, "fast").await;
    let mine = app.key.clone();
    submit(&app, &mine, 1, "relax").await;
    assert!(app
        .store
        .claim_task("elsewhere", 60_000)
        .await
        .unwrap()
        .is_some());
    let at = |plan: &str, state: &str| {
        let app = &app;
        let name = format!("easel_account_tasks{{plan=\"{plan}\",state=\"{state}\"}}");
        async move { app.metric(token, &name).await }
    };
    assert_eq!(at("pro", "queued").await, 2.0);
    assert_eq!(at("pro", "running").await, 1.0);
    assert_eq!(at("self-hosted", "queued").await, 1.0);
    assert_eq!(at("self-hosted", "running").await, 0.0);
}
