//! The store conformance suite: every rule easel relies on, checked through the `Store`
//! interface alone, against both implementations. Each case below runs twice, as
//! `store::sqlite::<case>` on a fresh database file and `store::postgres::<case>` on a fresh
//! schema of the tests' PostgreSQL database (`EASEL_TEST_POSTGRES`; required when `CI=true`).

use crate::common;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use easel::domain::{OpKind, Output, PayloadHead, Retrying, TaskStatus};
use easel::store::sqlite::SqliteStore;
use easel::store::{
    AttemptRecord, Ending, KeysSwept, NewTask, Outcome, Redelivery, SharedStore, Submitted,
};

/// A store for one case, with whatever must live as long as it.
struct Fixture {
    store: SharedStore,
    _dir: Option<tempfile::TempDir>,
}

async fn sqlite_store() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("easel.db").display());
    Fixture {
        store: Arc::new(SqliteStore::open(&url, false).await.unwrap()),
        _dir: Some(dir),
    }
}

/// A store on a fresh schema; None (the case passes without running) when there is no
/// PostgreSQL outside CI, which `scripts/test.sh` reports in one line.
async fn postgres_store() -> Option<Fixture> {
    let url = common::fresh_postgres_url(&common::postgres()?);
    Some(Fixture {
        store: open_postgres(&url).await,
        _dir: None,
    })
}

async fn open_postgres(url: &str) -> SharedStore {
    let options = easel::store::postgres::PgOptions {
        max_connections: 6,
        acquire_timeout: Duration::from_secs(5),
    };
    Arc::new(
        easel::store::postgres::PgStore::open(url, &options)
            .await
            .unwrap(),
    )
}

macro_rules! conformance {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let f = super::sqlite_store().await;
                    super::$case(&f.store).await;
                    f.store.close().await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let Some(f) = super::postgres_store().await else { return };
                    super::$case(&f.store).await;
                    f.store.close().await;
                }
            )*
        }
    };
}

conformance!(
    submits_check_the_key_and_the_quota_in_the_transaction_that_inserts,
    claims_take_turbo_then_fast_then_relax_oldest_first_and_never_one_task_twice,
    every_change_after_a_claim_is_fenced_by_its_attempt,
    lost_tasks_are_requeued_then_fail_after_max_attempts_with_their_webhook,
    the_outbox_row_is_written_with_the_final_state_and_its_attempts_are_fenced,
    redelivery_needs_a_final_task_with_a_webhook_of_the_callers_own,
    accounts_are_created_once_and_keys_are_refused_from_their_revocation_on,
    reads_show_only_the_keys_own_tasks_with_their_delivery_state,
    submits_and_endings_wake_idle_workers_and_the_dispatcher,
    emails_are_unique_in_any_case_and_flags_and_passwords_are_kept,
    sessions_are_found_by_hash_until_they_expire_or_are_deleted,
    a_disabled_account_is_refused_everywhere_until_enabled,
    throttle_events_are_counted_per_scope_within_the_window_and_cleared_by_prefix,
    credits_are_charged_in_the_insert_refunded_on_failure_and_ledgered,
    tasks_are_listed_newest_first_by_cursor_with_filters_children_and_usage,
    operators_see_the_queue_by_status_and_mode_and_failing_destinations,
    upkeep_reads_tasks_by_id_whatever_their_account_with_their_output,
    a_cancel_ends_a_queued_or_claimed_task_once_refunds_it_and_fences_out_its_worker,
    expired_tasks_are_final_ones_oldest_first_until_their_data_is_marked_removed,
    a_keyed_submit_stores_its_answer_and_replays_it_without_a_charge,
    an_expired_key_is_stored_over_and_swept_a_window_at_a_time,
    submits_with_one_key_at_once_store_one_task_and_the_rest_replay_or_are_in_use,
    a_failed_backend_attempt_is_stored_and_told_with_the_progress_until_cleared,
);

fn task(mode: &str, webhook: Option<&str>) -> NewTask {
    NewTask {
        webhook_url: webhook.map(String::from),
        webhook_secret: webhook.map(|_| "shh".to_string()),
        ..common::new_task(mode, easel_priority(mode))
    }
}

fn easel_priority(mode: &str) -> i64 {
    match mode {
        "turbo" => 0,
        "fast" => 1,
        _ => 2,
    }
}

/// The account created first, and a live key of it.
async fn account_and_key(store: &SharedStore, email: &str) -> (String, [u8; 32]) {
    let account = store.ensure_account(email, "whsec_c2VjcmV0").await.unwrap();
    let key = common::key_hash(store.as_ref(), &account.id).await;
    (account.id, key)
}

async fn queued(store: &SharedStore, t: &NewTask, key: &[u8; 32]) -> uuid::Uuid {
    match store.submit(t, key, &1000.into()).await.unwrap() {
        Submitted::Queued { task_id, .. } => task_id,
        other => panic!("not queued: {other:?}"),
    }
}

fn finished(id: &str) -> Ending {
    Ending::new(
        Outcome::Finished(Output::Grid {
            grid_key: format!("{id}/f/grid.png"),
            image_keys: (0..4).map(|i| format!("{id}/f/{i}.png")).collect(),
            width: 8,
            height: 8,
        }),
        &PayloadHead::of(id, "imagine"),
        &|key| format!("https://img.example/{key}"),
    )
}

fn failed(id: &str, why: &str) -> Ending {
    Ending::new(
        Outcome::Failed { error: why.into() },
        &PayloadHead::of(id, "imagine"),
        &|key| key.to_string(),
    )
}

async fn submits_check_the_key_and_the_quota_in_the_transaction_that_inserts(s: &SharedStore) {
    let (_, key) = account_and_key(s, "a@example.com").await;
    let (other_id, other) = account_and_key(s, "b@example.com").await;
    // 30 submits at once for an account limited to 7; another account beside it, unlimited.
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..30 {
        let s = s.clone();
        let (key, limit) = if i % 2 == 0 { (key, 7) } else { (other, 1000) };
        calls.spawn(async move {
            (
                i % 2,
                s.submit(&task("fast", None), &key, &limit.into()).await,
            )
        });
    }
    let mut counts = [(0, 0); 2];
    let mut ids = HashSet::new();
    while let Some(done) = calls.join_next().await {
        let (who, submitted) = done.unwrap();
        match submitted.unwrap() {
            Submitted::Queued {
                task_id,
                account_id,
                ..
            } => {
                assert!(ids.insert(task_id), "an id given twice");
                assert_eq!(task_id.get_version_num(), 4);
                if who == 1 {
                    assert_eq!(account_id, other_id);
                }
                counts[who].0 += 1;
            }
            Submitted::QuotaFull => counts[who].1 += 1,
            other => panic!("the keys are live and unlimited: {other:?}"),
        }
    }
    assert_eq!(counts, [(7, 8), (15, 0)]);
    // Unknown and revoked keys store nothing.
    assert_eq!(
        s.submit(&task("fast", None), &[9u8; 32], &1000.into())
            .await
            .unwrap(),
        Submitted::KeyNotLive
    );
    let owner = s.key_owner(&other).await.unwrap().unwrap();
    assert!(s.revoke_api_key(&owner.key_id).await.unwrap());
    assert_eq!(
        s.submit(&task("fast", None), &other, &1000.into())
            .await
            .unwrap(),
        Submitted::KeyNotLive
    );
    let counts: i64 = s.task_counts().await.unwrap().iter().map(|(_, n)| n).sum();
    assert_eq!(counts, 22);
    // A task's end frees its place in the quota.
    assert_eq!(
        s.submit(&task("fast", None), &key, &7.into())
            .await
            .unwrap(),
        Submitted::QuotaFull
    );
    loop {
        let t = s.claim_task("w", 60_000).await.unwrap().unwrap();
        if t.account_id != other_id {
            assert!(s
                .complete_task(t.seq, t.attempts, &failed(&t.id, "x"))
                .await
                .unwrap());
            break;
        }
    }
    let freed = s
        .submit(&task("fast", None), &key, &7.into())
        .await
        .unwrap();
    assert!(matches!(freed, Submitted::Queued { .. }), "{freed:?}");
}

async fn claims_take_turbo_then_fast_then_relax_oldest_first_and_never_one_task_twice(
    s: &SharedStore,
) {
    let (_, key) = account_and_key(s, "a@example.com").await;
    let mut ids = Vec::new();
    for mode in ["relax", "fast", "relax", "turbo", "fast"] {
        ids.push(queued(s, &task(mode, None), &key).await.to_string());
    }
    let mut order = Vec::new();
    while let Some(t) = s.claim_task("w", 60_000).await.unwrap() {
        assert_eq!(t.attempts, 1);
        order.push(t.id);
    }
    assert_eq!(order, [&*ids[3], &ids[1], &ids[4], &ids[0], &ids[2]]);

    // Eight claimers at once over 40 tasks: each task claimed exactly once.
    for _ in 0..40 {
        queued(s, &task("fast", None), &key).await;
    }
    let mut claimers = tokio::task::JoinSet::new();
    for w in 0..8 {
        let s = s.clone();
        claimers.spawn(async move {
            let mut got = Vec::new();
            while let Some(t) = s.claim_task(&format!("w{w}"), 60_000).await.unwrap() {
                got.push(t.id);
            }
            got
        });
    }
    let mut all = Vec::new();
    while let Some(got) = claimers.join_next().await {
        all.extend(got.unwrap());
    }
    let distinct: HashSet<_> = all.iter().collect();
    assert_eq!((all.len(), distinct.len()), (40, 40));
}

