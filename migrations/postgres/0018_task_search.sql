-- Full-text search over prompts (issue 50): `GET /api/v1/tasks?q=` and the gallery's `Search
-- prompts`. Each task's prompt as words ('simple': lower-cased, no stemming and no stop words,
-- so that every word typed must be found as typed), kept by PostgreSQL itself on every write of
-- the prompt, and a GIN index over them. Adding the column computes it for the tasks already
-- stored (the table is rewritten once, under its lock).
ALTER TABLE tasks ADD COLUMN search tsvector
    GENERATED ALWAYS AS (to_tsvector('simple', prompt)) STORED;
CREATE INDEX tasks_search ON tasks USING gin (search);
