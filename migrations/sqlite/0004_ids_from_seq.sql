-- A task's public id is now its `seq` encrypted with a key kept here (src/store/ids.rs), so
-- tasks need no index on a random id: that index took one page write per submitted task. New
-- tasks leave `tasks.id` NULL; tasks stored before keep the id they were given, indexed on its
-- own. Webhook deliveries point at their task by `seq`, for the same reason.
--
-- SQLite cannot drop a column's UNIQUE constraint, so the three tables whose keys change are
-- rebuilt: the old ones are renamed aside, copied into new ones and dropped, children before
-- parents, so that no foreign key is ever left dangling.

CREATE TABLE settings (
    name  TEXT PRIMARY KEY,
    value BLOB NOT NULL
) WITHOUT ROWID;

DROP TRIGGER tasks_active_on_insert;
DROP TRIGGER tasks_active_on_end;
DROP INDEX tasks_queue;
DROP INDEX tasks_leases;
DROP INDEX webhook_deliveries_due;
DROP INDEX webhook_attempts_by_delivery;

ALTER TABLE webhook_attempts RENAME TO webhook_attempts_0003;
ALTER TABLE webhook_deliveries RENAME TO webhook_deliveries_0003;
ALTER TABLE tasks RENAME TO tasks_0003;

-- Times are Unix milliseconds. `seq` orders the queue within a priority (first come first served)
-- and is what the public id is made from. `attempts` counts claims; every change a worker makes
-- is fenced by it.
CREATE TABLE tasks (
    seq                INTEGER PRIMARY KEY AUTOINCREMENT,
    id                 TEXT,
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
INSERT INTO tasks SELECT * FROM tasks_0003;
CREATE UNIQUE INDEX tasks_legacy_id ON tasks (id) WHERE id IS NOT NULL;
-- Keep the counter where it was, so that no `seq` (and so no id) is ever given twice.
DELETE FROM sqlite_sequence WHERE name = 'tasks';
UPDATE sqlite_sequence SET name = 'tasks' WHERE name = 'tasks_0003';

-- `task_id` is kept for reading (the public id); joins and lookups go by `task_seq`.
CREATE TABLE webhook_deliveries (
    id               TEXT PRIMARY KEY,
    task_seq         INTEGER NOT NULL UNIQUE REFERENCES tasks(seq),
    task_id          TEXT NOT NULL,
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
    updated_at       INTEGER NOT NULL,
    webhook_secret   TEXT
);
INSERT INTO webhook_deliveries (id, task_seq, task_id, account_id, url, payload, status, attempts,
    next_attempt_at, first_failed_at, lease_until, last_status_code, last_error, created_at,
    updated_at, webhook_secret)
SELECT d.id, t.seq, d.task_id, d.account_id, d.url, d.payload, d.status, d.attempts,
    d.next_attempt_at, d.first_failed_at, d.lease_until, d.last_status_code, d.last_error,
    d.created_at, d.updated_at, d.webhook_secret
FROM webhook_deliveries_0003 d JOIN tasks t ON t.id = d.task_id;

CREATE TABLE webhook_attempts (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    delivery_id     TEXT NOT NULL REFERENCES webhook_deliveries(id),
    attempted_at    INTEGER NOT NULL,
    duration_ms     INTEGER NOT NULL,
    status_code     INTEGER,
    error           TEXT,
    next_attempt_at INTEGER
);
INSERT INTO webhook_attempts SELECT * FROM webhook_attempts_0003;
DELETE FROM sqlite_sequence WHERE name = 'webhook_attempts';
UPDATE sqlite_sequence SET name = 'webhook_attempts' WHERE name = 'webhook_attempts_0003';

DROP TABLE webhook_attempts_0003;
DROP TABLE webhook_deliveries_0003;
DROP TABLE tasks_0003;

CREATE INDEX tasks_queue ON tasks (priority, seq) WHERE status = 'pending';
CREATE INDEX tasks_leases ON tasks (lease_expires_at) WHERE status IN ('starting', 'processing');
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_attempts_by_delivery ON webhook_attempts (delivery_id);

CREATE TRIGGER tasks_active_on_insert AFTER INSERT ON tasks
WHEN NEW.status IN ('pending', 'starting', 'processing')
BEGIN
    UPDATE accounts SET active_tasks = active_tasks + 1 WHERE id = NEW.account_id;
END;

CREATE TRIGGER tasks_active_on_end AFTER UPDATE OF status ON tasks
WHEN OLD.status IN ('pending', 'starting', 'processing')
 AND NEW.status NOT IN ('pending', 'starting', 'processing')
BEGIN
    UPDATE accounts SET active_tasks = active_tasks - 1 WHERE id = NEW.account_id;
END;
