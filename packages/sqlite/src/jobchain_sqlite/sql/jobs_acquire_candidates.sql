-- jobs_acquire_candidates: what a claim with priorities, limits or pauses chooses from (the
-- plain claim, jobs_acquire, serves the others). One read; the adapter picks the jobs
-- (claims.py) and jobs_acquire_ids claims them, under the write lock this transaction holds.
-- :types is a JSON array of [type_name, max_running, rate_limit, rate window start] (NULL:
-- no such limit); paused types are left out. Rows:
--   kind 'type': per type not paused, running_left = max_running - its running jobs
--     (expired leases included), rate_left = rate_limit - the claims counted in its current
--     window (type_control; another window's count is 0), NULL for no such limit;
--   kind 'job': per type with room, the union (with repeats) of three index-ordered prefixes
--     of :k due pending jobs each (JobsAcquire's candidate sets):
--     C1 job_acquisition_idx in FIFO order (scheduled_at, created_at, id), priority >= 0 or
--        aged (scheduled_at <= :aged_before);
--     C2 / C3 job_priority_idx: priority > 0 / < 0 by priority DESC, then FIFO order.
-- The true first :k of a type in claim order is inside that union (JobsAcquire docstring).
WITH t(type_name, max_running, rate_limit, window_start) AS (
    SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'),
           json_extract(value, '$[3]')
    FROM json_each(:types)
    WHERE json_extract(value, '$[0]') NOT IN (
        SELECT c.type_name FROM {p}type_control c WHERE c.paused_at IS NOT NULL
    )
),
info(type_name, running_left, rate_left) AS MATERIALIZED (
    SELECT t.type_name,
        CASE WHEN t.max_running IS NOT NULL THEN t.max_running - (
            SELECT COUNT(*) FROM {p}job r INDEXED BY {p}job_expired_lease_idx
            WHERE r.status = 'running' AND r.leased_until IS NOT NULL AND r.type_name = t.type_name
        ) END,
        CASE WHEN t.rate_limit IS NOT NULL THEN t.rate_limit - COALESCE((
            SELECT c.rate_window_count FROM {p}type_control c
            WHERE c.type_name = t.type_name AND c.rate_window_start = t.window_start
        ), 0) END
    FROM t
),
room(type_name) AS MATERIALIZED (
    SELECT type_name FROM info
    WHERE COALESCE(running_left, 1) > 0 AND COALESCE(rate_left, 1) > 0
)
SELECT 'type' AS kind, type_name, running_left, rate_left,
       NULL AS id, NULL AS priority, NULL AS scheduled_at, NULL AS created_at
FROM info
UNION ALL
SELECT 'job', j.type_name, NULL, NULL, j.id, j.priority, j.scheduled_at, j.created_at
FROM room i JOIN {p}job j ON j.id IN (
    SELECT x.id FROM {p}job x INDEXED BY {p}job_acquisition_idx
    WHERE x.status = 'pending' AND x.type_name = i.type_name AND x.scheduled_at <= :now
      AND (x.scheduled_at <= :aged_before OR x.priority >= 0)
    ORDER BY x.scheduled_at, x.created_at, x.id
    LIMIT :k
)
UNION ALL
SELECT 'job', j.type_name, NULL, NULL, j.id, j.priority, j.scheduled_at, j.created_at
FROM room i JOIN {p}job j ON j.id IN (
    SELECT x.id FROM {p}job x INDEXED BY {p}job_priority_idx
    WHERE x.status = 'pending' AND x.priority <> 0 AND x.type_name = i.type_name
      AND x.priority > 0 AND x.scheduled_at <= :now
    ORDER BY x.priority DESC, x.scheduled_at, x.created_at, x.id
    LIMIT :k
)
UNION ALL
SELECT 'job', j.type_name, NULL, NULL, j.id, j.priority, j.scheduled_at, j.created_at
FROM room i JOIN {p}job j ON j.id IN (
    SELECT x.id FROM {p}job x INDEXED BY {p}job_priority_idx
    WHERE x.status = 'pending' AND x.priority <> 0 AND x.type_name = i.type_name
      AND x.priority < 0 AND x.scheduled_at <= :now
    ORDER BY x.priority DESC, x.scheduled_at, x.created_at, x.id
    LIMIT :k
)
