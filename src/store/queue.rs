//! How claims share the queue between accounts, for both stores (docs/design.md, "The queue").
//!
//! - **Turns.** Each pending task has a `turn`; claims take the lowest `(priority, turn, seq)`.
//!   A submit gives an account's task the turn after the account's own newest waiting task's in
//!   that mode, but never one below the mode's head, where claims have got to (SQLite: the
//!   highest turn claimed, kept by its writer in [`Heads`]; PostgreSQL: the highest turn running
//!   in the mode, or its lowest waiting one if higher). An account with a backlog holds one task per
//!   turn, so accounts with work alternate, and a newcomer joins the round being served: it
//!   neither jumps ahead of the tasks already in that round nor waits behind anyone's backlog.
//! - **Running limits.** A claim passes over the tasks of accounts that have as many tasks
//!   running as their plan allows, counted from the running tasks themselves; those tasks keep
//!   their turn and go first once a slot of theirs frees.
//! - **Relax does not starve.** A caller may ask a claim to try one mode first
//!   ([`ClaimRules::prefer`]); the worker does so for relax every `relax_every` claims.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use crate::domain::ProcessMode;

/// What a claim takes into account beside the order of turns.
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimRules {
    /// Most tasks one account may have running; 0: no limit.
    max_running: u32,
    /// The same, for the accounts on these plans.
    max_running_by_plan: BTreeMap<String, u32>,
    /// `max_running_by_plan` as the statements take it, made once: claims are a hot path.
    plans_json: Arc<str>,
    /// Try this mode's first task before the usual order.
    pub prefer: Option<ProcessMode>,
}

/// What stands for "no limit" in the statements, which compare a count with a number.
const UNLIMITED: i64 = i64::MAX;

impl Default for ClaimRules {
    fn default() -> Self {
        ClaimRules::new(0, BTreeMap::new())
    }
}

impl ClaimRules {
    /// At most `max_running` running tasks per account, `max_running_by_plan` on those plans
    /// (0: no limit); no mode first.
    pub fn new(max_running: u32, max_running_by_plan: BTreeMap<String, u32>) -> ClaimRules {
        let by_plan: BTreeMap<&str, i64> = max_running_by_plan
            .iter()
            .map(|(plan, &n)| (plan.as_str(), limit(n)))
            .collect();
        let plans_json = serde_json::to_string(&by_plan).expect("a map of numbers serializes");
        ClaimRules {
            max_running,
            max_running_by_plan,
            plans_json: plans_json.into(),
            prefer: None,
        }
    }

    /// The rules of the configured plans (no mode first): each plan's `max_running`, and the
    /// default plan's for accounts on a plan that is not configured.
    pub fn of(plans: &crate::config::Plans) -> ClaimRules {
        ClaimRules::new(
            plans.of(&plans.default_plan).max_running,
            plans
                .each()
                .into_iter()
                .map(|(name, plan)| (name.to_string(), plan.max_running))
                .collect(),
        )
    }

    /// Whether some account may be held back by a limit (else the claim needs no account).
    pub fn limits_running(&self) -> bool {
        self.max_running > 0 || self.max_running_by_plan.values().any(|&n| n > 0)
    }

    /// The limit of accounts on no listed plan, as the statements take it.
    pub fn default_limit(&self) -> i64 {
        limit(self.max_running)
    }

    /// The listed plans' limits as a JSON object (plan to limit), as the statements take it.
    pub fn plan_limits_json(&self) -> &Arc<str> {
        &self.plans_json
    }

    /// The limit of an account on `plan`; None: no limit.
    pub fn limit_of(&self, plan: &str) -> Option<u32> {
        let n = self
            .max_running_by_plan
            .get(plan)
            .copied()
            .unwrap_or(self.max_running);
        (n > 0).then_some(n)
    }
}

fn limit(n: u32) -> i64 {
    if n == 0 {
        UNLIMITED
    } else {
        i64::from(n)
    }
}

/// The turn of an account's next task in a mode: after its own newest waiting task's there, and
/// never behind the mode's head.
pub fn next_turn(own_newest: Option<i64>, head: i64) -> i64 {
    own_newest.map_or(head, |t| t + 1).max(head)
}

/// The heads of the three modes as one process keeps them: the highest turn it has claimed in
/// each (SQLite's writer, the only process that claims from its file).
#[derive(Debug, Default)]
pub struct Heads([AtomicI64; 3]);

impl Heads {
    /// Heads starting at `at` (by priority).
    pub fn new(at: [i64; 3]) -> Heads {
        Heads(at.map(AtomicI64::new))
    }

    fn slot(&self, priority: i64) -> Option<&AtomicI64> {
        usize::try_from(priority).ok().and_then(|p| self.0.get(p))
    }

    pub fn get(&self, priority: i64) -> i64 {
        self.slot(priority)
            .map_or(0, |head| head.load(Ordering::Relaxed))
    }

    /// A task of `turn` was claimed in mode `priority`.
    pub fn claimed(&self, priority: i64, turn: i64) {
        if let Some(head) = self.slot(priority) {
            head.fetch_max(turn, Ordering::Relaxed);
        }
    }
}

/// One waiting task in claim order, for `queue_position`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Waiting {
    pub seq: i64,
    /// Claimed by a worker that waits for a backend (`starting`).
    pub claimed: bool,
    /// Its account has as many tasks running as its plan allows: claims pass over it.
    pub held: bool,
}

/// An account's share of the queue, for the operators' page.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct AccountLoad {
    pub account_id: String,
    pub email: String,
    pub plan: String,
    pub queued: i64,
    pub running: i64,
}

/// One plan's tasks queued and running, for the metrics (a label per plan, not per account).
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct PlanLoad {
    pub plan: String,
    pub queued: i64,
    pub running: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_account_continues_its_own_line_but_never_behind_the_head() {
        assert_eq!(
            next_turn(None, 7),
            7,
            "a newcomer joins the round served now"
        );
        assert_eq!(
            next_turn(Some(9), 7),
            10,
            "a backlog goes on after its own last"
        );
        assert_eq!(
            next_turn(Some(3), 7),
            7,
            "a held-back line does not pull new work back"
        );
    }

    #[test]
    fn a_head_only_rises() {
        let heads = Heads::new([0, 5, 0]);
        heads.claimed(1, 3);
        assert_eq!(heads.get(1), 5);
        heads.claimed(1, 9);
        assert_eq!([heads.get(0), heads.get(1), heads.get(7)], [0, 9, 0]);
    }

    #[test]
    fn limits_by_plan_fall_back_to_the_default_and_zero_is_none() {
        let rules = ClaimRules::new(4, [("pro".to_string(), 12), ("free".to_string(), 0)].into());
        assert!(rules.limits_running());
        assert_eq!(rules.limit_of("pro"), Some(12));
        assert_eq!(rules.limit_of("basic"), Some(4));
        assert_eq!(rules.limit_of("free"), None);
        assert_eq!(rules.default_limit(), 4);
        assert_eq!(
            &**rules.plan_limits_json(),
            format!("{{\"free\":{UNLIMITED},\"pro\":12}}")
        );
        assert!(!ClaimRules::default().limits_running());
        assert_eq!(ClaimRules::default().default_limit(), UNLIMITED);
    }
}
