-- jobs_acquire_plain: the claim while none of the claimed types has a due job with a priority
-- (the common case): the pre-priority statement, FIFO, plus the pause filter. With no priority
-- in play, the contract's order (aged jobs first, then priority, FIFO within) is plain FIFO.
-- _priorities: some claimed type has a due pending job of priority <> 0 (one probe of the
-- partial job_priority_idx, empty while nobody uses priorities); the statement then claims
-- nothing and the adapter claims with jobs_acquire.sql, which merges the priority order in.
-- Always one row (LEFT JOIN), so the flag arrives with an empty claim too.
-- Plan: job_acquisition_idx, one ordered index scan per type (LATERAL); FOR UPDATE SKIP LOCKED.
-- Leaky: with several types a claim locks up to :limit rows per type until commit.
WITH priorities AS (
    SELECT EXISTS (
        SELECT 1 FROM {job} AS p
        WHERE p.type_name = ANY (%(type_names)s::text[])
          AND p.status = 'pending'
          AND p.priority <> 0
          AND p.scheduled_at <= COALESCE(%(now)s::timestamptz, statement_timestamp())
    ) AS present
),
candidates AS (
    SELECT c.id, c.scheduled_at, c.created_at, t.lease
    FROM unnest(%(type_names)s::text[], %(leases)s::interval[]) AS t(type_name, lease)
    CROSS JOIN priorities
    CROSS JOIN LATERAL (
        SELECT j.id, j.scheduled_at, j.created_at
        FROM {job} AS j
        WHERE j.type_name = t.type_name
          AND j.status = 'pending'
          AND j.scheduled_at <= COALESCE(%(now)s::timestamptz, statement_timestamp())
          -- Both depend on the type only: gates evaluated before the scan, so a paused type or a
          -- claim that must merge priorities reads (and locks) no job here.
          AND NOT priorities.present
          AND NOT EXISTS (
              SELECT 1 FROM {type_control} AS p WHERE p.type_name = t.type_name AND p.paused_at IS NOT NULL
          )
        -- type_name is fixed here; naming it lets the planner read the index in order (no sort).
        ORDER BY j.type_name, j.scheduled_at, j.created_at, j.id
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) AS c
),
chosen AS (
    SELECT candidates.id, candidates.lease FROM candidates
    ORDER BY candidates.scheduled_at, candidates.created_at, candidates.id
    LIMIT %(limit)s
),
claimed AS (
    UPDATE {job} AS j
    SET status = 'running',
        attempt = j.attempt + 1,
        lease_generation = j.lease_generation + 1,
        leased_by = %(worker_id)s,
        leased_until = COALESCE(%(now)s::timestamptz, statement_timestamp()) + chosen.lease,
        first_attempt_at = COALESCE(j.first_attempt_at, %(now)s::timestamptz, statement_timestamp()),
        attempt_started_at = COALESCE(%(now)s::timestamptz, statement_timestamp())
    FROM chosen
    WHERE j.id = chosen.id
    -- The job's columns but the four only a failed or cancelled job sets (this one is not):
    -- fewer columns to send and load per job on the hot path (rows.py reads them as NULL).
    RETURNING j.id, j.chain_id, j.type_name, j.chain_type_name, j.chain_index, j.status, j.input,
        j.output, j.created_at, j.scheduled_at, j.attempt, j.last_attempt_at, j.last_attempt_error,
        j.leased_by, j.leased_until, j.lease_generation, j.completed_at, j.completed_by,
        j.deduplication_key, j.trace_context, j.chain_trace_context, j.first_attempt_at,
        j.attempt_started_at, j.rescued_at, j.rescued_from, j.rescue_reason, j.attempt_errors,
        j.attempt_base, j.runs_after_failed_blockers, j.priority, j.ordering_key
)
SELECT
    (SELECT count(*) FROM claimed) = %(limit)s AND EXISTS (
        SELECT 1 FROM {job} AS m
        WHERE m.type_name = ANY (%(type_names)s::text[])
          AND m.status = 'pending'
          AND m.scheduled_at <= COALESCE(%(now)s::timestamptz, statement_timestamp())
          AND m.id NOT IN (SELECT chosen.id FROM chosen)
          AND NOT EXISTS (
              SELECT 1 FROM {type_control} AS p WHERE p.type_name = m.type_name AND p.paused_at IS NOT NULL
          )
    ) AS _has_more,
    (SELECT present FROM priorities) AS _priorities,
    claimed.*
FROM (SELECT 1) AS one
LEFT JOIN claimed ON true
