//! Request rate limits by account plan, per API key and per account (each plan's `rate` in the
//! settings; docs/api.md). An account on a plan that is not configured has the default plan's.
//!
//! Each limit is a GCRA (the `governor` crate): a sustained rate and a burst. The state is in
//! this node's memory, so with N API nodes a caller may get up to N times the configured rate; a
//! shared limiter would cost a database round trip on every request.
//!
//! The handlers that check the key in the statement doing their work (submits, reads) have not
//! looked the key's account up when the limit must be checked; the owner of a key (its account
//! and plan) is kept here for `OWNER_TTL` after one lookup, so that only the first request of a
//! key in that time costs a query. A changed plan applies within that time.

use std::collections::{HashMap, HashSet};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use governor::clock::{Clock, DefaultClock};
use governor::middleware::StateInformationMiddleware;
use governor::state::keyed::DashMapStateStore;
use governor::{Quota, RateLimiter};

use crate::config::{Live, Plans};
use crate::refusal::{RateRefusal as Refusal, RateScope as Scope};
use crate::store::{Store, StoreResult};

/// How long a key's account and plan are remembered.
const OWNER_TTL: Duration = Duration::from_secs(30);
/// Every this many checks, forget limiter state that is back to full and owners past their TTL,
/// so that memory follows the callers of the last moments, not every caller ever seen.
const SWEEP_EVERY: u64 = 4096;

type Keyed<K> = RateLimiter<K, DashMapStateStore<K>, DefaultClock, StateInformationMiddleware>;

/// One limit: its GCRA state per caller, and how the answer describes it.
struct Limit<K: std::hash::Hash + Eq + Clone> {
    burst: u32,
    /// Seconds to earn a whole burst back at the sustained rate: the draft's policy window.
    window_secs: u64,
    limiter: Keyed<K>,
}

impl<K: std::hash::Hash + Eq + Clone> Limit<K> {
    fn new(rate: f64, burst: u32) -> Limit<K> {
        let quota = Quota::with_period(Duration::from_secs_f64(1.0 / rate))
            .expect("validated: a positive rate")
            .allow_burst(NonZeroU32::new(burst.max(1)).expect("at least 1"));
        Limit {
            burst,
            window_secs: (f64::from(burst) / rate).ceil().max(1.0) as u64,
            limiter: RateLimiter::dashmap(quota).with_middleware(),
        }
    }

    fn check(&self, key: &K, scope: Scope) -> Result<(), Refusal> {
        self.limiter.check_key(key).map(drop).map_err(|not_until| {
            let wait = not_until.wait_time_from(self.limiter.clock().now());
            Refusal {
                scope,
                burst: self.burst,
                window_secs: self.window_secs,
                retry_after_secs: wait.as_secs_f64().ceil().max(1.0) as u64,
            }
        })
    }
}

struct PlanLimiters {
    keys: Limit<[u8; 32]>,
    accounts: Limit<String>,
}

/// The limiters of the plans of one version of the settings.
struct Table {
    plans: HashMap<String, PlanLimiters>,
    /// The configured plans' names, and the plan of accounts on any other.
    configured: HashSet<String>,
    default_plan: String,
}

impl Table {
    fn of(settings: &Plans) -> Table {
        let plans = settings
            .each()
            .into_iter()
            .filter_map(|(plan, settings)| Some((plan, settings.rate.as_ref()?)))
            .map(|(plan, limit)| {
                let (account_rate, account_burst) = limit.account();
                let limiters = PlanLimiters {
                    keys: Limit::new(limit.rate, limit.burst),
                    accounts: Limit::new(account_rate, account_burst),
                };
                (plan.to_string(), limiters)
            })
            .collect();
        Table {
            plans,
            configured: settings.names().into_iter().map(String::from).collect(),
            default_plan: settings.default_plan.clone(),
        }
    }
}

/// The limiters of every plan with a limit, and the owners of recently seen keys.
pub struct RateLimits {
    /// Replaced whole by a reload (the counts start afresh).
    table: Live<Table>,
    owners: Mutex<HashMap<[u8; 32], (Instant, String, String)>>,
    checks: AtomicU64,
}

