//! The queue's claims and order on PostgreSQL ([`crate::store::queue`] says the rules).

use super::channels::changed_note_sql;
use super::PgStore;
use crate::domain::TaskStatus;
use crate::store::queue::{ClaimRules, Waiting};
use crate::store::rows::ClaimedRow;
use crate::store::{now_ms, ClaimedTask, StoreResult};

/// The claim's statement: the first pending task in `(priority, turn, seq)` order (of mode `$4`
/// when `one_mode`), skipping rows other claims hold. When `limited`, it passes over accounts at
/// their running limit (the plans' limits as JSON, then every other plan's) and locks the
/// account's row with the task's: a concurrent claim of the same account waits for this one's
/// commit and then sees the count it left (PostgreSQL checks a locked row's condition again on
/// its newest version), so no account passes its limit. The mode's head rises in the same
/// statement, written only when it rises.
fn claim_sql(one_mode: bool, limited: bool) -> String {
    // Only the parameters a statement uses are bound: the limits' come after the mode's.
    let mode = if one_mode { "AND t.priority = $4" } else { "" };
    let (plans, default) = if one_mode { (5, 6) } else { (4, 5) };
    let (join, room, lock) = if limited {
        (
            "JOIN accounts a ON a.id = t.account_id",
            format!(
                "AND a.running_tasks < COALESCE((${plans}::jsonb ->> a.plan)::bigint, ${default})"
            ),
            " FOR NO KEY UPDATE OF a",
        )
    } else {
        ("", String::new(), "")
    };
    format!(
        "WITH picked AS (
             SELECT t.seq FROM tasks t {join}
             WHERE t.status = 'pending' {mode} {room}
             ORDER BY t.priority, t.turn, t.seq LIMIT 1
             FOR UPDATE OF t SKIP LOCKED{lock}),
         claimed AS (
             UPDATE tasks SET status = 'starting', attempts = attempts + 1,
                 lease_owner = $1, lease_expires_at = $2,
                 started_at = COALESCE(started_at, $3), percentage = 0,
                 event_seq = nextval('task_seq'), preview_key = NULL
             FROM picked WHERE tasks.seq = picked.seq
             RETURNING tasks.seq, account_id, task_type, params, prompt, aspect_ratio, seed,
                 attempts, parent_seq, extras, event_seq, priority, turn),
         head AS (
             UPDATE queue_heads h SET turn = c.turn FROM claimed c
             WHERE h.priority = c.priority AND h.turn < c.turn
             RETURNING 1)
         SELECT seq, account_id, task_type, params, prompt, aspect_ratio, seed, attempts,
             parent_seq, extras, {}
         FROM claimed",
        changed_note_sql(TaskStatus::Starting)
    )
}

type Claimed = (
    i64,
    String,
    String,
    Option<String>,
    String,
    String,
    i64,
    i64,
    Option<i64>,
    Option<String>,
);

impl PgStore {
    pub(super) async fn claim(
        &self,
        owner: &str,
        lease_ms: i64,
        rules: &ClaimRules,
    ) -> StoreResult<Option<ClaimedTask>> {
        let now = now_ms();
        let limited = rules.limits_running();
        let plans = rules.plan_limits_json();
        let mut claimed = None;
        let tries = rules
            .prefer
            .map(|mode| Some(mode.priority()))
            .into_iter()
            .chain([None]);
        for priority in tries {
            let sql = claim_sql(priority.is_some(), limited);
            let mut query = sqlx::query_as::<_, Claimed>(&sql)
                .bind(owner)
                .bind(now + lease_ms)
                .bind(now);
            if let Some(priority) = priority {
                query = query.bind(priority);
            }
            if limited {
                query = query.bind(&plans).bind(rules.default_limit());
            }
            claimed = query.fetch_optional(&self.pool).await?;
            if claimed.is_some() {
                break;
            }
        }
        claimed
            .map(
                |(
                    seq,
                    account_id,
                    task_type,
                    params,
                    prompt,
                    aspect_ratio,
                    seed,
                    attempts,
                    parent,
                    extras,
                )| {
                    ClaimedRow {
                        seq,
                        id: self.ids.id(seq).to_string(),
                        account_id,
                        task_type,
                        params,
                        parent_id: parent.map(|p| self.ids.id(p).to_string()),
                        prompt,
                        aspect_ratio,
                        seed,
                        attempts,
                        extras,
                    }
                    .into_claimed()
                },
            )
            .transpose()
    }

    pub(super) async fn waiting(
        &self,
        limit: u32,
        rules: &ClaimRules,
    ) -> StoreResult<Vec<Waiting>> {
        let rows: Vec<(i64, bool, bool)> = sqlx::query_as(
            "(SELECT seq, true, false FROM tasks
              WHERE status IN ('starting', 'processing') AND status = 'starting'
              ORDER BY priority, turn, seq)
             UNION ALL
             (SELECT t.seq, false,
                     a.running_tasks >= COALESCE(($2::jsonb ->> a.plan)::bigint, $3)
              FROM tasks t JOIN accounts a ON a.id = t.account_id
              WHERE t.status = 'pending' ORDER BY t.priority, t.turn, t.seq LIMIT $1)
             LIMIT $1",
        )
        .bind(i64::from(limit))
        .bind(rules.plan_limits_json())
        .bind(rules.default_limit())
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(seq, claimed, held)| Waiting { seq, claimed, held })
            .collect())
    }
}
