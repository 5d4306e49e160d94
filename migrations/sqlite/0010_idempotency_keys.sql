-- Idempotency keys: the first answer to a submit with an `Idempotency-Key`, kept for the account
-- and key until it expires, written in the transaction that stores the task. It refers to
-- nothing else (the task by its public id only), so it applies after any other migration.
CREATE TABLE idempotency_keys (
    account_id      TEXT    NOT NULL,
    idempotency_key TEXT    NOT NULL,
    -- SHA-256 of the operation and the canonical JSON body.
    fingerprint     BLOB    NOT NULL,
    task_id         TEXT    NOT NULL,
    status          INTEGER NOT NULL,
    body            TEXT    NOT NULL,
    created_at      INTEGER NOT NULL,
    expires_at      INTEGER NOT NULL,
    PRIMARY KEY (account_id, idempotency_key)
) WITHOUT ROWID;
-- The background delete takes the oldest expired rows.
CREATE INDEX idempotency_keys_by_expiry ON idempotency_keys (expires_at);
