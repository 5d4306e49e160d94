-- A task's extras (prompt parameters, settings, the caller's metadata: up to some kilobytes)
-- move out of its row in `tasks` into a table of their own, written once at submit (issue 51).
-- In the row they made it overflow a page: every later update of the task (the claim, the
-- start, each progress report, the ending) rewrote the overflow page as well, four pages of
-- write-ahead log per update where the row alone takes one (docs/benchmarks.md, "Extras apart
-- from the queue's row"). NULL extras stay absent: a plain submit writes no row here.
CREATE TABLE task_extras (
    seq    INTEGER PRIMARY KEY REFERENCES tasks (seq) ON DELETE CASCADE,
    extras TEXT    NOT NULL
);
INSERT INTO task_extras (seq, extras) SELECT seq, extras FROM tasks WHERE extras IS NOT NULL;
ALTER TABLE tasks DROP COLUMN extras;
