-- (As migrations/sqlite/0013.) Images callers uploaded (POST /api/v1/upload, or a data: URL in
-- an image field), kept until `expires_at`; the file is the blob at `blob_key`, which names the
-- account.
CREATE TABLE uploads (
    id           TEXT PRIMARY KEY,
    account_id   TEXT NOT NULL REFERENCES accounts(id),
    blob_key     TEXT NOT NULL UNIQUE,
    content_type TEXT NOT NULL,
    byte_size    BIGINT NOT NULL,
    width        BIGINT NOT NULL,
    height       BIGINT NOT NULL,
    created_at   BIGINT NOT NULL,
    expires_at   BIGINT NOT NULL
);
CREATE INDEX uploads_expiring ON uploads (expires_at);

-- Bytes each account uploaded per UTC day (day = Unix days), under `max_upload_bytes_per_day`:
-- kept apart from the uploads so that removing an expired upload gives no bytes back.
CREATE TABLE upload_days (
    account_id TEXT NOT NULL REFERENCES accounts(id),
    day        BIGINT NOT NULL,
    bytes      BIGINT NOT NULL,
    PRIMARY KEY (account_id, day)
);