async fn every_change_after_a_claim_is_fenced_by_its_attempt(s: &SharedStore) {
    let (account, key) = account_and_key(s, "a@example.com").await;
    let id = queued(s, &task("fast", None), &key).await;
    let first = s.claim_task("w1", -1).await.unwrap().unwrap();
    assert_eq!((first.id.clone(), first.attempts), (id.to_string(), 1));
    assert_eq!(s.recover_expired(3).await.unwrap(), (1, vec![]));
    let second = s.claim_task("w2", 60_000).await.unwrap().unwrap();
    assert_eq!(second.attempts, 2);
    let seq = second.seq;
    // The first worker, back from the dead, changes nothing.
    assert!(s
        .mark_processing(seq, 1, 60_000, 0)
        .await
        .unwrap()
        .is_none());
    assert!(s
        .heartbeat(seq, 1, 60_000, Some(&progress(50)))
        .await
        .unwrap()
        .is_none());
    assert!(!s
        .complete_task(seq, 1, &failed(&first.id, "stale"))
        .await
        .unwrap());
    assert!(!s.release_task(seq, 1).await.unwrap());
    // The second goes on, marked processing with the progress its job has reached, in one
    // write whose version it answers (newer than the claim's).
    let claimed = s.task_for_account(&account, &id).await.unwrap().unwrap();
    let version = s.mark_processing(seq, 2, 60_000, 10).await.unwrap();
    let marked = s.task_for_account(&account, &id).await.unwrap().unwrap();
    assert_eq!(
        (marked.status, marked.percentage),
        (TaskStatus::Processing, 10)
    );
    assert_eq!(version, Some(marked.version));
    assert!(
        marked.version > claimed.version,
        "{} after {}",
        marked.version,
        claimed.version
    );
    assert!(s
        .heartbeat(seq, 2, 60_000, Some(&progress(40)))
        .await
        .unwrap()
        .is_some());
    assert!(s
        .heartbeat(seq, 2, 60_000, Some(&progress(30)))
        .await
        .unwrap()
        .is_some());
    let running = s.task_for_account(&account, &id).await.unwrap().unwrap();
    assert_eq!(
        (running.status.as_str(), running.percentage),
        ("processing", 40)
    );
    assert!(s
        .complete_task(seq, 2, &finished(&second.id))
        .await
        .unwrap());
    assert!(
        !s.complete_task(seq, 2, &failed(&second.id, "again"))
            .await
            .unwrap(),
        "a final state is final"
    );
    let done = s.task_for_account(&account, &id).await.unwrap().unwrap();
    assert_eq!(done.status, TaskStatus::Finished);
    assert_eq!(done.percentage, 100);
    assert_eq!(done.attempts, 2);
    let Some(Output::Grid {
        grid_key,
        image_keys,
        ..
    }) = &done.output
    else {
        panic!("a grid: {:?}", done.output)
    };
    assert_eq!(grid_key, &format!("{id}/f/grid.png"));
    assert_eq!(image_keys.len(), 4);
    assert!(done.finished_at >= done.started_at);
    assert_eq!(
        s.account_by_email("a@example.com")
            .await
            .unwrap()
            .unwrap()
            .total_images,
        4
    );

    // Released at shutdown: back in the queue, the attempt not counted.
    let id2 = queued(s, &task("fast", None), &key).await;
    let t = s.claim_task("w", 60_000).await.unwrap().unwrap();
    assert!(s.release_task(t.seq, t.attempts).await.unwrap());
    let again = s.claim_task("w", 60_000).await.unwrap().unwrap();
    assert_eq!((again.id, again.attempts), (id2.to_string(), 1));
}

async fn lost_tasks_are_requeued_then_fail_after_max_attempts_with_their_webhook(s: &SharedStore) {
    let (account, key) = account_and_key(s, "a@example.com").await;
    let id = queued(s, &task("fast", Some("https://hooks.example/x")), &key).await;
    for attempt in 1..=3 {
        let t = s.claim_task("w", -1).await.unwrap().unwrap();
        assert_eq!(t.attempts, attempt);
        let (requeued, failed) = s.recover_expired(3).await.unwrap();
        if attempt < 3 {
            assert_eq!((requeued, failed.len()), (1, 0));
        } else {
            assert_eq!((requeued, failed), (0, vec![id.to_string()]));
        }
    }
    let row = s.task_for_account(&account, &id).await.unwrap().unwrap();
    assert_eq!(row.status, TaskStatus::Failed);
    assert!(row
        .error
        .as_deref()
        .unwrap()
        .contains("interrupted 3 times"));
    let due = s.claim_due_deliveries(10, 60_000).await.unwrap();
    assert_eq!(due.len(), 1);
    let payload: serde_json::Value = serde_json::from_str(&due[0].payload).unwrap();
    assert_eq!(payload["status"], "failed");
    assert_eq!(payload["task_id"], id.to_string());
    assert!(s.claim_task("w", 60_000).await.unwrap().is_none());
}

async fn the_outbox_row_is_written_with_the_final_state_and_its_attempts_are_fenced(
    s: &SharedStore,
) {
    let (account, key) = account_and_key(s, "a@example.com").await;
    let id = queued(s, &task("fast", Some("https://hooks.example/x")), &key).await;
    let silent = queued(s, &task("fast", None), &key).await;
    assert!(s.claim_due_deliveries(10, 60_000).await.unwrap().is_empty());
    let mut endings = Vec::new();
    while let Some(t) = s.claim_task("w", 60_000).await.unwrap() {
        let ending = finished(&t.id);
        assert!(s.complete_task(t.seq, t.attempts, &ending).await.unwrap());
        endings.push((t.id, ending));
    }
    assert_eq!(endings.len(), 2);
    let ending = &endings
        .iter()
        .find(|(t, _)| *t == id.to_string())
        .unwrap()
        .1;

    // Only the task with a webhook has a delivery, with the payload byte for byte.
    let due = s.claim_due_deliveries(10, 60_000).await.unwrap();
    assert_eq!(due.len(), 1);
    let d = &due[0];
    assert_eq!(d.task_id, id.to_string());
    assert_eq!(d.payload, ending.payload);
    assert_eq!(d.url, "https://hooks.example/x");
    assert_eq!(d.webhook_secret.as_deref(), Some("shh"));
    assert_eq!(d.signing_secret, "whsec_c2VjcmV0");
    assert_eq!(d.attempts, 0);
    assert!(d.id.starts_with("msg_"));
    // Leased: not claimed again while the lease runs.
    assert!(s.claim_due_deliveries(10, 60_000).await.unwrap().is_empty());
    assert!(s.next_delivery_due().await.unwrap().is_none());

    // A failed attempt schedules a retry; a second record of the same claim is fenced off.
    let now = easel::store::now_ms();
    let failure = AttemptRecord {
        attempted_at: now,
        duration_ms: 12,
        status_code: Some(503),
        error: Some("HTTP 503".into()),
        delivered: false,
        next_attempt_at: Some(now - 1),
        first_failed_at: Some(now),
    };
    assert!(s.record_attempt(d, &failure).await.unwrap());
    assert!(!s.record_attempt(d, &failure).await.unwrap());
    assert!(s.next_delivery_due().await.unwrap().is_some());
    let row = s.task_for_account(&account, &id).await.unwrap().unwrap();
    let hook = row.webhook.unwrap();
    assert_eq!((hook.status.as_str(), hook.attempts), ("pending", 1));
    assert_eq!(hook.last_status_code, Some(503));

    // Claimed again, handed back unsent, claimed again at once, then delivered.
    let retry = s.claim_due_deliveries(10, 60_000).await.unwrap();
    assert_eq!((retry.len(), retry[0].attempts), (1, 1));
    assert_eq!(retry[0].first_failed_at, Some(now));
    assert_eq!(s.release_deliveries(&retry).await.unwrap(), 1);
    let retry = s.claim_due_deliveries(10, 60_000).await.unwrap();
    assert_eq!(retry.len(), 1);
    let delivered = AttemptRecord {
        status_code: Some(200),
        error: None,
        delivered: true,
        next_attempt_at: None,
        ..failure.clone()
    };
    assert!(s.record_attempt(&retry[0], &delivered).await.unwrap());
    let attempts = s.delivery_attempts(&account, &id).await.unwrap().unwrap();
    let codes: Vec<_> = attempts.iter().map(|a| a.status_code).collect();
    assert_eq!(codes, [Some(503), Some(200)]);
    assert_eq!(attempts[0].duration_ms, 12);
    let hook = s
        .task_for_account(&account, &id)
        .await
        .unwrap()
        .unwrap()
        .webhook
        .unwrap();
    assert_eq!((hook.status.as_str(), hook.attempts), ("delivered", 2));
    assert!(s.claim_due_deliveries(10, 60_000).await.unwrap().is_empty());
    assert!(s
        .delivery_attempts(&account, &silent)
        .await
        .unwrap()
        .unwrap()
        .is_empty());

    // The last retry failing makes it undeliverable.
    assert_eq!(
        s.redeliver(&account, &id).await.unwrap(),
        Redelivery::Queued
    );
    let again = s.claim_due_deliveries(10, 60_000).await.unwrap();
    assert_eq!(again[0].attempts, 0, "a fresh schedule");
    // A redelivery while that attempt is in flight: the attempt's record, fenced by a claim
    // made before it, does not take the fresh schedule's place (its attempt count is 0 again).
    assert_eq!(
        s.redeliver(&account, &id).await.unwrap(),
        Redelivery::Queued
    );
    assert!(!s.record_attempt(&again[0], &delivered).await.unwrap());
    let again = s.claim_due_deliveries(10, 60_000).await.unwrap();
    assert_eq!(
        (again.len(), again[0].attempts),
        (1, 0),
        "still due after the redelivery"
    );
    let last = AttemptRecord {
        next_attempt_at: None,
        ..failure
    };
    assert!(s.record_attempt(&again[0], &last).await.unwrap());
    let hook = s
        .task_for_account(&account, &id)
        .await
        .unwrap()
        .unwrap()
        .webhook
        .unwrap();
    assert_eq!(hook.status, "undeliverable");
}

