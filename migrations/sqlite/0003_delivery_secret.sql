-- The value for a delivery's `x-webhook-secret` header moves from the task to its delivery when
-- the task ends, so that claiming deliveries reads the deliveries alone: looking each one's task
-- up by its random v4 id cost a page read per delivery (in `bench/run --quick --only webhooks`,
-- the store alone drained 10,700 to 11,900 deliveries a second with the lookup, 14,100 to 14,800
-- without, sync=full). One copy is kept: the task's is cleared.
ALTER TABLE webhook_deliveries ADD COLUMN webhook_secret TEXT;

UPDATE webhook_deliveries SET webhook_secret = t.webhook_secret
FROM tasks t
WHERE t.id = webhook_deliveries.task_id AND t.webhook_secret IS NOT NULL;

UPDATE tasks SET webhook_secret = NULL
WHERE webhook_secret IS NOT NULL AND id IN (SELECT task_id FROM webhook_deliveries);
