-- Fair sharing of the queue between accounts (docs/design.md, "The queue").
-- A pending task's turn: claims take the lowest (priority, turn, seq). A submit gives an
-- account's task the turn after the account's own newest waiting task's in that mode, but never
-- one behind the mode's head, so accounts with work take one turn each in rotation. Tasks
-- queued before this migration keep turn 0 and so their first-come order. (The heads are kept
-- by the writer, the one process that claims; an account's newest waiting task is found in
-- `tasks_by_account_status`.)
ALTER TABLE tasks ADD COLUMN turn INTEGER NOT NULL DEFAULT 0;
DROP INDEX tasks_queue;
CREATE INDEX tasks_queue ON tasks (priority, turn, seq) WHERE status = 'pending';
