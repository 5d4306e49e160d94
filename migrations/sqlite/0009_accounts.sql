-- Accounts that sign in (the dashboard), sessions, sign-in throttling, real credits, and the
-- indexes that list an account's tasks newest first at any page depth.

-- An argon2id PHC string; NULL until a password is set (accounts made by `easel keys create`).
ALTER TABLE accounts ADD COLUMN password_hash TEXT;
ALTER TABLE accounts ADD COLUMN admin INTEGER NOT NULL DEFAULT 0;
ALTER TABLE accounts ADD COLUMN disabled INTEGER NOT NULL DEFAULT 0;
-- The first account (made at first start) is the operator.
UPDATE accounts SET admin = 1
WHERE id = (SELECT id FROM accounts ORDER BY created_at, rowid LIMIT 1);
-- Emails are unique without regard to case: `A@x` and `a@x` are one account. (Should two
-- accounts differ only in case already, this fails and the database stays as it was.)
CREATE UNIQUE INDEX accounts_email_nocase ON accounts (lower(email));

-- Sessions are stored as the SHA-256 of their random token, never the token.
CREATE TABLE sessions (
    token_hash BLOB PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts(id),
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX sessions_by_account ON sessions (account_id);
CREATE INDEX sessions_by_expiry ON sessions (expires_at);

-- One row per failed sign-in per scope (an address or an email), kept for the throttling window.
CREATE TABLE sign_in_failures (
    id    INTEGER PRIMARY KEY AUTOINCREMENT,
    scope TEXT NOT NULL,
    at    INTEGER NOT NULL
);
CREATE INDEX sign_in_failures_by_scope ON sign_in_failures (scope, at);
CREATE INDEX sign_in_failures_by_time ON sign_in_failures (at);

-- What a submit charged, given back if the task fails; 0 for accounts with unlimited credits.
ALTER TABLE tasks ADD COLUMN cost INTEGER NOT NULL DEFAULT 0;

-- Every change of a balance: a submit's charge, a failed task's refund, a sign-up's grant, an
-- operator's change. For an account with a balance, its rows sum to `accounts.credits`.
CREATE TABLE credit_ledger (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    account_id TEXT NOT NULL REFERENCES accounts(id),
    task_seq   INTEGER REFERENCES tasks(seq),
    delta      INTEGER NOT NULL,
    reason     TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX credit_ledger_by_account ON credit_ledger (account_id, id);

-- Listing an account's tasks newest first, all of them, by status or by type: each page is a
-- range of one of these indexes, however deep (keyset paging on `seq`).
CREATE INDEX tasks_by_account ON tasks (account_id, seq);
CREATE INDEX tasks_by_account_status ON tasks (account_id, status, seq);
CREATE INDEX tasks_by_account_type ON tasks (account_id, task_type, seq);