async fn redelivery_needs_a_final_task_with_a_webhook_of_the_callers_own(s: &SharedStore) {
    let (account, key) = account_and_key(s, "a@example.com").await;
    let (other, _) = account_and_key(s, "b@example.com").await;
    let hooked = queued(s, &task("fast", Some("https://hooks.example/x")), &key).await;
    assert_eq!(
        s.redeliver(&account, &hooked).await.unwrap(),
        Redelivery::NotFinal
    );
    let plain = queued(s, &task("fast", None), &key).await;
    while let Some(t) = s.claim_task("w", 60_000).await.unwrap() {
        assert!(s
            .complete_task(t.seq, t.attempts, &failed(&t.id, "no"))
            .await
            .unwrap());
    }
    assert_eq!(
        s.redeliver(&account, &plain).await.unwrap(),
        Redelivery::NoWebhook
    );
    assert_eq!(
        s.redeliver(&other, &hooked).await.unwrap(),
        Redelivery::TaskNotFound
    );
    assert_eq!(
        s.redeliver(&account, &uuid::Uuid::new_v4()).await.unwrap(),
        Redelivery::TaskNotFound
    );
    assert!(s
        .delivery_attempts(&other, &hooked)
        .await
        .unwrap()
        .is_none());
    assert_eq!(
        s.redeliver(&account, &hooked).await.unwrap(),
        Redelivery::Queued
    );
}

async fn accounts_are_created_once_and_keys_are_refused_from_their_revocation_on(s: &SharedStore) {
    assert_eq!(s.account_count().await.unwrap(), 0);
    assert!(s.first_account().await.unwrap().is_none());
    let a = s
        .create_account("a@example.com", "whsec_a")
        .await
        .unwrap()
        .unwrap();
    assert!(s
        .create_account("a@example.com", "whsec_x")
        .await
        .unwrap()
        .is_none());
    let again = s.ensure_account("a@example.com", "whsec_y").await.unwrap();
    assert_eq!(
        (again.id.as_str(), again.signing_secret.as_str()),
        (&*a.id, "whsec_a")
    );
    s.ensure_account("b@example.com", "whsec_b").await.unwrap();
    assert_eq!(s.account_count().await.unwrap(), 2);
    assert_eq!(s.first_account().await.unwrap().unwrap().id, a.id);
    s.set_signing_secret(&a.id, "whsec_new").await.unwrap();
    assert_eq!(
        s.account_by_email("a@example.com")
            .await
            .unwrap()
            .unwrap()
            .signing_secret,
        "whsec_new"
    );
    assert!(s
        .account_by_email("nobody@example.com")
        .await
        .unwrap()
        .is_none());

    let key_id = s
        .insert_api_key(&a.id, "laptop", "easel_abc", &[7u8; 32])
        .await
        .unwrap();
    let owner = s.key_owner(&[7u8; 32]).await.unwrap().unwrap();
    assert_eq!(
        (owner.key_id.as_str(), owner.account.id.as_str()),
        (&*key_id, &*a.id)
    );
    assert_eq!(owner.last_used_at, None);
    s.touch_api_key(&key_id, 1234).await.unwrap();
    let keys = s.list_api_keys().await.unwrap();
    assert_eq!(keys.len(), 1);
    assert_eq!(
        (
            keys[0].name.as_str(),
            keys[0].prefix.as_str(),
            keys[0].last_used_at
        ),
        ("laptop", "easel_abc", Some(1234))
    );
    assert_eq!(keys[0].account_email, "a@example.com");
    assert!(s.revoke_api_key(&key_id).await.unwrap());
    assert!(!s.revoke_api_key(&key_id).await.unwrap(), "revoked once");
    assert!(s.key_owner(&[7u8; 32]).await.unwrap().is_none());
    assert!(s
        .task_for_key(&[7u8; 32], &uuid::Uuid::new_v4())
        .await
        .unwrap()
        .is_none());
    assert!(s.list_api_keys().await.unwrap()[0].revoked_at.is_some());
}

async fn reads_show_only_the_keys_own_tasks_with_their_delivery_state(s: &SharedStore) {
    let (_, key) = account_and_key(s, "a@example.com").await;
    let (_, other) = account_and_key(s, "b@example.com").await;
    let mine = queued(s, &task("turbo", Some("https://hooks.example/x")), &key).await;
    let theirs = queued(s, &task("fast", None), &other).await;
    let (live, found) = s.task_for_key(&key, &mine).await.unwrap().unwrap();
    let found = found.unwrap();
    assert_eq!(found.id, mine.to_string());
    assert_eq!(
        (found.status.as_str(), found.process_mode.as_str()),
        ("pending", "turbo")
    );
    assert_eq!(found.prompt, "turbo task");
    let hook = found.webhook.unwrap();
    assert_eq!(
        (hook.url.as_str(), hook.status.as_str()),
        ("https://hooks.example/x", "pending")
    );
    assert!(
        live.last_used_at.is_some(),
        "a submit records the key's use"
    );
    let (_, none) = s.task_for_key(&key, &theirs).await.unwrap().unwrap();
    assert!(none.is_none(), "another account's task is not found");
    let (_, many) = s
        .tasks_for_key(&key, &[mine, theirs, uuid::Uuid::new_v4()])
        .await
        .unwrap()
        .unwrap();
    assert_eq!(many.len(), 1);
    assert_eq!(many[0].id, mine.to_string());
    assert!(s
        .tasks_for_key(&[1u8; 32], &[mine])
        .await
        .unwrap()
        .is_none());
    // The first task stored has the id the store makes of the first place in its order.
    assert_eq!(mine, s.task_id(1));
}

/// The sweep of unreferenced images reads tasks by id alone, finished ones with their output;
/// and a task the worker hands back (its image store failing) keeps its attempts.
async fn upkeep_reads_tasks_by_id_whatever_their_account_with_their_output(s: &SharedStore) {
    let (_, key) = account_and_key(s, "a@example.com").await;
    let (_, other) = account_and_key(s, "b@example.com").await;
    let mine = queued(s, &task("turbo", None), &key).await;
    let theirs = queued(s, &task("fast", None), &other).await;
    let claimed = s.claim_task("w", 60_000).await.unwrap().unwrap();
    assert_eq!(claimed.id, mine.to_string());
    let ending = finished(&claimed.id);
    assert!(s
        .complete_task(claimed.seq, claimed.attempts, &ending)
        .await
        .unwrap());
    let again = s.claim_task("w", 60_000).await.unwrap().unwrap();
    assert_eq!(again.id, theirs.to_string());
    assert!(s.release_task(again.seq, again.attempts).await.unwrap());

    let mut found = s
        .tasks_by_id(&[mine, theirs, uuid::Uuid::new_v4()])
        .await
        .unwrap();
    found.sort_by_key(|t| t.seq);
    assert_eq!(found.len(), 2, "both accounts' tasks, and no unknown one");
    assert_eq!(found[0].id, mine.to_string());
    assert_eq!(found[0].status, TaskStatus::Finished);
    let columns = found[0].output.as_ref().unwrap().to_columns();
    assert_eq!(columns.grid_key, Some(format!("{mine}/f/grid.png")));
    assert_eq!(found[1].id, theirs.to_string());
    assert_eq!(found[1].status, TaskStatus::Pending);
    assert_eq!(found[1].attempts, 0, "a released claim is not counted");
    assert!(s.tasks_by_id(&[]).await.unwrap().is_empty());
}

