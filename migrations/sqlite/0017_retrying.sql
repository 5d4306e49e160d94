-- A running task whose backend failed in a way that may pass (it went down, it timed out) says
-- so while it waits to be tried again (issue 52): the attempt that failed and its error, written
-- by the worker's heartbeat, cleared when a backend takes the task again and at every claim.
ALTER TABLE tasks ADD COLUMN retry_attempt INTEGER;
ALTER TABLE tasks ADD COLUMN retry_error TEXT;
