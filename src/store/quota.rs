//! The per-account quota over a group of submits, the rule both stores apply inside the
//! transaction that inserts the group.

/// The per-account quota over a group of submits, decided in arrival order: each account's
/// tasks queued or running before the group, plus those the group has let in so far; and each
/// account's balance (when it has one) less what the group has charged so far.
#[derive(Default)]
pub(crate) struct Quota {
    /// Tasks active before the group, added by it, and the most the account may have.
    active: std::collections::HashMap<String, (i64, i64, u32)>,
    /// Balance before the group, and credits charged by it, for accounts with a balance.
    credits: std::collections::HashMap<String, (i64, i64)>,
    /// The `credits.low` thresholds of the accounts whose webhook takes it.
    low: std::collections::HashMap<String, i64>,
}

/// Why a submit was not let in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    Quota,
    Credits,
}

impl Quota {
    /// Note how many tasks `account` had queued or running when the group began, the most it
    /// may have (its plan's `max_pending`), and its balance (None: unlimited).
    pub(crate) fn set(
        &mut self,
        account: &str,
        active: i64,
        max_active: u32,
        credits: Option<i64>,
    ) {
        self.active
            .entry(account.to_string())
            .or_insert((active, 0, max_active));
        if let Some(balance) = credits {
            self.credits
                .entry(account.to_string())
                .or_insert((balance, 0));
        }
    }

    /// Note that `account`'s webhook takes `credits.low` under `threshold`.
    pub(crate) fn watch_low(&mut self, account: &str, threshold: Option<i64>) {
        if let Some(threshold) = threshold {
            self.low.insert(account.to_string(), threshold);
        }
    }

    /// The accounts whose balance the group's charges took under their `credits.low`
    /// threshold, with the balance left and the threshold.
    pub(crate) fn went_under(&self) -> impl Iterator<Item = (&str, i64, i64)> {
        self.low.iter().filter_map(|(account, &threshold)| {
            let &(balance, spent) = self.credits.get(account)?;
            crate::domain::account_webhook::went_under(balance, balance - spent, threshold)
                .then_some((account.as_str(), balance - spent, threshold))
        })
    }

    /// Let one more task of `account` costing `cost` in, unless that would pass its most or
    /// the account's balance. Returns the credits charged (0 for an unlimited account).
    pub(crate) fn admit(&mut self, account: &str, cost: i64) -> Result<i64, Refused> {
        let Some((before, added, max_active)) = self.active.get_mut(account) else {
            return Err(Refused::Quota);
        };
        if *before + *added >= i64::from(*max_active) {
            return Err(Refused::Quota);
        }
        let charged = match self.credits.get_mut(account) {
            Some((balance, spent)) => {
                if *balance - *spent < cost {
                    return Err(Refused::Credits);
                }
                *spent += cost;
                cost
            }
            None => 0,
        };
        *added += 1;
        Ok(charged)
    }

    /// The accounts whose balance moved, and by how much it fell.
    pub(crate) fn charged(&self) -> impl Iterator<Item = (&str, i64)> {
        self.credits
            .iter()
            .filter(|(_, (_, spent))| *spent > 0)
            .map(|(account, (_, spent))| (account.as_str(), *spent))
    }

    /// The accounts whose count moved, and by how much.
    pub(crate) fn added(&self) -> impl Iterator<Item = (&str, i64)> {
        self.active
            .iter()
            .filter(|(_, (_, added, _))| *added > 0)
            .map(|(account, (_, added, _))| (account.as_str(), *added))
    }
}

/// The most tasks an account may have queued or running, by its plan (each plan's
/// `max_pending`; an account on a plan that is not configured has the default plan's). Cheap to
/// clone: submits carry it to the transaction that reads the accounts' plans.
#[derive(Clone, Debug, Default)]
pub struct PendingLimits {
    default: u32,
    by_plan: std::sync::Arc<std::collections::HashMap<String, u32>>,
}

impl PendingLimits {
    /// The limits of the configured plans.
    pub fn of_plans(plans: &crate::config::Plans) -> PendingLimits {
        PendingLimits {
            default: plans.of(&plans.default_plan).max_pending,
            by_plan: std::sync::Arc::new(
                plans
                    .each()
                    .into_iter()
                    .map(|(name, plan)| (name.to_string(), plan.max_pending))
                    .collect(),
            ),
        }
    }

    /// The limit of an account on `plan`.
    pub fn of(&self, plan: &str) -> u32 {
        self.by_plan.get(plan).copied().unwrap_or(self.default)
    }
}

/// The same limit on every plan.
impl From<u32> for PendingLimits {
    fn from(max_active: u32) -> Self {
        PendingLimits {
            default: max_active,
            by_plan: Default::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quota_counts_the_groups_own_earlier_tasks() {
        let mut quota = Quota::default();
        quota.set("a", 1, 3, None);
        quota.set("b", 0, 3, None);
        assert_eq!(quota.admit("a", 5), Ok(0));
        assert_eq!(quota.admit("b", 5), Ok(0));
        assert_eq!(quota.admit("a", 5), Ok(0));
        assert_eq!(
            quota.admit("a", 5),
            Err(Refused::Quota),
            "1 before and 2 in the group make 3"
        );
        assert_eq!(quota.admit("unknown", 0), Err(Refused::Quota));
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
        quota.set("c", 0, 100, Some(5));
        assert_eq!(quota.admit("c", 2), Ok(2));
        assert_eq!(quota.admit("c", 2), Ok(2));
        assert_eq!(quota.admit("c", 2), Err(Refused::Credits));
        assert_eq!(quota.admit("c", 1), Ok(1), "a cheaper task still fits");
        assert_eq!(quota.admit("c", 0), Ok(0), "a free task always fits");
        assert_eq!(quota.charged().collect::<Vec<_>>(), [("c", 5)]);
        assert_eq!(quota.added().collect::<Vec<_>>(), [("c", 4)]);
    }

    #[test]
    fn limits_are_by_plan_and_the_default_plans_for_the_rest() {
        use crate::config::{Plan, Plans};
        use crate::store::ClaimRules;
        let mut plans = Plans {
            default_plan: "free".into(),
            ..Plans::default()
        };
        for (name, max_running, max_pending) in [("free", 1, 5), ("pro", 4, 500)] {
            let plan = Plan {
                max_running,
                max_pending,
                ..Plan::default()
            };
            plans.plans.insert(name.into(), plan);
        }
        let pending = PendingLimits::of_plans(&plans);
        assert_eq!((pending.of("pro"), pending.of("gone")), (500, 5));
        let rules = ClaimRules::of(&plans);
        assert_eq!(
            (rules.limit_of("pro"), rules.limit_of("gone")),
            (Some(4), Some(1))
        );
        // Without plans: one, the default, with every default.
        let none = Plans::default();
        assert_eq!(PendingLimits::of_plans(&none).of("anyone"), 1000);
        assert_eq!(ClaimRules::of(&none).limit_of("anyone"), None);
        assert!(!ClaimRules::of(&none).limits_running());
    }
}