async fn submits_and_endings_wake_idle_workers_and_the_dispatcher(s: &SharedStore) {
    let (_, key) = account_and_key(s, "a@example.com").await;
    let wakeups = s.wakeups();
    let queue = wakeups.queue.notified();
    let outbox = wakeups.outbox.notified();
    tokio::pin!(queue, outbox);
    queue.as_mut().enable();
    outbox.as_mut().enable();
    queued(s, &task("fast", Some("https://hooks.example/x")), &key).await;
    tokio::time::timeout(Duration::from_secs(5), queue)
        .await
        .expect("a submit wakes the workers");
    let t = s.claim_task("w", 60_000).await.unwrap().unwrap();
    assert!(s
        .complete_task(t.seq, t.attempts, &finished(&t.id))
        .await
        .unwrap());
    tokio::time::timeout(Duration::from_secs(5), outbox)
        .await
        .expect("a queued delivery wakes the dispatcher");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_nodes_share_migrations_ids_wakeups_the_quota_and_revocations() {
    let Some(base) = common::postgres() else {
        return;
    };
    let url = common::fresh_postgres_url(&base);
    // Three nodes start at once on an empty schema: the advisory lock lets one migrate.
    let (a, b, c) = tokio::join!(
        open_postgres(&url),
        open_postgres(&url),
        open_postgres(&url)
    );
    assert_eq!(a.task_id(7), b.task_id(7));
    assert_eq!(b.task_id(7), c.task_id(7));
    let stop = tokio_util::sync::CancellationToken::new();
    let listening = tokio::spawn({
        let b = b.clone();
        let stop = stop.clone();
        async move { b.run_background(stop).await }
    });
    let (_, key) = account_and_key(&a, "a@example.com").await;
    // Node b hears of node a's submit through LISTEN/NOTIFY.
    let mut heard = false;
    for _ in 0..20 {
        let woken = b.wakeups().queue.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        queued(&a, &task("fast", None), &key).await;
        if tokio::time::timeout(Duration::from_millis(500), woken)
            .await
            .is_ok()
        {
            heard = true;
            break;
        }
    }
    assert!(heard, "node b was never woken by node a's submits");
    // And b serves the task a stored, under the same id.
    let t = b.claim_task("b", 60_000).await.unwrap().unwrap();
    let account = a.first_account().await.unwrap().unwrap();
    let id: uuid::Uuid = t.id.parse().unwrap();
    assert!(a
        .task_for_account(&account.id, &id)
        .await
        .unwrap()
        .is_some());

    // The quota holds across nodes: 30 submits at once through two nodes, for an account
    // allowed 7 tasks queued or running.
    let (_, limited) = account_and_key(&a, "q@example.com").await;
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..30 {
        let node = if i % 2 == 0 { a.clone() } else { b.clone() };
        calls.spawn(async move { node.submit(&task("fast", None), &limited, &7.into()).await });
    }
    let mut queued_there = 0;
    while let Some(done) = calls.join_next().await {
        match done.unwrap().unwrap() {
            Submitted::Queued { .. } => queued_there += 1,
            Submitted::QuotaFull => {}
            other => panic!("the key is live and unlimited: {other:?}"),
        }
    }
    assert_eq!(queued_there, 7);
    // A key revoked through one node is refused by another from its next request.
    let owner = c.key_owner(&limited).await.unwrap().unwrap();
    assert!(a.revoke_api_key(&owner.key_id).await.unwrap());
    assert!(c.key_owner(&limited).await.unwrap().is_none());
    assert_eq!(
        c.submit(&task("fast", None), &limited, &1000.into())
            .await
            .unwrap(),
        Submitted::KeyNotLive
    );

    stop.cancel();
    listening.await.unwrap();
    for s in [a, b, c] {
        s.close().await;
    }
}

/// The submits' drainer keeps a connection of its own from group to group: when the server ends
/// it (a restart, a failover, an operator), the next group begins again on a new one instead of
/// failing its submits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_submits_go_on_after_the_server_ends_their_connection() {
    use sqlx::Connection;
    let Some(base) = common::postgres() else {
        return;
    };
    let (store, key, tag) = tagged_postgres_store(&base, "").await;
    queued(&store, &task("fast", None), &key).await;
    let mut admin = sqlx::PgConnection::connect(&base).await.unwrap();
    let ended: Vec<(bool,)> = sqlx::query_as(
        "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity
         WHERE application_name = $1",
    )
    .bind(&tag)
    .fetch_all(&mut admin)
    .await
    .unwrap();
    // The pool's connection that made the account, and the submits' own.
    assert!(ended.len() >= 2, "{ended:?}");
    assert!(ended.iter().all(|(done,)| *done), "{ended:?}");
    for _ in 0..3 {
        queued(&store, &task("fast", None), &key).await;
    }
    assert_eq!(pending(&store).await, 4);
    admin.close().await.unwrap();
    store.close().await;
}

/// A PostgreSQL store on a fresh schema whose connections, and only its own, carry a tag as
/// their `application_name`, with `params` added to its URL; an account's key for it; the tag.
async fn tagged_postgres_store(base: &str, params: &str) -> (SharedStore, [u8; 32], String) {
    let tag = format!("t{}", uuid::Uuid::new_v4().simple());
    let url = format!(
        "{}&application_name={tag}{params}",
        common::fresh_postgres_url(base)
    );
    let store = open_postgres(&url).await;
    let (_, key) = account_and_key(&store, "a@example.com").await;
    (store, key, tag)
}

/// How many of the server's sessions carry `tag`.
async fn sessions_tagged(base: &str, tag: &str) -> i64 {
    use sqlx::Connection;
    let mut admin = sqlx::PgConnection::connect(base).await.unwrap();
    let (n,): (i64,) =
        sqlx::query_as("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1")
            .bind(tag)
            .fetch_one(&mut admin)
            .await
            .unwrap();
    admin.close().await.unwrap();
    n
}

/// A server with `idle_session_timeout` ends the connection that the submits keep open between
/// groups (SQLSTATE 57P05, or a closed socket when the drainer next writes); the next submit
/// begins again on a new one.
#[tokio::test]
async fn postgres_submits_go_on_after_an_idle_session_timeout() {
    let Some(base) = common::postgres() else {
        return;
    };
    let params = "&options=-c%20idle_session_timeout%3D200";
    let (store, key, tag) = tagged_postgres_store(&base, params).await;
    queued(&store, &task("fast", None), &key).await;
    assert!(sessions_tagged(&base, &tag).await >= 2);
    tokio::time::sleep(Duration::from_millis(700)).await;
    // The server ended them all: the pool's and the submits' own.
    assert_eq!(sessions_tagged(&base, &tag).await, 0);
    for _ in 0..3 {
        queued(&store, &task("fast", None), &key).await;
    }
    assert_eq!(pending(&store).await, 4);
    store.close().await;
}

/// SQLite's plan for an account's listing of one type, its steps joined.
async fn listing_plan(conn: &mut sqlx::SqliteConnection, task_type: OpKind) -> String {
    let filter = easel::store::TaskFilter {
        status: None,
        task_type: Some(task_type),
        ..Default::default()
    };
    let sql = format!(
        "EXPLAIN QUERY PLAN SELECT t.* FROM tasks t WHERE t.account_id = 'a' AND t.seq < 9{} \
         ORDER BY t.seq DESC LIMIT 21",
        filter.conditions()
    );
    let rows: Vec<(i64, i64, i64, String)> = sqlx::query_as(&sql).fetch_all(conn).await.unwrap();
    rows.into_iter().map(|r| r.3).collect::<Vec<_>>().join("; ")
}

/// SQLite uses a partial index only when the query repeats its condition word for word, which
/// `TaskFilter::conditions` does for the type index: a listing by a type other than `imagine`
/// reads `tasks_by_account_type`, an `imagine` one `tasks_by_account`.
#[tokio::test]
async fn sqlite_listings_by_type_read_the_partial_type_index() {
    use sqlx::Connection;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("easel.db").display());
    // Opened for its migrations.
    let store: SharedStore = Arc::new(SqliteStore::open(&url, false).await.unwrap());
    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    let blend = listing_plan(&mut conn, OpKind::Blend).await;
    assert!(
        blend.contains("USING INDEX tasks_by_account_type "),
        "{blend}"
    );
    let imagine = listing_plan(&mut conn, OpKind::Imagine).await;
    assert!(!imagine.contains("tasks_by_account_type"), "{imagine}");
    conn.close().await.unwrap();
    store.close().await;
}

#[tokio::test]
async fn a_database_url_with_an_unknown_scheme_stops_easel_naming_the_setting() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::test_config(dir.path());
    config.database.url = Some("mysql://root@127.0.0.1/easel".into());
    let err = easel::Application::build(config)
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("database_url"), "{err}");
    assert!(err.contains("postgres://"), "{err}");
    assert!(
        !dir.path().join("mysql:").exists(),
        "no SQLite file made of the URL"
    );
}

