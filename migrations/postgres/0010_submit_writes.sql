-- What a submit writes besides its rows (issue 27): only what buys a query or a guarantee.
--
-- The references of the rows a submit inserts (its task and its ledger row) are not declared:
-- each declared one ran a trigger and a query per row. The code that writes them keeps them
-- instead: the submit's transaction holds each account's row locked (`FOR UPDATE`) while it
-- inserts for it, a follow-up's parent is read before it is named, the ledger row is written by
-- the statement that inserts its task (and a refund's by the transaction that ends it), and
-- neither accounts nor tasks are ever deleted.
ALTER TABLE tasks DROP CONSTRAINT tasks_account_id_fkey;
ALTER TABLE tasks DROP CONSTRAINT tasks_parent_seq_fkey;
ALTER TABLE credit_ledger DROP CONSTRAINT credit_ledger_account_id_fkey;
ALTER TABLE credit_ledger DROP CONSTRAINT credit_ledger_task_seq_fkey;

-- An account's tasks listed by status: the waiting ones are found by `tasks_account_turns`,
-- the running ones by `tasks_running_turns` (both a few rows, sorted), the finished ones, most
-- of an account's tasks, by `tasks_by_account` in order. Only the failed and the canceled need
-- an index of their own, and a task gets an entry only when it fails or is canceled, not at
-- submit nor at each change of its status.
DROP INDEX tasks_by_account_status;
CREATE INDEX tasks_by_account_outcome ON tasks (account_id, status, seq)
    WHERE status IN ('failed', 'canceled');

-- An account's tasks listed by type: `imagine`, the task every other one follows, is most of an
-- account's tasks and is found by `tasks_by_account` in order; only the other types need an
-- index, and an `imagine` submit writes no entry in it.
DROP INDEX tasks_by_account_type;
CREATE INDEX tasks_by_account_type ON tasks (account_id, task_type, seq)
    WHERE task_type <> 'imagine';
