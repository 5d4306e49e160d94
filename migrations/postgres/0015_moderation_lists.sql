-- Moderation term lists, managed while easel runs (easel moderation, the admin API and page).
-- `terms` is a JSON array of strings; `updated_at` (ms) lets every node see a change.
CREATE TABLE moderation_lists (
    name TEXT PRIMARY KEY,
    terms TEXT NOT NULL,
    updated_at BIGINT NOT NULL
);
