-- jobs_create_roots_announced: jobs_create_roots, and in the same statement one pg_notify per
-- job type on the job-scheduled channel of a notify adapter on this database. The notices are
-- delivered when the transaction commits and dropped if it (or the savepoint) rolls back, so
-- the caller publishes nothing after its commit. Returns what jobs_create_roots returns.
WITH clock AS (
    SELECT COALESCE(%(now)s::timestamptz, statement_timestamp()) AS now
),
inserted AS (
    INSERT INTO {job} (
        id, chain_id, type_name, chain_type_name, chain_index, status, input, created_at, scheduled_at,
        trace_context, chain_trace_context
    )
    SELECT
        x.id, x.id, x.type_name, x.chain_type_name, 0, 'pending', x.input, clock.now,
        GREATEST(COALESCE(x.scheduled_at, clock.now + make_interval(secs => COALESCE(x.delay, 0))), clock.now),
        x.trace_context, x.chain_trace_context
    FROM clock
    CROSS JOIN jsonb_to_recordset(%(jobs)s::jsonb) AS x(
        ord integer, id uuid, type_name text, chain_type_name text, input jsonb,
        scheduled_at timestamptz, delay double precision, trace_context jsonb, chain_trace_context jsonb
    )
    ORDER BY x.ord
    RETURNING id, type_name, created_at, scheduled_at
),
announced AS (
    SELECT pg_notify(%(channel)s::text, t.type_name) AS sent
    FROM (SELECT DISTINCT inserted.type_name FROM inserted) AS t
)
SELECT i.id::text AS _id, i.created_at AS _created_at, i.scheduled_at AS _scheduled_at
FROM inserted AS i
-- Referenced, so the notices are sent before the rows are returned (an unreferenced CTE
-- without side effects on tables might never run).
WHERE (SELECT count(*) FROM announced) >= 0
