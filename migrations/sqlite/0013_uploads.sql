-- Images callers uploaded (POST /api/v1/upload, or a data: URL in an image field), kept until
-- `expires_at`; the file is the blob at `blob_key`, which names the account.
CREATE TABLE uploads (
    id           TEXT PRIMARY KEY,
    account_id   TEXT NOT NULL REFERENCES accounts(id),
    blob_key     TEXT NOT NULL UNIQUE,
    content_type TEXT NOT NULL,
    byte_size    INTEGER NOT NULL,
    width        INTEGER NOT NULL,
    height       INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL
);
CREATE INDEX uploads_expiring ON uploads (expires_at);

-- Bytes each account uploaded per UTC day (day = Unix days), under `max_upload_bytes_per_day`:
-- kept apart from the uploads so that removing an expired upload gives no bytes back.
CREATE TABLE upload_days (
    account_id TEXT NOT NULL REFERENCES accounts(id),
    day        INTEGER NOT NULL,
    bytes      INTEGER NOT NULL,
    PRIMARY KEY (account_id, day)
) WITHOUT ROWID;
