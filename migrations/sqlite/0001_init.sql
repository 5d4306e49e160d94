-- Accounts own API keys and tasks. The signing secret keys the Standard Webhooks signatures.
CREATE TABLE accounts (
    id             TEXT PRIMARY KEY,
    email          TEXT NOT NULL UNIQUE,
    plan           TEXT NOT NULL DEFAULT 'self-hosted',
    credits        INTEGER,
    total_images   INTEGER NOT NULL DEFAULT 0,
    signing_secret TEXT NOT NULL,
    created_at     INTEGER NOT NULL
);

-- API keys are stored only as SHA-256 hashes; `prefix` is the first characters, for listing.
CREATE TABLE api_keys (
    id           TEXT PRIMARY KEY,
    account_id   TEXT NOT NULL REFERENCES accounts(id),
    name         TEXT NOT NULL,
    prefix       TEXT NOT NULL,
    key_hash     BLOB NOT NULL UNIQUE,
    created_at   INTEGER NOT NULL,
    last_used_at INTEGER,
    revoked_at   INTEGER
);

-- Times are Unix milliseconds. `seq` orders the queue within a priority (first come first served).
-- `attempts` counts claims; every change a worker makes is fenced by it.
CREATE TABLE tasks (
    seq                INTEGER PRIMARY KEY AUTOINCREMENT,
    id                 TEXT NOT NULL UNIQUE,
    account_id         TEXT NOT NULL REFERENCES accounts(id),
    task_type          TEXT NOT NULL,
    status             TEXT NOT NULL,
    priority           INTEGER NOT NULL,
    prompt             TEXT NOT NULL,
    aspect_ratio       TEXT NOT NULL,
    process_mode       TEXT NOT NULL,
    seed               INTEGER NOT NULL,
    percentage         INTEGER NOT NULL DEFAULT 0,
    attempts           INTEGER NOT NULL DEFAULT 0,
    lease_owner        TEXT,
    lease_expires_at   INTEGER,
    created_at         INTEGER NOT NULL,
    started_at         INTEGER,
    finished_at        INTEGER,
    original_image_url TEXT,
    image_urls         TEXT,
    error              TEXT,
    webhook_url        TEXT,
    webhook_secret     TEXT
);
CREATE INDEX tasks_queue ON tasks (priority, seq) WHERE status = 'pending';
CREATE INDEX tasks_leases ON tasks (lease_expires_at) WHERE status IN ('starting', 'processing');
CREATE INDEX tasks_active_by_account ON tasks (account_id) WHERE status IN ('pending', 'starting', 'processing');

-- The webhook outbox: one row per task with a webhook, written in the same transaction as the
-- task's final state. `id` is the Standard Webhooks message id, stable across retries.
CREATE TABLE webhook_deliveries (
    id               TEXT PRIMARY KEY,
    task_id          TEXT NOT NULL UNIQUE REFERENCES tasks(id),
    account_id       TEXT NOT NULL REFERENCES accounts(id),
    url              TEXT NOT NULL,
    payload          TEXT NOT NULL,
    status           TEXT NOT NULL,
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  INTEGER,
    first_failed_at  INTEGER,
    lease_until      INTEGER,
    last_status_code INTEGER,
    last_error       TEXT,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';

-- One row per delivery attempt.
CREATE TABLE webhook_attempts (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    delivery_id     TEXT NOT NULL REFERENCES webhook_deliveries(id),
    attempted_at    INTEGER NOT NULL,
    duration_ms     INTEGER NOT NULL,
    status_code     INTEGER,
    error           TEXT,
    next_attempt_at INTEGER
);
CREATE INDEX webhook_attempts_by_delivery ON webhook_attempts (delivery_id);
