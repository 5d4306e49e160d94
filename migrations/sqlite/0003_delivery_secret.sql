-- The value for a delivery's `x-webhook-secret` header moves from the task to its delivery when
-- the task ends, so that claiming deliveries reads the deliveries alone: looking each one's task
-- up by its random v4 id cost a page read per delivery (the benchmark's store alone, sync=full,
-- `easel_bench --quick --only webhooks --webhook-deliveries 20000`, two builds run alternately:
-- 11,897, 12,975 and 12,961 deliveries a second with the lookup, 13,487, 16,083 and 15,030
-- without). One copy is kept: the task's is cleared.
ALTER TABLE webhook_deliveries ADD COLUMN webhook_secret TEXT;

UPDATE webhook_deliveries SET webhook_secret = t.webhook_secret
FROM tasks t
WHERE t.id = webhook_deliveries.task_id AND t.webhook_secret IS NOT NULL;

UPDATE tasks SET webhook_secret = NULL
WHERE webhook_secret IS NOT NULL AND id IN (SELECT task_id FROM webhook_deliveries);
