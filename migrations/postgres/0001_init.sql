-- easel's schema on PostgreSQL: the same tables and rules as on SQLite (migrations/sqlite, as of
-- 0007), written once for many nodes. Times are Unix milliseconds (BIGINT), set by the node that
-- writes them; nodes' clocks are expected to be NTP-synchronised, as leases compare them.

-- Settings that must never change once made, such as the key task ids are made with.
CREATE TABLE settings (
    name  TEXT PRIMARY KEY,
    value BYTEA NOT NULL
);

-- Accounts own API keys and tasks. `active_tasks` counts the tasks queued or running, moved by the
-- submit that inserts them and the statement that ends them, so the quota is checked in O(1)
-- under the account row's lock.
CREATE TABLE accounts (
    id             TEXT PRIMARY KEY,
    email          TEXT NOT NULL UNIQUE,
    plan           TEXT NOT NULL DEFAULT 'self-hosted',
    credits        BIGINT,
    total_images   BIGINT NOT NULL DEFAULT 0,
    active_tasks   BIGINT NOT NULL DEFAULT 0,
    signing_secret TEXT NOT NULL,
    created_at     BIGINT NOT NULL,
    created_seq    BIGINT GENERATED ALWAYS AS IDENTITY
);

-- API keys are stored only as SHA-256 hashes; `prefix` is the first characters, for listing.
CREATE TABLE api_keys (
    id           TEXT PRIMARY KEY,
    account_id   TEXT NOT NULL REFERENCES accounts(id),
    name         TEXT NOT NULL,
    prefix       TEXT NOT NULL,
    key_hash     BYTEA NOT NULL UNIQUE,
    created_at   BIGINT NOT NULL,
    last_used_at BIGINT,
    revoked_at   BIGINT,
    created_seq  BIGINT GENERATED ALWAYS AS IDENTITY
);

-- A task's public id is its `seq` encrypted (src/store/ids.rs); submits take their `seq`s from
-- this sequence before inserting, so that a batch knows its ids.
CREATE SEQUENCE task_seq;

CREATE TABLE tasks (
    seq              BIGINT PRIMARY KEY DEFAULT nextval('task_seq'),
    account_id       TEXT NOT NULL REFERENCES accounts(id),
    task_type        TEXT NOT NULL,
    status           TEXT NOT NULL,
    priority         BIGINT NOT NULL,
    prompt           TEXT NOT NULL,
    aspect_ratio     TEXT NOT NULL,
    process_mode     TEXT NOT NULL,
    seed             BIGINT NOT NULL,
    percentage       BIGINT NOT NULL DEFAULT 0,
    attempts         BIGINT NOT NULL DEFAULT 0,
    lease_owner      TEXT,
    lease_expires_at BIGINT,
    created_at       BIGINT NOT NULL,
    started_at       BIGINT,
    finished_at      BIGINT,
    grid_key         TEXT,
    image_keys       TEXT[],
    error            TEXT,
    webhook_url      TEXT,
    webhook_secret   TEXT
);
ALTER SEQUENCE task_seq OWNED BY tasks.seq;
CREATE INDEX tasks_queue ON tasks (priority, seq) WHERE status = 'pending';
CREATE INDEX tasks_leases ON tasks (lease_expires_at) WHERE status IN ('starting', 'processing');

-- The webhook outbox: one row per task with a webhook, written in the transaction that writes the
-- task's final state. `id` is the Standard Webhooks message id, stable across retries.
CREATE TABLE webhook_deliveries (
    id               TEXT PRIMARY KEY,
    task_seq         BIGINT NOT NULL UNIQUE REFERENCES tasks(seq),
    task_id          TEXT NOT NULL,
    account_id       TEXT NOT NULL REFERENCES accounts(id),
    url              TEXT NOT NULL,
    status           TEXT NOT NULL,
    attempts         BIGINT NOT NULL DEFAULT 0,
    next_attempt_at  BIGINT,
    first_failed_at  BIGINT,
    lease_until      BIGINT,
    last_status_code BIGINT,
    last_error       TEXT,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL,
    webhook_secret   TEXT
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';

-- Payloads apart from the delivery rows that every attempt rewrites (see SQLite's 0006).
CREATE TABLE webhook_payloads (
    task_seq BIGINT PRIMARY KEY REFERENCES webhook_deliveries(task_seq),
    payload  TEXT NOT NULL
);

-- One row per delivery attempt.
CREATE TABLE webhook_attempts (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    delivery_id     TEXT NOT NULL REFERENCES webhook_deliveries(id),
    attempted_at    BIGINT NOT NULL,
    duration_ms     BIGINT NOT NULL,
    status_code     BIGINT,
    error           TEXT,
    next_attempt_at BIGINT
);
CREATE INDEX webhook_attempts_by_delivery ON webhook_attempts (delivery_id);
