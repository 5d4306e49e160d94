-- Fair sharing of the queue between accounts (docs/design.md, "The queue").
-- A pending task's turn: claims take the lowest (priority, turn, seq). A submit gives an
-- account's task the turn after the account's own highest waiting turn in that mode, but never
-- one behind the mode's head, so accounts with work take one turn each in rotation. Tasks
-- queued before this migration keep turn 0 and so their first-come order.
ALTER TABLE tasks ADD COLUMN turn INTEGER NOT NULL DEFAULT 0;
DROP INDEX tasks_queue;
CREATE INDEX tasks_queue ON tasks (priority, turn, seq) WHERE status = 'pending';
-- An account's highest waiting turn in a mode, for its next submit.
CREATE INDEX tasks_account_turns ON tasks (account_id, priority, turn) WHERE status = 'pending';
-- The highest turn running in a mode: with the queue's lowest, the mode's head.
CREATE INDEX tasks_running_turns ON tasks (priority, turn)
    WHERE status IN ('starting', 'processing');