impl RateLimits {
    pub fn new(settings: &Plans) -> RateLimits {
        RateLimits {
            table: Live::new(Table::of(settings)),
            owners: Mutex::new(HashMap::new()),
            checks: AtomicU64::new(0),
        }
    }

    /// Take the plans' limits of reloaded settings; every count starts afresh.
    pub fn reload(&self, settings: &Plans) {
        self.table.set(Table::of(settings));
    }

    /// Whether any plan is limited; when not, checking costs nothing.
    pub fn enabled(&self) -> bool {
        !self.table.get().plans.is_empty()
    }

    /// Count one request of the key hashed `key` of `account_id` on `plan`; the refusal when
    /// either the key's or the account's limit is spent.
    pub fn check(&self, key: &[u8; 32], account_id: &str, plan: &str) -> Result<(), Refusal> {
        let table = self.table.get();
        let plan = if table.configured.contains(plan) {
            plan
        } else {
            &table.default_plan
        };
        let Some(limits) = table.plans.get(plan) else {
            return Ok(());
        };
        if self.checks.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            self.sweep();
        }
        // The key's limit first: a request it refuses then spends nothing of the account's, so
        // one busy key cannot use up its siblings' share by being refused.
        limits.keys.check(key, Scope::Key)?;
        limits
            .accounts
            .check(&account_id.to_string(), Scope::Account)
    }

    /// Check a key whose owner the request has not looked up: from the remembered owners, or
    /// with one lookup. A key that is not live passes here; the handler answers 401.
    pub async fn check_presented(
        &self,
        store: &dyn Store,
        key: &[u8; 32],
    ) -> StoreResult<Result<(), Refusal>> {
        let known = {
            let owners = self.owners.lock().expect("not poisoned");
            owners
                .get(key)
                .filter(|(at, _, _)| at.elapsed() < OWNER_TTL)
                .map(|(_, account, plan)| (account.clone(), plan.clone()))
        };
        let (account, plan) = match known {
            Some(owner) => owner,
            None => {
                let Some(owner) = store.key_owner(key).await? else {
                    return Ok(Ok(()));
                };
                self.remember(key, &owner.account.id, &owner.account.plan);
                (owner.account.id, owner.account.plan)
            }
        };
        Ok(self.check(key, &account, &plan))
    }

    /// Note a key's owner found by a lookup the request made anyway.
    pub fn remember(&self, key: &[u8; 32], account_id: &str, plan: &str) {
        self.owners.lock().expect("not poisoned").insert(
            *key,
            (Instant::now(), account_id.to_string(), plan.to_string()),
        );
    }

    fn sweep(&self) {
        for limits in self.table.get().plans.values() {
            limits.keys.limiter.retain_recent();
            limits.accounts.limiter.retain_recent();
        }
        self.owners
            .lock()
            .expect("not poisoned")
            .retain(|_, (at, _, _)| at.elapsed() < OWNER_TTL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::config::{Plan, PlanRate};

    fn limits(rate: f64, burst: u32) -> RateLimits {
        let mut plans = Plans {
            default_plan: "unlimited".into(),
            ..Plans::default()
        };
        plans.plans.insert("unlimited".into(), Plan::default());
        plans.plans.insert(
            "free".to_string(),
            Plan {
                rate: Some(PlanRate {
                    rate,
                    burst,
                    account_rate: None,
                    account_burst: None,
                }),
                ..Plan::default()
            },
        );
        RateLimits::new(&plans)
    }

    #[test]
    fn a_burst_passes_then_the_next_is_refused_with_the_wait() {
        let l = limits(1.0, 3);
        let key = [1u8; 32];
        for _ in 0..3 {
            l.check(&key, "acct", "free").unwrap();
        }
        let refusal = l.check(&key, "acct", "free").unwrap_err();
        assert_eq!(refusal.retry_after_secs, 1);
        assert_eq!(refusal.window_secs, 3);
        // A plan without a limit is never refused, nor one not configured (the default plan's).
        for _ in 0..100 {
            l.check(&key, "acct", "unlimited").unwrap();
            l.check(&key, "acct", "not-configured").unwrap();
        }
    }
}
