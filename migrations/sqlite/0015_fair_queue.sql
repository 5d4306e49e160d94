-- Fair sharing of the queue between accounts (docs/design.md, "The queue").
-- A pending task's turn: claims take the lowest (priority, turn, seq). A submit gives an
-- account's task the turn after its own newest waiting task of the same mode, but never one
-- behind the mode's head, so accounts with work take one turn each in rotation. Tasks queued
-- before this migration keep turn 0 and so their first-come order.
ALTER TABLE tasks ADD COLUMN turn INTEGER NOT NULL DEFAULT 0;
DROP INDEX tasks_queue;
CREATE INDEX tasks_queue ON tasks (priority, turn, seq) WHERE status = 'pending';

-- Each mode's head: the highest turn claimed so far. It only rises.
CREATE TABLE queue_heads (
    priority INTEGER PRIMARY KEY,
    turn     INTEGER NOT NULL
);
INSERT INTO queue_heads (priority, turn) VALUES (0, 0), (1, 0), (2, 0);

-- The tasks each account has started and not ended (`starting` or `processing`), for
-- `max_running_per_account`; moved by the triggers below on every change of status.
ALTER TABLE accounts ADD COLUMN running_tasks INTEGER NOT NULL DEFAULT 0;
UPDATE accounts SET running_tasks = (
    SELECT COUNT(*) FROM tasks
    WHERE tasks.account_id = accounts.id AND tasks.status IN ('starting', 'processing')
);

CREATE TRIGGER tasks_running_on_start AFTER UPDATE OF status ON tasks
WHEN NEW.status IN ('starting', 'processing')
 AND OLD.status NOT IN ('starting', 'processing')
BEGIN
    UPDATE accounts SET running_tasks = running_tasks + 1 WHERE id = NEW.account_id;
END;

CREATE TRIGGER tasks_running_on_stop AFTER UPDATE OF status ON tasks
WHEN OLD.status IN ('starting', 'processing')
 AND NEW.status NOT IN ('starting', 'processing')
BEGIN
    UPDATE accounts SET running_tasks = running_tasks - 1 WHERE id = NEW.account_id;
END;
