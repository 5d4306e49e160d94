-- Cost and usage of each task (issue 47): the key it was submitted with, and what it used, written
-- by the statement that records its end; and the rollup `GET /api/v1/usage` reads, one row per
-- account, UTC day of the end, model and key, moved in the same transaction as each end.

-- The key the task was submitted with (NULL for tasks stored before this migration).
ALTER TABLE tasks ADD COLUMN key_id TEXT;
-- Set when a task finishes or fails: the backend that answered last (NULL when none did), the
-- model (NULL when the task ran on none), how long it held a backend's slot (ms), its images and
-- their pixels. `cost` (migration 0009) becomes the net charge once a refund is written.
ALTER TABLE tasks ADD COLUMN usage_backend TEXT;
ALTER TABLE tasks ADD COLUMN usage_model TEXT;
ALTER TABLE tasks ADD COLUMN backend_ms INTEGER;
ALTER TABLE tasks ADD COLUMN usage_images INTEGER;
ALTER TABLE tasks ADD COLUMN usage_pixels INTEGER;

-- `model` and `key_id` are '' when the task had none, so that the key stays one value.
CREATE TABLE usage_daily (
    account_id TEXT NOT NULL,
    day        INTEGER NOT NULL,
    model      TEXT NOT NULL,
    key_id     TEXT NOT NULL,
    tasks      INTEGER NOT NULL,
    images     INTEGER NOT NULL,
    pixels     INTEGER NOT NULL,
    backend_ms INTEGER NOT NULL,
    cost       INTEGER NOT NULL,
    PRIMARY KEY (account_id, day, model, key_id)
) WITHOUT ROWID;
-- Every account's usage over a range (admin keys).
CREATE INDEX usage_daily_by_day ON usage_daily (day);
