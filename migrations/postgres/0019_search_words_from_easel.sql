-- The prompts' index holds the words easel cuts (issue 50): `search` becomes a plain column that
-- each submit fills with its task's lexemes (`store::sql::search::search_lexemes`: the prompt's
-- runs of letters and digits, lower-cased, as a search cuts its words, and `~` with the
-- account's id), instead of a column PostgreSQL generated with its text parser. The parser's
-- work on every submit cost more than the GIN index, on the database that every node shares;
-- and the words a search asks for are now cut exactly as the indexed ones were.
ALTER TABLE tasks DROP COLUMN search;
ALTER TABLE tasks ADD COLUMN search tsvector;

-- A task written without its lexemes (by a node of the release before this one during an
-- upgrade, or by hand) gets them from this function: the same cut, written in SQL, for words
-- of letters and digits as PostgreSQL's regular expressions classify them (close to easel's
-- for every script; the cut easel makes is the one that counts). Words over 200 characters
-- are left out, as easel leaves them out (no search holds one).
CREATE FUNCTION tasks_search_lexemes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.search := array_to_tsvector(ARRAY(
        SELECT DISTINCT w FROM unnest(regexp_split_to_array(lower(NEW.prompt), '[^[:alnum:]]+')) w
        WHERE w <> '' AND char_length(w) <= 200
    ) || ARRAY['~' || NEW.account_id]);
    RETURN NEW;
END
$$;

CREATE TRIGGER tasks_search_when_missing BEFORE INSERT ON tasks
    FOR EACH ROW WHEN (NEW.search IS NULL) EXECUTE FUNCTION tasks_search_lexemes();
CREATE TRIGGER tasks_search_on_change BEFORE UPDATE OF prompt, account_id ON tasks
    FOR EACH ROW EXECUTE FUNCTION tasks_search_lexemes();

-- The tasks stored before (the table is rewritten once, under its lock).
UPDATE tasks SET prompt = prompt;
CREATE INDEX tasks_search ON tasks USING gin (search);
