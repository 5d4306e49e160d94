-- How many tasks each account has queued or running, kept by triggers so the pending-task quota
-- is checked in O(1) instead of counting the account's active tasks on every submit.
ALTER TABLE accounts ADD COLUMN active_tasks INTEGER NOT NULL DEFAULT 0;

UPDATE accounts SET active_tasks = (
    SELECT COUNT(*) FROM tasks
    WHERE tasks.account_id = accounts.id AND tasks.status IN ('pending', 'starting', 'processing')
);

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

-- The quota no longer counts rows, so this index only cost writes.
DROP INDEX tasks_active_by_account;
