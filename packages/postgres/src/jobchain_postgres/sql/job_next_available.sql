-- job_next_available: time until the earliest pending job of the types is eligible (never
-- negative); no row when there is none.
-- Plan: job_acquisition_idx, one index probe per type (LATERAL), so a deep backlog costs nothing.
SELECT GREATEST(s.earliest - COALESCE(%(now)s::timestamptz, statement_timestamp()), interval '0')
FROM (
    SELECT min(n.scheduled_at) AS earliest
    FROM unnest(%(type_names)s::text[]) AS t(type_name)
    CROSS JOIN LATERAL (
        SELECT j.scheduled_at FROM {job} AS j
        WHERE j.type_name = t.type_name AND j.status = 'pending'
        ORDER BY j.type_name, j.scheduled_at
        LIMIT 1
    ) AS n
) AS s
WHERE s.earliest IS NOT NULL