#[tokio::test]
async fn easel_migrate_brings_either_database_up_to_date_and_exits() {
    use sqlx::Connection;
    let bin = env!("CARGO_BIN_EXE_easel");
    let dir = tempfile::tempdir().unwrap();
    let migrate = |url: Option<&str>| {
        let mut cmd = std::process::Command::new(bin);
        cmd.arg("migrate")
            .env("EASEL_DATA_DIR", dir.path())
            .env_remove("EASEL_DATABASE_URL");
        if let Some(url) = url {
            cmd.env("EASEL_DATABASE_URL", url);
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    // SQLite: the default database file is made, with every migration applied.
    assert!(migrate(None).contains("up to date"));
    let db = dir.path().join("easel.db");
    let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    let applied: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM _sqlx_migrations")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    let files = std::fs::read_dir("migrations/sqlite").unwrap().count() as i64;
    assert_eq!(applied, files);
    // PostgreSQL: a fresh schema gets its own migrations; a second run changes nothing.
    let Some(base) = common::postgres() else {
        return;
    };
    let url = common::fresh_postgres_url(&base);
    migrate(Some(&url));
    migrate(Some(&url));
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables
         WHERE table_schema = current_schema() ORDER BY table_name",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    for table in [
        "_sqlx_migrations",
        "accounts",
        "api_keys",
        "tasks",
        "webhook_deliveries",
    ] {
        assert!(
            tables.iter().any(|t| t == table),
            "{table} missing: {tables:?}"
        );
    }
}

fn new_account(email: &str, credits: Option<i64>) -> easel::store::NewAccount {
    easel::store::NewAccount {
        email: email.into(),
        password_hash: Some("$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHQ$aGFzaA".into()),
        signing_secret: "whsec_c2VjcmV0".into(),
        admin: false,
        credits,
    }
}

/// An account made with `credits` and a live key of it.
async fn funded(store: &SharedStore, email: &str, credits: Option<i64>) -> (String, [u8; 32]) {
    let account = store
        .create_user(&new_account(email, credits))
        .await
        .unwrap()
        .unwrap();
    let key = common::key_hash(store.as_ref(), &account.id).await;
    (account.id, key)
}

async fn emails_are_unique_in_any_case_and_flags_and_passwords_are_kept(s: &SharedStore) {
    let made = s
        .create_user(&new_account("Mixed@Example.com", None))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(made.email, "Mixed@Example.com");
    assert!(made.has_password && !made.admin && !made.disabled);
    assert!(s
        .create_user(&new_account("mixed@example.COM", None))
        .await
        .unwrap()
        .is_none());
    assert!(s
        .create_account("MIXED@example.com", "whsec_x")
        .await
        .unwrap()
        .is_none());
    let found = s
        .account_by_email(" mixed@EXAMPLE.com ")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(found.id, made.id);
    assert_eq!(
        s.account_by_id(&made.id).await.unwrap().unwrap().email,
        made.email
    );
    assert!(s.account_by_id("nope").await.unwrap().is_none());
    let (_, hash) = s
        .account_for_sign_in("MIXED@example.com")
        .await
        .unwrap()
        .unwrap();
    assert!(hash.unwrap().starts_with("$argon2id$"));
    let bare = s
        .create_account("bare@example.com", "whsec_x")
        .await
        .unwrap()
        .unwrap();
    assert!(!bare.has_password);
    assert_eq!(
        s.account_for_sign_in("bare@example.com")
            .await
            .unwrap()
            .unwrap()
            .1,
        None
    );
    assert!(s
        .account_for_sign_in("ghost@example.com")
        .await
        .unwrap()
        .is_none());

    assert!(s.set_password(&bare.id, "$argon2id$new").await.unwrap());
    assert!(!s.set_password("nope", "$argon2id$new").await.unwrap());
    assert!(s.set_admin(&bare.id, true).await.unwrap());
    let listed = s.list_accounts().await.unwrap();
    assert_eq!(
        listed.iter().map(|a| a.email.as_str()).collect::<Vec<_>>(),
        ["Mixed@Example.com", "bare@example.com"],
        "oldest first"
    );
    assert!(listed[1].admin && listed[1].has_password);
}

async fn sessions_are_found_by_hash_until_they_expire_or_are_deleted(s: &SharedStore) {
    let (account, _) = funded(s, "s@example.com", None).await;
    let now = easel::store::now_ms();
    let (live, old, other) = ([1u8; 32], [2u8; 32], [3u8; 32]);
    s.create_session(&account, &live, now + 60_000)
        .await
        .unwrap();
    s.create_session(&account, &old, now - 1).await.unwrap();
    s.create_session(&account, &other, now + 60_000)
        .await
        .unwrap();
    assert_eq!(
        s.session_account(&live, now).await.unwrap().unwrap().id,
        account
    );
    assert!(
        s.session_account(&old, now).await.unwrap().is_none(),
        "expired"
    );
    assert!(
        s.session_account(&live, now + 60_000)
            .await
            .unwrap()
            .is_none(),
        "expires at its time"
    );
    assert!(s.session_account(&[9u8; 32], now).await.unwrap().is_none());
    assert_eq!(s.delete_expired_sessions(now).await.unwrap(), 1);
    assert!(s.delete_session(&live).await.unwrap());
    assert!(!s.delete_session(&live).await.unwrap());
    assert!(
        s.session_account(&live, now).await.unwrap().is_none(),
        "signed out"
    );
    assert!(s.session_account(&other, now).await.unwrap().is_some());
    s.create_session(&account, &live, now + 60_000)
        .await
        .unwrap();
    assert_eq!(s.delete_account_sessions(&account).await.unwrap(), 2);
    assert!(s.session_account(&other, now).await.unwrap().is_none());
    // A new password signs the account out everywhere.
    s.create_session(&account, &live, now + 60_000)
        .await
        .unwrap();
    assert!(s.set_password(&account, "$argon2id$other").await.unwrap());
    assert!(s.session_account(&live, now).await.unwrap().is_none());
}

async fn a_disabled_account_is_refused_everywhere_until_enabled(s: &SharedStore) {
    let (account, key) = funded(s, "d@example.com", None).await;
    let id = queued(s, &task("fast", None), &key).await;
    let now = easel::store::now_ms();
    s.create_session(&account, &[4u8; 32], now + 60_000)
        .await
        .unwrap();
    assert!(s.set_disabled(&account, true).await.unwrap());
    assert!(s.key_owner(&key).await.unwrap().is_none());
    assert!(s.task_for_key(&key, &id).await.unwrap().is_none());
    assert!(s.tasks_for_key(&key, &[id]).await.unwrap().is_none());
    assert_eq!(
        s.submit(&task("fast", None), &key, &100.into())
            .await
            .unwrap(),
        Submitted::KeyNotLive
    );
    assert!(s.session_account(&[4u8; 32], now).await.unwrap().is_none());
    assert!(s.set_disabled(&account, false).await.unwrap());
    assert!(s.key_owner(&key).await.unwrap().is_some());
    assert!(s
        .task_for_key(&key, &id)
        .await
        .unwrap()
        .unwrap()
        .1
        .is_some());
    assert!(
        s.session_account(&[4u8; 32], now).await.unwrap().is_none(),
        "disabling deleted the sessions; enabling does not bring them back"
    );
    assert!(!s.set_disabled("nope", true).await.unwrap());
}

async fn throttle_events_are_counted_per_scope_within_the_window_and_cleared_by_prefix(
    s: &SharedStore,
) {
    let scopes = [
        "addr 192.0.2.1".to_string(),
        "email a_b%@example.com".to_string(),
    ];
    for at in [1_000, 2_000, 3_000] {
        s.record_throttle_events(&scopes, at, 0).await.unwrap();
    }
    s.record_throttle_events(&scopes[..1], 4_000, 0)
        .await
        .unwrap();
    assert_eq!(s.throttle_events(&scopes[0], 0).await.unwrap(), 4);
    assert_eq!(s.throttle_events(&scopes[1], 0).await.unwrap(), 3);
    assert_eq!(s.throttle_events(&scopes[1], 2_500).await.unwrap(), 1);
    assert_eq!(s.throttle_events("addr other", 0).await.unwrap(), 0);

    // Clearing a scope takes the scopes under it (it and a space) and nothing else: not a
    // longer email, nor one that `_` or `%` would match as a LIKE pattern.
    let under = [
        "email a_b%@example.com addr 192.0.2.1".to_string(),
        "email a_b%@example.com browser n1".to_string(),
    ];
    let beside = [
        "email a_b%@example.com.au".to_string(),
        "email axb%@example.com addr 192.0.2.1".to_string(),
        "email a_bc@example.com addr 192.0.2.1".to_string(),
    ];
    s.record_throttle_events(&under, 3_000, 0).await.unwrap();
    s.record_throttle_events(&beside, 3_000, 0).await.unwrap();
    s.clear_throttle_events(&scopes[1]).await.unwrap();
    for scope in scopes[1..].iter().chain(&under) {
        assert_eq!(s.throttle_events(scope, 0).await.unwrap(), 0, "{scope}");
    }
    for scope in &beside {
        assert_eq!(s.throttle_events(scope, 0).await.unwrap(), 1, "{scope}");
    }
    assert_eq!(s.throttle_events(&scopes[0], 0).await.unwrap(), 4);
    // Recording forgets what fell out of the window, for every scope.
    s.record_throttle_events(&scopes[1..], 10_000, 3_500)
        .await
        .unwrap();
    assert_eq!(s.throttle_events(&scopes[0], 0).await.unwrap(), 1);
    assert_eq!(s.throttle_events(&beside[0], 0).await.unwrap(), 0);
}

async fn credits_are_charged_in_the_insert_refunded_on_failure_and_ledgered(s: &SharedStore) {
    let (account, key) = funded(s, "c@example.com", Some(10)).await;
    let costly = |cost| NewTask {
        cost,
        ..task("fast", None)
    };
    // 12 submits of 3 at once: exactly 3 fit in 10.
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..12 {
        let s = s.clone();
        calls.spawn(async move { s.submit(&costly(3), &key, &1000.into()).await.unwrap() });
    }
    let (mut queued_ids, mut short) = (Vec::new(), 0);
    while let Some(done) = calls.join_next().await {
        match done.unwrap() {
            Submitted::Queued { task_id, .. } => queued_ids.push(task_id),
            Submitted::InsufficientCredits => short += 1,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!((queued_ids.len(), short), (3, 9));
    let balance = |s: SharedStore, id: String| async move {
        s.account_by_id(&id).await.unwrap().unwrap().credits
    };
    assert_eq!(balance(s.clone(), account.clone()).await, Some(1));
    // A free task always fits; one of 2 does not.
    assert!(matches!(
        s.submit(&costly(0), &key, &1000.into()).await.unwrap(),
        Submitted::Queued { .. }
    ));
    assert_eq!(
        s.submit(&costly(2), &key, &1000.into()).await.unwrap(),
        Submitted::InsufficientCredits
    );
    // The quota still comes first when both would refuse.
    assert_eq!(
        s.submit(&costly(2), &key, &4.into()).await.unwrap(),
        Submitted::QuotaFull
    );

    // One fails (refunded), one finishes (kept), the rest are lost by their workers for good.
    for ending in [failed as fn(&str, &str) -> Ending, |id, _| finished(id)] {
        let t = s.claim_task("w", 60_000).await.unwrap().unwrap();
        assert!(s
            .complete_task(t.seq, t.attempts, &ending(&t.id, "boom"))
            .await
            .unwrap());
    }
    // The rest are claimed with a lease already over, then given up by the reaper.
    while s.claim_task("w", -1).await.unwrap().is_some() {}
    let (_, lost) = s.recover_expired(1).await.unwrap();
    assert_eq!(lost.len(), 2, "the third costly task and the free one");
    let rows = s.credit_ledger(&account, 100).await.unwrap();
    let sum: i64 = rows.iter().map(|r| r.delta).sum();
    let balance_now = balance(s.clone(), account.clone()).await.unwrap();
    assert_eq!(sum, balance_now, "the ledger sums to the balance");
    let mut reasons: Vec<(&str, i64)> = rows.iter().map(|r| (r.reason.as_str(), r.delta)).collect();
    reasons.sort();
    assert_eq!(
        reasons,
        [
            ("refund", 3),
            ("refund", 3),
            ("signup", 10),
            ("submit", -3),
            ("submit", -3),
            ("submit", -3)
        ],
        "the free task has no row"
    );
    assert_eq!(balance_now, 7);
    assert!(rows
        .iter()
        .filter(|r| r.reason != "signup")
        .all(|r| r.task_id.is_some()));
    // An operator's change writes the difference; unlimited writes nothing more.
    assert!(s.set_credits(&account, Some(2)).await.unwrap());
    assert_eq!(s.credit_ledger(&account, 1).await.unwrap()[0].delta, -5);
    assert!(s.set_credits(&account, None).await.unwrap());
    assert!(matches!(
        s.submit(&costly(50), &key, &1000.into()).await.unwrap(),
        Submitted::Queued { .. }
    ));
    assert_eq!(
        s.credit_ledger(&account, 100).await.unwrap().len(),
        rows.len() + 1
    );
    assert!(s.set_credits(&account, Some(5)).await.unwrap());
    let sum: i64 = s
        .credit_ledger(&account, 100)
        .await
        .unwrap()
        .iter()
        .map(|r| r.delta)
        .sum();
    assert_eq!(sum, 5);
    assert!(!s.set_credits("nope", Some(1)).await.unwrap());
}

async fn tasks_are_listed_newest_first_by_cursor_with_filters_children_and_usage(s: &SharedStore) {
    use easel::store::TaskFilter;
    let (account, key) = funded(s, "l@example.com", None).await;
    let (other, other_key) = funded(s, "m@example.com", None).await;
    let mut ids = Vec::new();
    for i in 0..9 {
        let t = if i % 3 == 0 {
            NewTask {
                operation: easel::domain::Operation::Shorten,
                ..task("fast", None)
            }
        } else {
            task("fast", None)
        };
        ids.push(queued(s, &t, &key).await);
        queued(s, &task("fast", None), &other_key).await;
    }
    ids.reverse();
    let all = TaskFilter::default();
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = s
            .list_tasks(&account, &all, cursor.as_ref(), 4)
            .await
            .unwrap()
            .unwrap();
        seen.extend(page.tasks.iter().map(|t| t.id.clone()));
        match page.next_cursor {
            Some(c) => cursor = Some(c.parse::<uuid::Uuid>().unwrap()),
            None => break,
        }
    }
    assert_eq!(seen, ids.iter().map(|i| i.to_string()).collect::<Vec<_>>());
    let shorten = TaskFilter {
        task_type: Some(OpKind::Shorten),
        ..Default::default()
    };
    let page = s
        .list_tasks(&account, &shorten, None, 100)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(page.tasks.len(), 3);
    assert!(page.next_cursor.is_none());
    // `imagine` is found without an index of its type, the others with one (the store's
    // migrations make that index partial); a page of each type holds only that type.
    let account_ref = account.as_str();
    let count = |filter: TaskFilter| async move {
        let page = s.list_tasks(account_ref, &filter, None, 100).await.unwrap();
        page.unwrap().tasks.len()
    };
    let imagine = TaskFilter {
        task_type: Some(OpKind::Imagine),
        ..Default::default()
    };
    assert_eq!(count(imagine.clone()).await, 6);
    let waiting_shorten = TaskFilter {
        status: Some(TaskStatus::Pending),
        task_type: Some(OpKind::Shorten),
        ..Default::default()
    };
    assert_eq!(count(waiting_shorten).await, 3);
    // A canceled task is found by its status, alone or with its type.
    let last = s
        .task_for_account(&account, &ids[0])
        .await
        .unwrap()
        .unwrap();
    assert!(s.cancel_task(last.seq, &canceled(&last.id)).await.unwrap());
    let canceled_imagine = TaskFilter {
        status: Some(TaskStatus::Canceled),
        task_type: Some(OpKind::Imagine),
        ..Default::default()
    };
    let canceled_any = TaskFilter {
        status: Some(TaskStatus::Canceled),
        ..Default::default()
    };
    assert_eq!(
        (count(canceled_any).await, count(canceled_imagine).await),
        (1, 1)
    );
    assert_eq!(count(imagine).await, 6);
    // Claim one, so a status filter has something to tell apart.
    let claimed = s.claim_task("w", 60_000).await.unwrap().unwrap();
    assert!(s
        .complete_task(claimed.seq, claimed.attempts, &finished(&claimed.id))
        .await
        .unwrap());
    let done = TaskFilter {
        status: Some(TaskStatus::Finished),
        ..Default::default()
    };
    let finished_here = s
        .list_tasks(&account, &done, None, 100)
        .await
        .unwrap()
        .unwrap();
    let finished_there = s
        .list_tasks(&other, &done, None, 100)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(finished_here.tasks.len() + finished_there.tasks.len(), 1);
    // A cursor of another account's task is no cursor here.
    let theirs = s.list_tasks(&other, &all, None, 1).await.unwrap().unwrap();
    let foreign: uuid::Uuid = theirs.tasks[0].id.parse().unwrap();
    assert!(s
        .list_tasks(&account, &all, Some(&foreign), 10)
        .await
        .unwrap()
        .is_none());
    assert!(s
        .list_tasks(&account, &all, Some(&uuid::Uuid::new_v4()), 10)
        .await
        .unwrap()
        .is_none());

    // Children by parent, only the account's own.
    let parent = s
        .task_for_account(&account, &ids[0])
        .await
        .unwrap()
        .unwrap();
    let child = |p: i64| NewTask {
        parent_seq: Some(p),
        ..task("fast", None)
    };
    let c1 = queued(s, &child(parent.seq), &key).await;
    let c2 = queued(s, &child(parent.seq), &key).await;
    let children = s.task_children(&account, parent.seq).await.unwrap();
    assert_eq!(
        children.iter().map(|t| t.id.clone()).collect::<Vec<_>>(),
        [c1.to_string(), c2.to_string()]
    );
    assert_eq!(
        children[0].parent_id.as_deref(),
        Some(ids[0].to_string().as_str())
    );
    assert!(s
        .task_children(&other, parent.seq)
        .await
        .unwrap()
        .is_empty());

    // Usage today: 11 tasks (9 + 2 children); 4 images if this account's task was finished.
    let usage = s
        .usage_by_day(&account, 7, easel::store::now_ms())
        .await
        .unwrap();
    assert_eq!(usage.len(), 1, "{usage:?}");
    assert_eq!(usage[0].tasks, 11);
    assert_eq!(usage[0].images, 4 * finished_here.tasks.len() as i64);
    assert_eq!(
        usage[0].day,
        chrono::Utc::now().format("%Y-%m-%d").to_string()
    );
    let long_ago = easel::store::now_ms() + 30 * 86_400_000;
    assert!(s
        .usage_by_day(&account, 7, long_ago)
        .await
        .unwrap()
        .is_empty());
}

async fn operators_see_the_queue_by_status_and_mode_and_failing_destinations(s: &SharedStore) {
    let (_, key) = funded(s, "o@example.com", None).await;
    for mode in ["relax", "fast", "fast", "turbo"] {
        queued(s, &task(mode, Some("http://hooks.example:8443/a")), &key).await;
    }
    let claimed = s.claim_task("w", 60_000).await.unwrap().unwrap();
    let queue = s.queue_by_status_and_mode().await.unwrap();
    let shape: Vec<(&str, &str, i64)> = queue
        .iter()
        .map(|q| (q.status.as_str(), q.process_mode.as_str(), q.tasks))
        .collect();
    assert_eq!(
        shape,
        [
            ("pending", "fast", 2),
            ("pending", "relax", 1),
            ("starting", "turbo", 1)
        ]
    );
    assert!(queue.iter().all(|q| q.oldest_created_at > 0));

    assert!(s
        .complete_task(claimed.seq, claimed.attempts, &finished(&claimed.id))
        .await
        .unwrap());
    let due = s.claim_due_deliveries(10, 60_000).await.unwrap();
    assert_eq!(due.len(), 1);
    let now = easel::store::now_ms();
    let fail = |code: Option<u16>, error: Option<&str>, next: Option<i64>| AttemptRecord {
        attempted_at: now,
        duration_ms: 5,
        status_code: code,
        error: error.map(String::from),
        delivered: false,
        next_attempt_at: next,
        first_failed_at: Some(now),
    };
    assert!(s
        .record_attempt(&due[0], &fail(Some(502), None, Some(now)))
        .await
        .unwrap());
    let due = s.claim_due_deliveries(10, 60_000).await.unwrap();
    assert!(s
        .record_attempt(&due[0], &fail(None, Some("timed out"), None))
        .await
        .unwrap());
    let failing = s.failing_destinations(now - 60_000).await.unwrap();
    assert_eq!(failing.len(), 1, "{failing:?}");
    assert_eq!(failing[0].host, "hooks.example:8443");
    assert_eq!((failing[0].failures, failing[0].deliveries), (2, 1));
    assert!(failing[0].last_error.is_some() || failing[0].last_status_code.is_some());
    assert!(s.failing_destinations(now + 1).await.unwrap().is_empty());
}

fn canceled(id: &str) -> Ending {
    Ending::new(Outcome::Canceled, &PayloadHead::of(id, "imagine"), &|key| {
        key.to_string()
    })
}

async fn a_cancel_ends_a_queued_or_claimed_task_once_refunds_it_and_fences_out_its_worker(
    s: &SharedStore,
) {
    let (account, key) = funded(s, "c@example.com", Some(10)).await;
    let charged = NewTask {
        cost: 4,
        ..task("fast", Some("https://hooks.example/c"))
    };
    // Queued: canceled at once, its credits back, its webhook queued, its watchers told.
    let id = queued(s, &charged, &key).await;
    let queued_task = s.task_for_account(&account, &id).await.unwrap().unwrap();
    let mut watch = s.wakeups().events.listen_task(queued_task.seq, None);
    let stop = tokio_util::sync::CancellationToken::new();
    if s.kind() == "postgres" {
        // Every node hears of ends through its listener, which has every listener read again
        // once it is up.
        let (store, stop) = (s.clone(), stop.clone());
        tokio::spawn(async move { store.run_background(stop).await });
        tokio::time::timeout(Duration::from_secs(10), watch.next())
            .await
            .expect("the listener is up");
    }
    assert!(s
        .cancel_task(queued_task.seq, &canceled(&queued_task.id))
        .await
        .unwrap());
    tokio::time::timeout(Duration::from_secs(10), watch.ended())
        .await
        .expect("the task's watchers are told of its end");
    let done = s.task_for_account(&account, &id).await.unwrap().unwrap();
    assert_eq!(done.status, TaskStatus::Canceled);
    assert!(done.finished_at.is_some());
    assert_eq!(done.webhook.as_ref().unwrap().status, "pending");
    let due = s.claim_due_deliveries(10, 60_000).await.unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&due[0].payload).unwrap(),
        serde_json::json!({"task_id": id.to_string(), "task_type": "imagine", "status": "canceled"})
    );
    let balance = s.account_by_id(&account).await.unwrap().unwrap().credits;
    assert_eq!(balance, Some(10), "the charge came back");
    let ledger = s.credit_ledger(&account, 10).await.unwrap();
    assert_eq!(ledger[0].reason, "refund");
    assert_eq!(ledger[0].delta, 4);
    // Once only: a second cancel changes nothing, and refunds nothing.
    assert!(!s
        .cancel_task(queued_task.seq, &canceled(&queued_task.id))
        .await
        .unwrap());
    assert_eq!(
        s.account_by_id(&account).await.unwrap().unwrap().credits,
        Some(10)
    );
    // Nothing claims a canceled task.
    assert!(s.claim_task("w", 60_000).await.unwrap().is_none());

    // Claimed and running: canceled all the same, keeping its progress; the worker's heartbeat,
    // result and release are refused from then on.
    let id = queued(s, &charged, &key).await;
    let claim = s.claim_task("w", 60_000).await.unwrap().unwrap();
    assert!(s
        .mark_processing(claim.seq, claim.attempts, 60_000, 0)
        .await
        .unwrap()
        .is_some());
    assert!(s
        .heartbeat(claim.seq, claim.attempts, 60_000, Some(&progress(30)))
        .await
        .unwrap()
        .is_some());
    assert!(s
        .cancel_task(claim.seq, &canceled(&claim.id))
        .await
        .unwrap());
    assert!(s
        .heartbeat(claim.seq, claim.attempts, 60_000, Some(&progress(40)))
        .await
        .unwrap()
        .is_none());
    assert!(!s
        .complete_task(claim.seq, claim.attempts, &finished(&claim.id))
        .await
        .unwrap());
    assert!(!s.release_task(claim.seq, claim.attempts).await.unwrap());
    let done = s.task_for_account(&account, &id).await.unwrap().unwrap();
    assert_eq!((done.status.as_str(), done.percentage), ("canceled", 30));
    assert!(done.output.is_none());
    // The reaper leaves it alone.
    assert_eq!(s.recover_expired(1).await.unwrap(), (0, vec![]));
    assert_eq!(
        s.account_by_id(&account).await.unwrap().unwrap().credits,
        Some(10)
    );
    // A finished task is not canceled.
    let id = queued(s, &charged, &key).await;
    let claim = s.claim_task("w", 60_000).await.unwrap().unwrap();
    assert!(s
        .complete_task(claim.seq, claim.attempts, &finished(&claim.id))
        .await
        .unwrap());
    assert!(!s
        .cancel_task(claim.seq, &canceled(&claim.id))
        .await
        .unwrap());
    let done = s.task_for_account(&account, &id).await.unwrap().unwrap();
    assert_eq!(done.status, TaskStatus::Finished);
    stop.cancel();
}

