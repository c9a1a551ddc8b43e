-- jobs_create_roots: jobs_create for a batch of new chains that need no deduplication, no blockers,
-- no ordering key and no continuation (what most starts are): one multi-row INSERT from a JSON
-- document, without the general statement's planning and lookups. An explicit id that already
-- exists fails the whole statement on the primary key (DuplicateJobIdError), as in the general
-- statement.
-- With a channel (a notify adapter listening on this database), the same statement sends one
-- pg_notify per job type there: delivered when the transaction commits, dropped if it (or the
-- savepoint) rolls back, so the caller publishes nothing after its commit.
-- Returns what the server decides (the clock and the clamped schedule).
-- As a transaction's first statement it goes in one pipeline with BEGIN (see _tx.py).
WITH clock AS (
    SELECT COALESCE(%(now)s::timestamptz, statement_timestamp()) AS now
),
inserted AS (
    INSERT INTO {job} (
        id, chain_id, type_name, chain_type_name, chain_index, status, input, created_at, scheduled_at,
        trace_context, chain_trace_context, runs_after_failed_blockers, priority
    )
    SELECT
        x.id, x.id, x.type_name, COALESCE(x.chain_type_name, x.type_name), 0, 'pending', x.input, clock.now,
        GREATEST(COALESCE(x.scheduled_at, clock.now + make_interval(secs => COALESCE(x.delay, 0))), clock.now),
        x.trace_context, x.chain_trace_context, COALESCE(x.runs_after, false), COALESCE(x.priority, 0)
    FROM clock
    -- A key left out of an item reads as null (see rows.new_roots_document); ord keeps the order.
    CROSS JOIN ROWS FROM (
        jsonb_to_recordset(%(jobs)s::jsonb) AS (
            id uuid, type_name text, chain_type_name text, input jsonb, scheduled_at timestamptz,
            delay double precision, trace_context jsonb, chain_trace_context jsonb, runs_after boolean,
            priority smallint
        )
    ) WITH ORDINALITY AS x(
        id, type_name, chain_type_name, input, scheduled_at, delay, trace_context, chain_trace_context,
        runs_after, priority, ord
    )
    ORDER BY x.ord
    RETURNING id, type_name, created_at, scheduled_at
),
announced AS (
    SELECT pg_notify(%(channel)s::text, t.type_name) AS sent
    FROM (SELECT DISTINCT inserted.type_name FROM inserted) AS t
    WHERE %(channel)s::text IS NOT NULL
)
SELECT i.id::text AS _id, i.created_at AS _created_at, i.scheduled_at AS _scheduled_at
FROM inserted AS i
-- Referenced, so the notices are sent before the rows are returned (an unreferenced CTE
-- without side effects on tables might never run).
WHERE (SELECT count(*) FROM announced) >= 0
