//! The queue's claims and order on SQLite ([`crate::store::queue`] says the rules).

use rusqlite::{Connection, OptionalExtension, ToSql};

use super::versions::{peek_version, take_version};
use super::SqliteStore;
use crate::domain::TaskStatus;
use crate::store::queue::ClaimRules;
use crate::store::rows::ClaimedRow;
use crate::store::sql::Durability;
use crate::store::{now_ms, ClaimedTask, StoreResult, TaskIds};

/// The claim's statement: the first pending task in `(priority, turn, seq)` order (of one mode
/// when `one_mode`), passing over accounts at their running limit when `limited`. It walks the
/// `tasks_queue` index from its start; each task passed over costs a look at its account.
fn claim_sql(one_mode: bool, limited: bool) -> String {
    let mode = if one_mode { "AND t.priority = ?5" } else { "" };
    let room = if limited { ROOM } else { "" };
    format!(
        "UPDATE tasks SET status = 'starting', attempts = attempts + 1,
             lease_owner = ?1, lease_expires_at = ?2,
             started_at = COALESCE(started_at, ?3), percentage = 0,
             event_seq = ?4, preview_key = NULL, retry_attempt = NULL,
             retry_error = NULL
         WHERE seq = (SELECT t.seq FROM tasks t WHERE t.status = 'pending' {mode} {room}
                      ORDER BY t.priority, t.turn, t.seq LIMIT 1)
         RETURNING seq, id, account_id, task_type, params, prompt, aspect_ratio,
             seed, attempts, parent_seq,
             (SELECT p.id FROM tasks p WHERE p.seq = tasks.parent_seq),
             (SELECT x.extras FROM task_extras x WHERE x.seq = tasks.seq), priority, turn"
    )
}

/// [`claim_sql`]'s four statements, made once, at `[one_mode as usize * 2 + limited as usize]`.
static CLAIMS: std::sync::LazyLock<[String; 4]> = std::sync::LazyLock::new(|| {
    [
        claim_sql(false, false),
        claim_sql(false, true),
        claim_sql(true, false),
        claim_sql(true, true),
    ]
});

/// Whether task `t`'s account may start one more: parameters `?6` (the plans' limits, a JSON
/// object) and `?7` (the limit of every other plan). Its running tasks are counted in
/// `tasks_by_account_status`, a few entries; the writer is the only one, so the count is exact.
const ROOM: &str = "AND (SELECT COUNT(*) FROM tasks r
                         WHERE r.account_id = t.account_id
                           AND r.status IN ('starting', 'processing'))
                    < COALESCE((SELECT value FROM json_each(?6)
                                WHERE key = (SELECT a.plan FROM accounts a
                                             WHERE a.id = t.account_id)), ?7)";

impl SqliteStore {
    pub(super) async fn claim(
        &self,
        owner: &str,
        lease_ms: i64,
        rules: &ClaimRules,
    ) -> StoreResult<Option<ClaimedTask>> {
        let owner = owner.to_string();
        let ids = self.ids.clone();
        let heads = self.heads.clone();
        let limits = rules
            .limits_running()
            .then(|| (rules.plan_limits_json().clone(), rules.default_limit()));
        let prefer = rules.prefer.map(|mode| mode.priority());
        let claimed = self
            .writer
            .call(Durability::Committed, move |conn| {
                let now = now_ms();
                let version = peek_version(conn)?;
                let base = Claim {
                    owner: &owner,
                    lease_until: now + lease_ms,
                    now,
                    version,
                    limits: limits.as_ref(),
                };
                let mut claimed = None;
                if let Some(priority) = prefer {
                    claimed = base.run(conn, &ids, Some(priority))?;
                }
                if claimed.is_none() {
                    claimed = base.run(conn, &ids, None)?;
                }
                let Some((row, priority, turn)) = claimed else {
                    return Ok(None);
                };
                take_version(conn, version)?;
                heads.claimed(priority, turn);
                Ok(Some((row, version)))
            })
            .await?;
        let Some((row, version)) = claimed else {
            return Ok(None);
        };
        self.changed(row.seq, &row.account_id, version, TaskStatus::Starting);
        row.into_claimed().map(Some)
    }
}

/// One claim's values, for each statement it may try.
struct Claim<'a> {
    owner: &'a str,
    lease_until: i64,
    now: i64,
    version: i64,
    limits: Option<&'a (std::sync::Arc<str>, i64)>,
}

impl Claim<'_> {
    /// Claim the first task (of mode `priority` when given): the row, its priority and turn.
    fn run(
        &self,
        conn: &Connection,
        ids: &TaskIds,
        priority: Option<i64>,
    ) -> rusqlite::Result<Option<(ClaimedRow, i64, i64)>> {
        let mut values: Vec<&dyn ToSql> = vec![&self.owner, &self.lease_until, &self.now];
        values.push(&self.version);
        // Numbered parameters: a statement takes as many values as its highest number.
        let unused = rusqlite::types::Null;
        if let Some((plans, default)) = self.limits {
            values.push(priority.as_ref().map_or(&unused as &dyn ToSql, |p| p));
            values.push(plans);
            values.push(default);
        } else if let Some(p) = priority.as_ref() {
            values.push(p);
        }
        let sql = &CLAIMS[usize::from(priority.is_some()) * 2 + usize::from(self.limits.is_some())];
        conn.prepare_cached(sql)?
            .query_row(rusqlite::params_from_iter(values), |r| {
                let seq = r.get(0)?;
                let legacy_id: Option<String> = r.get(1)?;
                let parent_seq: Option<i64> = r.get(9)?;
                let parent_legacy: Option<String> = r.get(10)?;
                let row = ClaimedRow {
                    seq,
                    id: ids.of_row(seq, legacy_id.as_deref()),
                    account_id: r.get(2)?,
                    task_type: r.get(3)?,
                    params: r.get(4)?,
                    parent_id: parent_seq.map(|p| ids.of_row(p, parent_legacy.as_deref())),
                    prompt: r.get(5)?,
                    aspect_ratio: r.get(6)?,
                    seed: r.get(7)?,
                    attempts: r.get(8)?,
                    extras: r.get(11)?,
                };
                Ok((row, r.get(12)?, r.get(13)?))
            })
            .optional()
    }
}
