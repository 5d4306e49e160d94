-- Retention: when a task's images were deleted from the blob store (NULL while they are kept).
-- The sweep asks for the oldest final tasks whose data is still there; the partial index holds
-- exactly those, ordered as the sweep reads them, and loses each task's entry once it is swept.
ALTER TABLE tasks ADD COLUMN data_removed_at INTEGER;
CREATE INDEX tasks_expiring ON tasks (finished_at)
    WHERE finished_at IS NOT NULL AND data_removed_at IS NULL;
