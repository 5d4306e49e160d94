-- Cost and usage of each task (as migrations/sqlite/0022): the key it was submitted with, what
-- it used, and the per account, day, model and key rollup that `GET /api/v1/usage` reads.
ALTER TABLE tasks ADD COLUMN key_id TEXT;
ALTER TABLE tasks ADD COLUMN usage_backend TEXT;
ALTER TABLE tasks ADD COLUMN usage_model TEXT;
ALTER TABLE tasks ADD COLUMN backend_ms BIGINT;
ALTER TABLE tasks ADD COLUMN usage_images BIGINT;
ALTER TABLE tasks ADD COLUMN usage_pixels BIGINT;

CREATE TABLE usage_daily (
    account_id TEXT NOT NULL,
    day        BIGINT NOT NULL,
    model      TEXT NOT NULL,
    key_id     TEXT NOT NULL,
    tasks      BIGINT NOT NULL,
    images     BIGINT NOT NULL,
    pixels     BIGINT NOT NULL,
    backend_ms BIGINT NOT NULL,
    cost       BIGINT NOT NULL,
    PRIMARY KEY (account_id, day, model, key_id)
);
CREATE INDEX usage_daily_by_day ON usage_daily (day);
