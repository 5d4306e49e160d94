-- Every Midjourney operation, not only imagine (as migrations/sqlite/0008): the operation's typed
-- parameters as JSON (NULL for imagine), the parent task, and what a finished task produced
-- besides its image keys (the images' size, a text task's content, a seed).
ALTER TABLE tasks ADD COLUMN params TEXT;
ALTER TABLE tasks ADD COLUMN parent_seq BIGINT REFERENCES tasks(seq);
ALTER TABLE tasks ADD COLUMN result TEXT;
CREATE INDEX tasks_by_parent ON tasks (parent_seq) WHERE parent_seq IS NOT NULL;
