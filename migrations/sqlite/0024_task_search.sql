-- Full-text search over prompts (issue 50): `GET /api/v1/tasks?q=` and the gallery's `Search
-- prompts`. One row per task, its rowid the task's `seq`, kept by the triggers below in the same
-- transaction as the task's own write. Contentless: the prompts stay in `tasks` alone, and a
-- removal names the values it indexed (the delete trigger passes them).
-- `owner` holds the account's id without its hyphens (one token), so that a search ANDs the
-- account into the match and reads only the account's entries, however many other accounts use
-- the same words. The listing still compares `tasks.account_id`: the token only narrows.
CREATE VIRTUAL TABLE tasks_search USING fts5(
    prompt, owner, content = '', tokenize = 'unicode61 remove_diacritics 2'
);

CREATE TRIGGER tasks_search_on_insert AFTER INSERT ON tasks
BEGIN
    INSERT INTO tasks_search (rowid, prompt, owner)
    VALUES (NEW.seq, NEW.prompt, replace(NEW.account_id, '-', ''));
END;

CREATE TRIGGER tasks_search_on_delete AFTER DELETE ON tasks
BEGIN
    INSERT INTO tasks_search (tasks_search, rowid, prompt, owner)
    VALUES ('delete', OLD.seq, OLD.prompt, replace(OLD.account_id, '-', ''));
END;

CREATE TRIGGER tasks_search_on_update AFTER UPDATE OF prompt, account_id ON tasks
BEGIN
    INSERT INTO tasks_search (tasks_search, rowid, prompt, owner)
    VALUES ('delete', OLD.seq, OLD.prompt, replace(OLD.account_id, '-', ''));
    INSERT INTO tasks_search (rowid, prompt, owner)
    VALUES (NEW.seq, NEW.prompt, replace(NEW.account_id, '-', ''));
END;

-- The tasks stored before this migration.
INSERT INTO tasks_search (rowid, prompt, owner)
SELECT seq, prompt, replace(account_id, '-', '') FROM tasks;
