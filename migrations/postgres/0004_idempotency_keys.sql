-- Idempotency keys, as migrations/sqlite/0010: the first answer to a submit with an
-- `Idempotency-Key`, kept for the account and key until it expires, written in the transaction
-- that stores the task. It refers to nothing else, so it applies after any other migration.
CREATE TABLE idempotency_keys (
    account_id      TEXT    NOT NULL,
    idempotency_key TEXT    NOT NULL,
    fingerprint     BYTEA   NOT NULL,
    task_id         TEXT    NOT NULL,
    status          INTEGER NOT NULL,
    body            TEXT    NOT NULL,
    created_at      BIGINT  NOT NULL,
    expires_at      BIGINT  NOT NULL,
    PRIMARY KEY (account_id, idempotency_key)
);
CREATE INDEX idempotency_keys_by_expiry ON idempotency_keys (expires_at);
