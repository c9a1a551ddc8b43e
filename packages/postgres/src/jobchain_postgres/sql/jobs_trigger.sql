-- jobs_trigger: make pending jobs eligible now, all or nothing; report missing and non-pending
-- ids instead of raising. :refuse forces a refusal (an id that cannot exist was asked for).
-- Plan: primary key; rows locked FOR UPDATE in id order so concurrent triggers never deadlock.
WITH wanted AS (
    SELECT DISTINCT ON (w.id) w.id, w.ord
    FROM unnest(%(job_ids)s::uuid[]) WITH ORDINALITY AS w(id, ord)
    ORDER BY w.id, w.ord
),
locked AS (
    SELECT j.id, j.status
    FROM {job} AS j
    WHERE j.id IN (SELECT wanted.id FROM wanted)
    ORDER BY j.id
    FOR UPDATE
),
refused AS (
    SELECT wanted.id
    FROM wanted
    LEFT JOIN locked ON locked.id = wanted.id
    WHERE locked.status IS DISTINCT FROM 'pending'
),
triggered AS (
    UPDATE {job} AS j
    SET scheduled_at = COALESCE(%(now)s::timestamptz, statement_timestamp())
    FROM locked
    WHERE j.id = locked.id AND NOT EXISTS (SELECT 1 FROM refused) AND NOT %(refuse)s::boolean
    RETURNING j.*
)
SELECT wanted.ord AS _ord, wanted.id::text AS _id, locked.status::text AS _status, triggered.*
FROM wanted
LEFT JOIN locked ON locked.id = wanted.id
LEFT JOIN triggered ON triggered.id = wanted.id
ORDER BY wanted.ord
