-- Full-text search over prompts (issue 50): `GET /api/v1/tasks?q=` and the gallery's `Search
-- prompts`. Each task's prompt as words ('simple': lower-cased, no stemming and no stop words,
-- so that every word typed must be found as typed), and one lexeme more, `~` and the account's
-- id (no word of a prompt starts with `~`), so that the GIN index can AND the account into a
-- search and read only the account's entries of a word however many other accounts use it.
-- Kept by PostgreSQL itself on every write of the row, with a GIN index over it. Adding the
-- column computes it for the tasks already stored (the table is rewritten once, under its
-- lock). A search still compares `account_id`: the lexeme only narrows.
ALTER TABLE tasks ADD COLUMN search tsvector
    GENERATED ALWAYS AS (
        to_tsvector('simple', prompt) || array_to_tsvector(ARRAY['~' || account_id])
    ) STORED;
CREATE INDEX tasks_search ON tasks USING gin (search);
