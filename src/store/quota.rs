//! The per-account quota over a group of submits, the rule both stores apply inside the
//! transaction that inserts the group.

/// The per-account quota over a group of submits, decided in arrival order: each account's
/// tasks queued or running before the group, plus those the group has let in so far; and each
/// account's balance (when it has one) less what the group has charged so far.
#[derive(Default)]
pub(crate) struct Quota {
    active: std::collections::HashMap<String, (i64, i64)>,
    /// Balance before the group, and credits charged by it, for accounts with a balance.
    credits: std::collections::HashMap<String, (i64, i64)>,
}

/// Why a submit was not let in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    Quota,
    Credits,
}

impl Quota {
    /// Note how many tasks `account` had queued or running when the group began, and its
    /// balance (None: unlimited).
    pub(crate) fn set(&mut self, account: &str, active: i64, credits: Option<i64>) {
        self.active
            .entry(account.to_string())
            .or_insert((active, 0));
        if let Some(balance) = credits {
            self.credits
                .entry(account.to_string())
                .or_insert((balance, 0));
        }
    }

    /// Let one more task of `account` costing `cost` in, unless that would pass `max_active` or
    /// the account's balance. Returns the credits charged (0 for an unlimited account).
    pub(crate) fn admit(
        &mut self,
        account: &str,
        max_active: u32,
        cost: i64,
    ) -> Result<i64, Refused> {
        let Some((before, added)) = self.active.get_mut(account) else {
            return Err(Refused::Quota);
        };
        if *before + *added >= i64::from(max_active) {
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
            .filter(|(_, (_, added))| *added > 0)
            .map(|(account, (_, added))| (account.as_str(), *added))
    }
}

#[cfg(test)]
mod tests {
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
}
