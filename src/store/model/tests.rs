//! The quota's and the redelivery's rules.

use super::*;

#[test]
fn the_quota_counts_the_groups_own_earlier_tasks() {
    let mut quota = Quota::default();
    quota.set("a", 1, None);
    quota.set("b", 0, None);
    assert_eq!(quota.admit("a", 3, 5), Ok(0));
    assert_eq!(quota.admit("b", 3, 5), Ok(0));
    assert_eq!(quota.admit("a", 3, 5), Ok(0));
    assert_eq!(
        quota.admit("a", 3, 5),
        Err(Refused::Quota),
        "1 before and 2 in the group make 3"
    );
    assert_eq!(quota.admit("unknown", 3, 0), Err(Refused::Quota));
    let mut added: Vec<_> = quota.added().collect();
    added.sort();
    assert_eq!(added, [("a", 2), ("b", 1)]);
    assert_eq!(
        quota.charged().count(),
        0,
        "unlimited accounts are not charged"
    );
}

#[test]
fn the_balance_counts_the_groups_own_earlier_charges() {
    let mut quota = Quota::default();
    quota.set("c", 0, Some(5));
    assert_eq!(quota.admit("c", 100, 2), Ok(2));
    assert_eq!(quota.admit("c", 100, 2), Ok(2));
    assert_eq!(quota.admit("c", 100, 2), Err(Refused::Credits));
    assert_eq!(quota.admit("c", 100, 1), Ok(1), "a cheaper task still fits");
    assert_eq!(quota.admit("c", 100, 0), Ok(0), "a free task always fits");
    assert_eq!(quota.charged().collect::<Vec<_>>(), [("c", 5)]);
    assert_eq!(quota.added().collect::<Vec<_>>(), [("c", 4)]);
}

#[test]
fn only_a_final_task_with_a_webhook_is_redelivered() {
    use TaskStatus::*;
    assert_eq!(Redelivery::decide(Finished, true), Redelivery::Queued);
    assert_eq!(Redelivery::decide(Failed, true), Redelivery::Queued);
    assert_eq!(Redelivery::decide(Canceled, true), Redelivery::Queued);
    assert_eq!(Redelivery::decide(Processing, true), Redelivery::NotFinal);
    assert_eq!(Redelivery::decide(Finished, false), Redelivery::NoWebhook);
}

#[test]
fn the_reaper_sends_a_lost_task_s_failure_only_when_its_events_name_it() {
    assert!(worker_lost("t", "imagine", 3, None).delivers);
    let failed = r#"{"webhook_events":["progress","failed"]}"#;
    assert!(worker_lost("t", "imagine", 3, Some(failed)).delivers);
    let completed = r#"{"webhook_events":["completed"]}"#;
    assert!(!worker_lost("t", "imagine", 3, Some(completed)).delivers);
}

#[test]
fn a_listings_filter_is_written_in_plain_words_and_repeats_the_type_indexs_condition() {
    // Written into the query's text, so every value must be a word that needs no quoting.
    let plain = |w: &str| {
        w.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
    };
    for status in TaskStatus::ALL {
        assert!(plain(status.as_str()), "{status:?}");
    }
    for kind in OpKind::ALL {
        assert!(plain(kind.as_str()), "{kind:?}");
    }
    let filter = |status, task_type| TaskFilter { status, task_type }.conditions();
    assert_eq!(filter(None, None), "");
    assert_eq!(
        filter(Some(TaskStatus::Failed), Some(OpKind::Imagine)),
        " AND t.status = 'failed' AND t.task_type = 'imagine'"
    );
    assert_eq!(
        filter(None, Some(OpKind::Upscale1x)),
        " AND t.task_type = 'upscale-1x' AND t.task_type <> 'imagine'"
    );
}
