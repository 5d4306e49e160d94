-- The account webhook (PUT /api/v1/account/webhook): one per account. `events` is the list of
-- event names it takes, comma-separated; `credits_low_threshold` is set when it takes
-- `credits.low`, and a charge that takes the balance from at or over it to under it queues one.
CREATE TABLE account_webhooks (
    account_id            TEXT PRIMARY KEY REFERENCES accounts(id),
    url                   TEXT NOT NULL,
    secret                TEXT,
    events                TEXT NOT NULL,
    credits_low_threshold INTEGER,
    created_at            INTEGER NOT NULL,
    updated_at            INTEGER NOT NULL
);

-- The account events that belong to no task (`credits.low`), queued in the transaction that
-- charged the credits and sent by the same dispatcher, retries and signatures as task webhooks.
-- (An account webhook's `task.finished`/`task.failed` are the task's own delivery, in
-- webhook_deliveries.)
CREATE TABLE account_deliveries (
    id               TEXT PRIMARY KEY,
    account_id       TEXT NOT NULL REFERENCES accounts(id),
    event            TEXT NOT NULL,
    url              TEXT NOT NULL,
    webhook_secret   TEXT,
    payload          TEXT NOT NULL,
    status           TEXT NOT NULL,
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  INTEGER,
    first_failed_at  INTEGER,
    lease_until      INTEGER,
    -- The claim that holds the lease, so a claim reads back the rows it took.
    claimed_by       TEXT,
    last_status_code INTEGER,
    last_error       TEXT,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL
);
CREATE INDEX account_deliveries_due ON account_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX account_deliveries_by_account ON account_deliveries (account_id, id);
CREATE INDEX account_deliveries_claims ON account_deliveries (claimed_by) WHERE status = 'pending';
