-- Periodic grants (docs/accounts.md, "Plans"): one row per account and period, inserted in the
-- transaction that writes the grant's ledger row and balance, so that however many nodes try
-- (and whatever restarts), an account gets one grant per period. `token` marks the rows of one
-- transaction, so that its later statements touch only the accounts it granted.
CREATE TABLE plan_grants (
    account_id TEXT NOT NULL,
    period     TEXT NOT NULL,
    credits    INTEGER NOT NULL,
    granted_at INTEGER NOT NULL,
    token      TEXT NOT NULL,
    PRIMARY KEY (account_id, period)
) WITHOUT ROWID;
CREATE INDEX plan_grants_by_token ON plan_grants (token);