/// Retention reads the final tasks that finished by a time and are not marked removed, oldest
/// first, with their output's keys; marking strips an inpaint's mask and is done once.
async fn expired_tasks_are_final_ones_oldest_first_until_their_data_is_marked_removed(
    s: &SharedStore,
) {
    use easel::domain::operation::StoredImage;
    use easel::domain::Operation;
    let (_, key) = account_and_key(s, "a@example.com").await;
    let inpaint = NewTask {
        operation: Operation::Inpaint {
            source: StoredImage {
                key: "parent/f/0.png".into(),
                width: 8,
                height: 8,
            },
            mask: "c2VjcmV0IG1hc2s=".into(),
        },
        ..task("fast", None)
    };
    let done = queued(s, &task("fast", None), &key).await;
    let broken = queued(s, &task("fast", None), &key).await;
    let masked = queued(s, &inpaint, &key).await;
    let running = queued(s, &task("fast", None), &key).await;
    let waiting = queued(s, &task("fast", None), &key).await;
    for (id, ending) in [
        (done, finished(&done.to_string())),
        (broken, failed(&broken.to_string(), "no")),
        (masked, finished(&masked.to_string())),
    ] {
        let c = s.claim_task("w", 60_000).await.unwrap().unwrap();
        assert_eq!(c.id, id.to_string());
        assert!(s.complete_task(c.seq, c.attempts, &ending).await.unwrap());
    }
    let c = s.claim_task("w", 60_000).await.unwrap().unwrap();
    assert_eq!(c.id, running.to_string());

    let later = easel::store::now_ms() + 1;
    let expired = s.expired_tasks(later, 10).await.unwrap();
    let ids: Vec<String> = expired
        .iter()
        .map(|t| s.task_id(t.seq).to_string())
        .collect();
    assert_eq!(
        ids,
        [done.to_string(), broken.to_string(), masked.to_string()],
        "final tasks only (not {running} nor {waiting}), oldest first"
    );
    let grid_keys = |id: uuid::Uuid| -> Vec<String> {
        std::iter::once(format!("{id}/f/grid.png"))
            .chain((0..4).map(|i| format!("{id}/f/{i}.png")))
            .collect()
    };
    assert_eq!(expired[0].keys, grid_keys(done));
    assert!(expired[1].keys.is_empty(), "a failed task has no images");
    assert_eq!(expired[2].keys, grid_keys(masked));
    assert!(
        s.expired_tasks(expired[0].finished_at - 1, 10)
            .await
            .unwrap()
            .is_empty(),
        "nothing finished before the first"
    );
    assert_eq!(s.expired_tasks(later, 2).await.unwrap(), expired[..2]);

    let seqs = [expired[0].seq, expired[1].seq];
    assert_eq!(s.mark_data_removed(&seqs, 42).await.unwrap(), 2);
    assert_eq!(s.mark_data_removed(&seqs, 43).await.unwrap(), 0, "once");
    assert_eq!(s.mark_data_removed(&[], 43).await.unwrap(), 0);
    assert_eq!(s.expired_tasks(later, 10).await.unwrap(), expired[2..]);
    assert_eq!(s.mark_data_removed(&[expired[2].seq], 44).await.unwrap(), 1);
    assert!(s.expired_tasks(later, 10).await.unwrap().is_empty());

    let mut tasks = s.tasks_by_id(&[done, masked, waiting]).await.unwrap();
    tasks.sort_by_key(|t| t.seq);
    assert_eq!(tasks[0].data_removed_at, Some(42));
    assert!(
        tasks[0].output.is_some(),
        "the record of what it made stays"
    );
    assert_eq!(tasks[1].data_removed_at, Some(44));
    match &tasks[1].operation {
        Some(Operation::Inpaint { source, mask }) => {
            assert_eq!(mask, "", "the mask is gone");
            assert_eq!(source.key, "parent/f/0.png", "the rest is readable");
        }
        other => panic!("an inpaint's parameters stay readable: {other:?}"),
    }
    assert_eq!(tasks[2].data_removed_at, None);
}

