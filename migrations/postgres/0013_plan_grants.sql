-- Periodic grants (as migrations/sqlite/0019): one row per account and period.
CREATE TABLE plan_grants (
    account_id TEXT NOT NULL,
    period     TEXT NOT NULL,
    credits    BIGINT NOT NULL,
    granted_at BIGINT NOT NULL,
    token      TEXT NOT NULL,
    PRIMARY KEY (account_id, period)
);
CREATE INDEX plan_grants_by_token ON plan_grants (token);
