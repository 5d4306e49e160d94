-- An account's tasks listed by type: `imagine`, the task every other one follows, is most of an
-- account's tasks and is found by `tasks_by_account` in order; only the other types need an
-- index, and an `imagine` submit writes no entry in it (issue 27). A listing by another type
-- repeats this condition word for word, which is how SQLite's planner knows it may use it.
DROP INDEX tasks_by_account_type;
CREATE INDEX tasks_by_account_type ON tasks (account_id, task_type, seq)
    WHERE task_type <> 'imagine';
