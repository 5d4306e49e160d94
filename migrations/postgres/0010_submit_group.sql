-- A group of submits stored by one call, when every submit in it is let in (the common case):
-- the call is one statement that its own implicit transaction commits, so the accounts' rows
-- stay locked for the statement and its commit's flush, with no round trip to easel between.
-- When any submit would be refused (a key not live, the quota, the balance), nothing is written
-- and no row is returned: easel then stores the group in its own transaction, deciding each
-- submit in turn (src/store/postgres/submit.rs). Groups with idempotency keys go there directly.
--
-- The decision here is that of store::Quota::admit for a group that it admits whole: a submit is
-- let in while its account's active tasks plus those admitted before it in the group are below
-- its key's max_active, and the account's balance (NULL: unlimited) covers the costs of the
-- account's submits up to and including it. The turns are those of store::queue::next_turn.
--
-- VOLATILE (the default): each statement below takes a fresh snapshot, so the reads after the
-- lock see what a group that held it before committed.
CREATE FUNCTION easel_submit_group(
    p_key_hash bytea[], p_max_active bigint[], p_cost bigint[], p_priority bigint[],
    p_task_type text[], p_prompt text[], p_aspect_ratio text[], p_process_mode text[],
    p_seed bigint[], p_webhook_url text[], p_webhook_secret text[], p_params text[],
    p_parent_seq bigint[], p_extras text[], p_now bigint, p_touch_every bigint,
    p_note_max integer)
RETURNS TABLE (queued_seq bigint, queued_account text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    -- In id order, as the group transaction locks them, so that the two never wait in a cycle.
    PERFORM 1 FROM accounts a
    WHERE a.id IN (SELECT k.account_id FROM api_keys k
                   WHERE k.key_hash = ANY(p_key_hash) AND k.revoked_at IS NULL)
      AND NOT a.disabled
    ORDER BY a.id
    FOR UPDATE;

    IF EXISTS (
        SELECT 1
        FROM (SELECT a.id, a.active_tasks, a.credits, j.max_active,
                     row_number() OVER w - 1 AS before,
                     sum(j.cost) OVER w AS costs
              FROM unnest(p_key_hash, p_max_active, p_cost) WITH ORDINALITY
                   AS j(key_hash, max_active, cost, i)
              LEFT JOIN api_keys k ON k.key_hash = j.key_hash AND k.revoked_at IS NULL
              LEFT JOIN accounts a ON a.id = k.account_id AND NOT a.disabled
              WINDOW w AS (PARTITION BY a.id ORDER BY j.i)) d
        WHERE d.id IS NULL
           OR d.active_tasks + d.before >= d.max_active
           OR d.credits < d.costs)
    THEN
        RETURN;
    END IF;

    RETURN QUERY
    WITH jobs AS (
        SELECT j.*, k.account_id AS account, a.credits IS NOT NULL AS metered
        FROM unnest(p_key_hash, p_cost, p_priority, p_task_type, p_prompt, p_aspect_ratio,
                    p_process_mode, p_seed, p_webhook_url, p_webhook_secret, p_params,
                    p_parent_seq, p_extras) WITH ORDINALITY
             AS j(key_hash, cost, priority, task_type, prompt, aspect_ratio, process_mode, seed,
                  webhook_url, webhook_secret, params, parent_seq, extras, i)
        JOIN api_keys k ON k.key_hash = j.key_hash AND k.revoked_at IS NULL
        JOIN accounts a ON a.id = k.account_id),
    -- Drawn in the group's order, as easel draws them for the group transaction.
    seqs AS (
        SELECT o.i, nextval('task_seq') AS seq FROM (SELECT i FROM jobs ORDER BY i OFFSET 0) o),
    -- Where each account's next task of each mode stands in line: after its own newest waiting
    -- task there, never behind the mode's head (store::queue).
    lines AS (
        SELECT d.account, d.priority,
               GREATEST(COALESCE((SELECT t.turn + 1 FROM tasks t
                                  WHERE t.account_id = d.account AND t.status = 'pending'
                                    AND t.priority = d.priority
                                  ORDER BY t.turn DESC LIMIT 1), h.at), h.at) AS start
        FROM (SELECT DISTINCT account, priority FROM jobs) d,
        LATERAL (SELECT GREATEST(
                     COALESCE((SELECT t.turn FROM tasks t
                               WHERE t.status IN ('starting', 'processing')
                                 AND t.priority = d.priority
                               ORDER BY t.turn DESC LIMIT 1), 0),
                     COALESCE((SELECT t.turn FROM tasks t
                               WHERE t.status = 'pending' AND t.priority = d.priority
                               ORDER BY t.turn LIMIT 1), 0)) AS at) h),
    queued AS (
        SELECT j.*, s.seq, CASE WHEN j.metered THEN j.cost ELSE 0 END AS charged,
               l.start + row_number() OVER (PARTITION BY j.account, j.priority ORDER BY j.i) - 1
                   AS turn
        FROM jobs j
        JOIN seqs s ON s.i = j.i
        JOIN lines l ON l.account = j.account AND l.priority = j.priority),
    inserted AS (
        INSERT INTO tasks (seq, account_id, task_type, params, parent_seq, status, priority,
            prompt, aspect_ratio, process_mode, seed, created_at, webhook_url, webhook_secret,
            cost, extras, turn)
        SELECT q.seq, q.account, q.task_type, q.params, q.parent_seq, 'pending', q.priority,
            q.prompt, q.aspect_ratio, q.process_mode, q.seed, p_now, q.webhook_url,
            q.webhook_secret, q.charged, q.extras, q.turn
        FROM queued q
        RETURNING 1),
    ledgered AS (
        INSERT INTO credit_ledger (account_id, task_seq, delta, reason, created_at)
        SELECT q.account, q.seq, -q.charged, 'submit', p_now FROM queued q WHERE q.charged > 0
        RETURNING 1),
    counted AS (
        UPDATE accounts SET active_tasks = active_tasks + d.n, credits = credits - d.c
        FROM (SELECT q.account, count(*) AS n, sum(q.charged) AS c
              FROM queued q GROUP BY q.account) d
        WHERE accounts.id = d.account
        RETURNING 1),
    used AS (
        UPDATE api_keys SET last_used_at = p_now
        WHERE key_hash = ANY(p_key_hash) AND revoked_at IS NULL
          AND (last_used_at IS NULL OR last_used_at <= p_now - p_touch_every)
        RETURNING 1),
    -- The queue's note (src/store/postgres/channels.rs): each account with its first seq, or
    -- empty when too long (every listener looks).
    notified AS (
        SELECT pg_notify('easel_queue', CASE WHEN length(n.note) > p_note_max THEN ''
                                             ELSE n.note END)
        FROM (SELECT string_agg(f.account || ' ' || f.first, ';') AS note
              FROM (SELECT q.account, min(q.seq) AS first FROM queued q GROUP BY q.account) f) n)
    SELECT q.seq, q.account FROM queued q, notified ORDER BY q.i;
END
$$;
