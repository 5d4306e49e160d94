-- The submit transaction now moves `accounts.active_tasks` itself, once per account and batch
-- (see `InsertTask` in src/store/tasks.rs): the per-row trigger cost about a fifth of a
-- submit's time in SQLite. Tasks are inserted nowhere else. Ending a task still moves the
-- counter by trigger (`tasks_active_on_end`), one task at a time as workers end them.
DROP TRIGGER tasks_active_on_insert;
