//! Periodic grants: at each period's start, an account on a plan with `credits_per_period` (and
//! a balance) has its balance set to that many credits, with one `grant` ledger row of the
//! difference (nothing left over is carried into the period). Every API node tries every
//! [`GRANT_EVERY`]; the store's unique (account, period) row makes each grant happen once
//! whatever the number of nodes, restarts, or a node down across the boundary (the next try
//! grants the current period; a period missed whole by every node is not granted late).

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::config::{Live, Plans};
use crate::store::{now_ms, Grant, SharedStore, Store, StoreResult};

/// How often a node looks for grants due.
pub const GRANT_EVERY: Duration = Duration::from_secs(60);

/// Give every grant due at `now` (Unix ms) that has not been given: the accounts that got one.
/// Time is a parameter so that tests need not wait for a period's start.
pub async fn grant_due(store: &dyn Store, plans: &Plans, now: i64) -> StoreResult<u64> {
    let configured: Vec<String> = plans.names().into_iter().map(String::from).collect();
    let mut granted = 0;
    for (name, plan) in plans.each() {
        let Some(credits) = plan.credits_per_period else {
            continue;
        };
        granted += store
            .grant(&Grant {
                plan: name.to_string(),
                others: name == plans.default_plan,
                configured: configured.clone(),
                period: plan.period.key(now),
                credits,
                at: now,
            })
            .await?;
    }
    Ok(granted)
}

/// Give grants as they fall due, at start and every [`GRANT_EVERY`], until `stop`, under the
/// plans as they are at each pass (a reload may add a plan with grants).
pub async fn run(store: SharedStore, plans: Arc<Live<Plans>>, stop: CancellationToken) {
    loop {
        let now = plans.get();
        let grants = now
            .each()
            .iter()
            .any(|(_, p)| p.credits_per_period.is_some());
        if grants {
            match grant_due(store.as_ref(), &now, now_ms()).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(accounts = n, "periodic credits granted"),
                Err(e) => tracing::warn!(error = %e, "could not grant periodic credits"),
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(GRANT_EVERY) => {}
            _ = stop.cancelled() => return,
        }
    }
}
