-- As migrations/sqlite/0028: idempotency keys are swept by walking their primary key
-- (`tasks::idempotency::forget_expired`), not read from an index by expiry, which was a second
-- b-tree written by every keyed submit for a sweep that runs every ten minutes (issue 51).
DROP INDEX idempotency_keys_by_expiry;
