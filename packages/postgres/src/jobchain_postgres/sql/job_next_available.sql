-- job_next_available: time until the earliest pending job of the types that are not paused is
-- eligible (never negative); no row when there is none. Type limits are not considered.
-- Plan: job_acquisition_idx, one index probe per type (LATERAL), so a deep backlog costs nothing;
-- type_control primary key, one probe per type (the pause).
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
    WHERE NOT EXISTS (
        SELECT 1 FROM {type_control} AS p WHERE p.type_name = t.type_name AND p.paused_at IS NOT NULL
    )
) AS s
WHERE s.earliest IS NOT NULL
