-- Retention (as migrations/sqlite/0011): when a task's images were deleted from the blob store
-- (NULL while they are kept), and an index of the final tasks whose data is still there, in the
-- order the sweep reads them.
ALTER TABLE tasks ADD COLUMN data_removed_at BIGINT;
CREATE INDEX tasks_expiring ON tasks (finished_at, seq)
    WHERE finished_at IS NOT NULL AND data_removed_at IS NULL;