// Idempotency keys: the rules both stores decide in the submit's transaction.

fn keyed(t: NewTask, key: &str, fingerprint: u8, ttl_ms: i64) -> NewTask {
    NewTask {
        idempotency: Some(easel::store::Idempotency {
            key: key.into(),
            fingerprint: [fingerprint; 32],
            ttl_ms,
        }),
        ..t
    }
}

async fn pending(s: &SharedStore) -> i64 {
    let counts = s.task_counts().await.unwrap();
    counts
        .iter()
        .find(|(status, _)| status == "pending")
        .map_or(0, |(_, n)| *n)
}

async fn a_keyed_submit_stores_its_answer_and_replays_it_without_a_charge(s: &SharedStore) {
    let (account, key) = funded(s, "i@example.com", Some(10)).await;
    let (_, other_key) = funded(s, "j@example.com", None).await;
    let costly = |fingerprint| {
        keyed(
            NewTask {
                cost: 3,
                ..task("fast", None)
            },
            "order-1",
            fingerprint,
            60_000,
        )
    };
    let id = queued(s, &costly(1), &key).await;
    for _ in 0..2 {
        assert_eq!(
            s.submit(&costly(1), &key, &1000.into()).await.unwrap(),
            Submitted::Replayed {
                task_id: id.to_string(),
                status: 200,
                body: easel::store::accepted_body(&id),
            }
        );
    }
    assert_eq!(
        s.submit(&costly(2), &key, &1000.into()).await.unwrap(),
        Submitted::IdempotencyKeyReused
    );
    // Replays are not charged and do not count in the quota: the account is at its one task.
    assert_eq!(
        s.account_by_id(&account).await.unwrap().unwrap().credits,
        Some(7)
    );
    assert!(matches!(
        s.submit(&costly(1), &key, &1.into()).await.unwrap(),
        Submitted::Replayed { .. }
    ));
    // Another account's same key is its own.
    let theirs = queued(
        s,
        &keyed(task("fast", None), "order-1", 1, 60_000),
        &other_key,
    )
    .await;
    assert_ne!(theirs, id);
    assert_eq!(pending(s).await, 2);
}

