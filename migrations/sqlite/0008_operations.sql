-- Every Midjourney operation, not only imagine. What varies between them is kept as data, not
-- columns: `params` holds the operation's typed parameters as JSON (NULL for imagine, whose rows
-- predate operations), `parent_seq` the task it follows up, and `result` what a finished task
-- produced besides its image keys (the images' size, a text task's content, a seed). Rows
-- written so far are imagine tasks and stay valid as they are.
ALTER TABLE tasks ADD COLUMN params TEXT;
ALTER TABLE tasks ADD COLUMN parent_seq INTEGER REFERENCES tasks(seq);
ALTER TABLE tasks ADD COLUMN result TEXT;
CREATE INDEX tasks_by_parent ON tasks (parent_seq) WHERE parent_seq IS NOT NULL;
