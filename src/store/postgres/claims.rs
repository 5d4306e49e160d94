//! The queue's claims and order on PostgreSQL ([`crate::store::queue`] says the rules).

use std::sync::LazyLock;

use super::channels::changed_note_sql;
use super::PgStore;
use crate::domain::TaskStatus;
use crate::store::queue::ClaimRules;
use crate::store::rows::ClaimedRow;
use crate::store::{now_ms, ClaimedTask, StoreResult};

/// The claim without running limits, one statement: the first pending task in
/// `(priority, turn, seq)` order (of mode `$4` when `one_mode`), skipping rows other claims
/// hold, and the claim's `NOTIFY`.
fn claim_sql(one_mode: bool) -> String {
    let mode = if one_mode { "AND t.priority = $4" } else { "" };
    format!(
        "WITH picked AS (
             SELECT t.seq FROM tasks t
             WHERE t.status = 'pending' {mode}
             ORDER BY t.priority, t.turn, t.seq LIMIT 1
             FOR UPDATE OF t SKIP LOCKED),
         {CLAIMED}
         SELECT seq, account_id, task_type, params, prompt, aspect_ratio, seed, attempts,
             parent_seq, extras, {}
         FROM claimed",
        changed_note_sql(TaskStatus::Starting)
    )
}

/// [`claim_sql`]'s two statements, made once: any mode, then one mode.
static CLAIMS: LazyLock<[String; 2]> = LazyLock::new(|| [claim_sql(false), claim_sql(true)]);

/// The claim itself, of the task in `picked`.
const CLAIMED: &str = "claimed AS (
             UPDATE tasks SET status = 'starting', attempts = attempts + 1,
                 lease_owner = $1, lease_expires_at = $2,
                 started_at = COALESCE(started_at, $3), percentage = 0,
                 event_seq = nextval('task_seq'), preview_key = NULL, retry_attempt = NULL,
                 retry_error = NULL
             FROM picked WHERE tasks.seq = picked.seq
             RETURNING tasks.seq, account_id, task_type, params, prompt, aspect_ratio, seed,
                 attempts, parent_seq, extras, event_seq)";

/// With running limits, a claim is two statements in a transaction. [`pick_sql`] chooses the first
/// task whose account is below its limit as its snapshot sees it, and locks the task's row
/// (skipping those other claims hold) and the account's (waiting for another claim of the same
/// account to commit). [`CLAIM_PICKED`] then counts the account's running tasks again, in a
/// snapshot taken after that lock, so it sees every claim of the account committed before: no
/// account passes its limit, however many nodes claim. Parameters: `$1` the plans' limits
/// (JSON), `$2` every other plan's, `$3` the mode when one is asked for.
fn pick_sql(one_mode: bool) -> String {
    // A mode is its own statement, so that the pick seeks to it in the index.
    let mode = if one_mode { "AND t.priority = $3" } else { "" };
    format!(
        "SELECT t.seq, t.account_id, COALESCE(($1::jsonb ->> a.plan)::bigint, $2) AS room
         FROM tasks t JOIN accounts a ON a.id = t.account_id
         WHERE t.status = 'pending' {mode}
           AND (SELECT COUNT(*) FROM tasks r
                WHERE r.account_id = t.account_id AND r.status IN ('starting', 'processing'))
               < COALESCE(($1::jsonb ->> a.plan)::bigint, $2)
         ORDER BY t.priority, t.turn, t.seq LIMIT 1
         FOR UPDATE OF t SKIP LOCKED FOR NO KEY UPDATE OF a"
    )
}

/// [`pick_sql`]'s two statements, made once: any mode, then one mode.
static PICKS: LazyLock<[String; 2]> = LazyLock::new(|| [pick_sql(false), pick_sql(true)]);

/// The picked task `$4` claimed if its account `$5` still has fewer than `$6` running.
static CLAIM_PICKED: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH picked AS (
             SELECT $4::bigint AS seq
             WHERE (SELECT COUNT(*) FROM tasks r
                    WHERE r.account_id = $5 AND r.status IN ('starting', 'processing')) < $6),
         {CLAIMED}
         SELECT seq, account_id, task_type, params, prompt, aspect_ratio, seed, attempts,
             parent_seq, extras, {}
         FROM claimed",
        changed_note_sql(TaskStatus::Starting)
    )
});

/// How often a limited claim tries again when its pick was taken to the limit meanwhile.
const PICK_TRIES: usize = 4;

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
        let tries = rules
            .prefer
            .map(|mode| Some(mode.priority()))
            .into_iter()
            .chain([None]);
        let mut claimed = None;
        for priority in tries {
            claimed = if rules.limits_running() {
                self.claim_limited(owner, now, lease_ms, rules, priority)
                    .await?
            } else {
                let sql = &CLAIMS[usize::from(priority.is_some())];
                let mut query = sqlx::query_as::<_, Claimed>(sql)
                    .bind(owner)
                    .bind(now + lease_ms)
                    .bind(now);
                if let Some(priority) = priority {
                    query = query.bind(priority);
                }
                query.fetch_optional(&self.pool).await?
            };
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

    /// A claim under running limits ([`pick_sql`], then [`CLAIM_PICKED`], in one transaction).
    async fn claim_limited(
        &self,
        owner: &str,
        now: i64,
        lease_ms: i64,
        rules: &ClaimRules,
        priority: Option<i64>,
    ) -> StoreResult<Option<Claimed>> {
        let plans: &str = rules.plan_limits_json();
        for _ in 0..PICK_TRIES {
            let mut tx = self.pool.begin().await?;
            let mut pick =
                sqlx::query_as::<_, (i64, String, i64)>(&PICKS[usize::from(priority.is_some())])
                    .bind(plans)
                    .bind(rules.default_limit());
            if let Some(priority) = priority {
                pick = pick.bind(priority);
            }
            let picked = pick.fetch_optional(&mut *tx).await?;
            let Some((seq, account, room)) = picked else {
                return Ok(None);
            };
            let claimed: Option<Claimed> = sqlx::query_as(&CLAIM_PICKED)
                .bind(owner)
                .bind(now + lease_ms)
                .bind(now)
                .bind(seq)
                .bind(&account)
                .bind(room)
                .fetch_optional(&mut *tx)
                .await?;
            if claimed.is_some() {
                tx.commit().await?;
                return Ok(claimed);
            }
            // Another node's claim took the account to its limit after this pick's snapshot;
            // the next pick sees it.
            tx.rollback().await?;
        }
        Ok(None)
    }
}
