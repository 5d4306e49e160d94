-- The prompts' index is filled behind the writer, not in the submit's transaction (issue 50):
-- a trigger row per submit cost a durable submit about a quarter more of the server's CPU, where
-- the same rows indexed a batch at a time cost a small part of that (docs/benchmarks.md,
-- "Search"). `tasks_search_done.seq` is the highest `seq` indexed: every task at or below it is
-- in `tasks_search`, none above. The store's indexer moves it (`store/sqlite/search_index.rs`),
-- and a search first indexes whatever is above it, so a search still finds every task stored
-- before it. `seq`s only grow (the writer takes them in order), so nothing is stored below it.
DROP TRIGGER tasks_search_on_insert;

CREATE TABLE tasks_search_done (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    seq INTEGER NOT NULL
);
INSERT INTO tasks_search_done (one, seq) VALUES (1, COALESCE((SELECT max(seq) FROM tasks), 0));

-- A removal or a change reaches the index only for a task in it: a contentless table's
-- 'delete' of a row it never held would corrupt its lists. Above the mark, the indexer reads
-- the task as it is when it gets there.
DROP TRIGGER tasks_search_on_delete;
CREATE TRIGGER tasks_search_on_delete AFTER DELETE ON tasks
WHEN OLD.seq <= (SELECT seq FROM tasks_search_done)
BEGIN
    INSERT INTO tasks_search (tasks_search, rowid, prompt, owner)
    VALUES ('delete', OLD.seq, OLD.prompt, replace(OLD.account_id, '-', ''));
END;

DROP TRIGGER tasks_search_on_update;
CREATE TRIGGER tasks_search_on_update AFTER UPDATE OF prompt, account_id ON tasks
WHEN OLD.seq <= (SELECT seq FROM tasks_search_done)
BEGIN
    INSERT INTO tasks_search (tasks_search, rowid, prompt, owner)
    VALUES ('delete', OLD.seq, OLD.prompt, replace(OLD.account_id, '-', ''));
    INSERT INTO tasks_search (rowid, prompt, owner)
    VALUES (NEW.seq, NEW.prompt, replace(NEW.account_id, '-', ''));
END;
