-- Plans and operators (docs/accounts.md): an account's expiry, and the operators' audit log.

-- Unix ms after which the account's keys are refused (402 account_expired); NULL: never.
ALTER TABLE accounts ADD COLUMN expires_at INTEGER;

-- Every operator action: who, when, what, and the values before and after (JSON objects).
-- Append-only: easel never updates or deletes a row, and the triggers refuse anyone who tries.
CREATE TABLE audit_log (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    at          INTEGER NOT NULL,
    actor       TEXT NOT NULL,
    action      TEXT NOT NULL,
    account_id  TEXT,
    before_json TEXT NOT NULL,
    after_json  TEXT NOT NULL
);
CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
