-- Accounts that sign in (the dashboard), sessions, sign-in throttling, real credits, and the
-- indexes that list an account's tasks newest first at any page depth (as migrations/sqlite/0009).

ALTER TABLE accounts ADD COLUMN password_hash TEXT;
ALTER TABLE accounts ADD COLUMN admin BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE accounts ADD COLUMN disabled BOOLEAN NOT NULL DEFAULT FALSE;
UPDATE accounts SET admin = TRUE
WHERE id = (SELECT id FROM accounts ORDER BY created_at, created_seq LIMIT 1);
-- Case-insensitive for ASCII, like SQLite's lower().
CREATE UNIQUE INDEX accounts_email_nocase ON accounts (lower(email));

CREATE TABLE sessions (
    token_hash BYTEA PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts(id),
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX sessions_by_account ON sessions (account_id);
CREATE INDEX sessions_by_expiry ON sessions (expires_at);

CREATE TABLE sign_in_failures (
    id    BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    scope TEXT NOT NULL,
    at    BIGINT NOT NULL
);
CREATE INDEX sign_in_failures_by_scope ON sign_in_failures (scope, at);
CREATE INDEX sign_in_failures_by_time ON sign_in_failures (at);

ALTER TABLE tasks ADD COLUMN cost BIGINT NOT NULL DEFAULT 0;

CREATE TABLE credit_ledger (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts(id),
    task_seq   BIGINT REFERENCES tasks(seq),
    delta      BIGINT NOT NULL,
    reason     TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX credit_ledger_by_account ON credit_ledger (account_id, id);

CREATE INDEX tasks_by_account ON tasks (account_id, seq);
CREATE INDEX tasks_by_account_status ON tasks (account_id, status, seq);
CREATE INDEX tasks_by_account_type ON tasks (account_id, task_type, seq);