/// A group's stored answers are read along the primary key whatever PostgreSQL knows of the
/// keys' table: the generic plan of the statement, made on an empty table as the submit drainer's
/// cached one is, looks each key up and does not scan the table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_reads_stored_answers_by_key_even_with_a_plan_made_on_an_empty_table() {
    use sqlx::{Connection, Executor, Row};
    let Some(base) = common::postgres() else {
        return;
    };
    let url = common::fresh_postgres_url(&base);
    let store = open_postgres(&url).await;
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    conn.execute("SET plan_cache_mode = force_generic_plan")
        .await
        .unwrap();
    let prepare = format!(
        "PREPARE answers(text[], text[]) AS {}",
        easel::store::postgres::STORED_ANSWERS
    );
    conn.execute(prepare.as_str()).await.unwrap();
    let plan: Vec<String> = conn
        .fetch_all("EXPLAIN EXECUTE answers('{a}', '{k}')")
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    let plan = plan.join("\n");
    assert!(plan.contains("idempotency_keys_pkey"), "{plan}");
    assert!(!plan.contains("Seq Scan"), "{plan}");
    conn.close().await.unwrap();
    store.close().await;
}

async fn an_expired_key_is_stored_over_and_swept_a_window_at_a_time(s: &SharedStore) {
    let (account, key) = funded(s, "e@example.com", None).await;
    // A time to live of 0 expires at once.
    let first = queued(s, &keyed(task("fast", None), "k", 1, 0), &key).await;
    let second = queued(s, &keyed(task("fast", None), "k", 2, 60_000), &key).await;
    assert_ne!(first, second);
    assert!(matches!(
        s.submit(&keyed(task("fast", None), "k", 2, 60_000), &key, &1000.into()).await.unwrap(),
        Submitted::Replayed { task_id, .. } if task_id == second.to_string()
    ));
    for name in ["a", "b", "c"] {
        queued(s, &keyed(task("fast", None), name, 1, 0), &key).await;
    }
    // The keys in key order: a, b, c expired, k live. Each window starts after the last read.
    let now = easel::store::now_ms() + 1;
    let at = |key: &str| (account.clone(), key.to_string());
    let start = (String::new(), String::new());
    let swept = |forgotten, next| KeysSwept { forgotten, next };
    let sweep = |after| async move {
        s.forget_expired_idempotency_keys(&after, now, 2)
            .await
            .unwrap()
    };
    assert_eq!(sweep(start.clone()).await, swept(2, Some(at("b"))));
    assert_eq!(sweep(at("b")).await, swept(1, Some(at("k"))));
    assert_eq!(sweep(at("k")).await, swept(0, None));
    // Walked again, nothing is left to forget, and a window wider than the table ends the walk.
    assert_eq!(
        s.forget_expired_idempotency_keys(&start, now, 10)
            .await
            .unwrap(),
        swept(0, None)
    );
    // The unexpired one stays.
    assert!(matches!(
        s.submit(
            &keyed(task("fast", None), "k", 2, 60_000),
            &key,
            &1000.into()
        )
        .await
        .unwrap(),
        Submitted::Replayed { .. }
    ));
    assert_eq!(pending(s).await, 5);
}

async fn submits_with_one_key_at_once_store_one_task_and_the_rest_replay_or_are_in_use(
    s: &SharedStore,
) {
    let (_, key) = funded(s, "d@example.com", None).await;
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..32 {
        let s = s.clone();
        calls.spawn(async move {
            let t = keyed(task("fast", None), "crowd", 1, 60_000);
            s.submit(&t, &key, &1000.into()).await.unwrap()
        });
    }
    let mut queued_ids = Vec::new();
    let mut replayed = Vec::new();
    while let Some(done) = calls.join_next().await {
        match done.unwrap() {
            Submitted::Queued { task_id, .. } => queued_ids.push(task_id.to_string()),
            Submitted::Replayed { task_id, .. } => replayed.push(task_id),
            Submitted::IdempotencyKeyInUse => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(queued_ids.len(), 1, "one task: {queued_ids:?}");
    assert!(replayed.iter().all(|id| *id == queued_ids[0]));
    assert_eq!(pending(s).await, 1);
    // The same key twice in one group: the second is a concurrent duplicate. Groups are what
    // arrives together, so this is tried until two land in one (the first is then stored).
    let mut in_use = false;
    for round in 0..50 {
        let name = format!("pair-{round}");
        let t = keyed(task("fast", None), &name, 1, 60_000);
        let limits = 1000.into();
        let (a, b) = tokio::join!(s.submit(&t, &key, &limits), s.submit(&t, &key, &limits));
        let outcomes = [a.unwrap(), b.unwrap()];
        let queued_n = outcomes
            .iter()
            .filter(|o| matches!(o, Submitted::Queued { .. }))
            .count();
        assert_eq!(queued_n, 1, "{outcomes:?}");
        if outcomes.contains(&Submitted::IdempotencyKeyInUse) {
            in_use = true;
            break;
        }
    }
    assert!(
        in_use,
        "two submits with one key in one group: one is in use"
    );
}

/// The next stored progress the listener hears (other events skipped).
async fn next_stored_progress(
    listener: &mut easel::store::Listener,
) -> (i64, Option<String>, Option<Retrying>) {
    loop {
        let heard = tokio::time::timeout(Duration::from_secs(10), listener.next())
            .await
            .expect("the stored progress is told");
        if let easel::store::Heard::Event(event) = heard {
            if let easel::store::Happened::Progress {
                percentage,
                preview_key,
                retrying,
                live: false,
            } = &event.what
            {
                return (*percentage, preview_key.clone(), retrying.clone());
            }
        }
    }
}

async fn a_failed_backend_attempt_is_stored_and_told_with_the_progress_until_cleared(
    s: &SharedStore,
) {
    let (account, key) = account_and_key(s, "a@example.com").await;
    let id = queued(s, &task("fast", None), &key).await;
    let claim = s.claim_task("w", 60_000).await.unwrap().unwrap();
    let seq = claim.seq;
    let mut listener = s.wakeups().events.listen_task(seq, Some(&account));
    let stop = tokio_util::sync::CancellationToken::new();
    let _stop_on_drop = stop.clone().drop_guard();
    if s.kind() == "postgres" {
        // This node hears its own notes through its listener, which has every listener read
        // again once it is up.
        let (store, stop) = (s.clone(), stop.clone());
        tokio::spawn(async move { store.run_background(stop).await });
        tokio::time::timeout(Duration::from_secs(10), listener.next())
            .await
            .expect("the listener is up");
    }
    assert!(s
        .mark_processing(seq, 1, 60_000, 0)
        .await
        .unwrap()
        .is_some());
    // The error has spaces and the preview a key: both must come back whole, also through
    // PostgreSQL's notification.
    let failed = Retrying::new(2, "the backend answered HTTP 503: went down");
    let waiting = easel::store::StoredProgress {
        percentage: 40,
        preview_key: Some(format!("{id}/1/preview-1.jpg")),
        retrying: Some(failed.clone()),
    };
    assert!(s
        .heartbeat(seq, 1, 60_000, Some(&waiting))
        .await
        .unwrap()
        .is_some());
    let task = s.task_for_account(&account, &id).await.unwrap().unwrap();
    assert_eq!(
        (task.percentage, task.retrying.as_ref()),
        (40, Some(&failed))
    );
    assert_eq!(
        next_stored_progress(&mut listener).await,
        (40, waiting.preview_key.clone(), Some(failed.clone()))
    );
    // Without a preview too.
    let bare = easel::store::StoredProgress {
        preview_key: None,
        ..waiting.clone()
    };
    s.heartbeat(seq, 1, 60_000, Some(&bare)).await.unwrap();
    assert_eq!(
        next_stored_progress(&mut listener).await,
        (40, None, Some(failed.clone()))
    );
    // A backend took it again: cleared in the row and in what is told.
    s.heartbeat(seq, 1, 60_000, Some(&progress(45)))
        .await
        .unwrap();
    let task = s.task_for_account(&account, &id).await.unwrap().unwrap();
    assert_eq!((task.percentage, task.retrying), (45, None));
    assert_eq!(next_stored_progress(&mut listener).await, (45, None, None));
    // Released while it waited for its backend: the next claim starts without it.
    s.heartbeat(seq, 1, 60_000, Some(&waiting)).await.unwrap();
    assert!(s.release_task(seq, 1).await.unwrap());
    let again = s.claim_task("w", 60_000).await.unwrap().unwrap();
    assert_eq!(again.seq, seq);
    assert!(s
        .mark_processing(seq, again.attempts, 60_000, 0)
        .await
        .unwrap()
        .is_some());
    let task = s.task_for_account(&account, &id).await.unwrap().unwrap();
    assert_eq!((task.status, task.retrying), (TaskStatus::Processing, None));
    // Only a running task says it: once ended, not.
    s.heartbeat(seq, again.attempts, 60_000, Some(&waiting))
        .await
        .unwrap();
    assert!(s
        .complete_task(seq, again.attempts, &finished(&claim.id))
        .await
        .unwrap());
    let done = s.task_for_account(&account, &id).await.unwrap().unwrap();
    assert_eq!((done.status, done.retrying), (TaskStatus::Finished, None));
}

/// Progress a worker stores with its heartbeat.
fn progress(percentage: i64) -> easel::store::StoredProgress {
    easel::store::StoredProgress {
        percentage,
        preview_key: None,
        retrying: None,
    }
}
