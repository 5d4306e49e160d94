-- Idempotency keys are swept by walking their primary key (`tasks::idempotency::forget_expired`),
-- not read from an index by expiry: that index was a second b-tree written by every keyed
-- submit, in the writer's transaction, for a sweep that runs every ten minutes (issue 51).
DROP INDEX idempotency_keys_by_expiry;
