-- Every change of a task's stored state gives it a new version, from the sequence its `seq`
-- comes from (task_seq): a Server-Sent Events stream resumes from a version. NULL until the
-- first change after submit (the version is then `seq`), so that a submit writes no index entry
-- for it.
ALTER TABLE tasks ADD COLUMN event_seq BIGINT;
-- The latest preview of a running task's image (a blob key), removed when the task ends.
ALTER TABLE tasks ADD COLUMN preview_key TEXT;
CREATE INDEX tasks_events ON tasks (account_id, event_seq) WHERE event_seq IS NOT NULL;
