-- Webhook payloads move to a table of their own. A delivery's row is written twice for every
-- attempt (the claim's lease, then the attempt's record), and the payload, which never changes,
-- was most of its size: about 5 rows fitted in a 4 KiB page, so every attempt wrote most of a
-- page to the WAL twice, and again into the database at the next checkpoint. Without it a row
-- takes about 200 bytes. Payloads are keyed by their task's `seq`, like the deliveries, and are
-- written once, when the task ends, and read when a delivery is claimed.
CREATE TABLE webhook_payloads (
    task_seq INTEGER PRIMARY KEY REFERENCES webhook_deliveries(task_seq),
    payload  TEXT NOT NULL
);
INSERT INTO webhook_payloads (task_seq, payload) SELECT task_seq, payload FROM webhook_deliveries;
ALTER TABLE webhook_deliveries DROP COLUMN payload;
