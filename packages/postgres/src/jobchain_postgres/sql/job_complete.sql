-- job_complete: complete a job, decide whether its chain completed (no continuation at
-- chain_index + 1) and, if so, unblock the dependents whose last open blocker this was, in one
-- statement. Refusals change nothing and report status and owner.
-- Plan: primary key; job_chain_index_idx for the continuation check; job_blocker_chain_idx for
-- the dependents. Sent after jobs_lock in one pipeline: the target is decided only when that
-- statement locked it (jobchain.locked), before this statement's snapshot was taken. When
-- another transaction held the row (for instance one inserting a job blocked by this chain,
-- which holds it FOR KEY SHARE), the statement reports _busy and the adapter sends job_lock,
-- which waits for the lock, and this statement again, so the dependent that transaction
-- committed is seen and unblocked.
-- Dependents are unblocked by decrementing open_blocker_count under their row lock, so several
-- blocker chains completing concurrently always leave the count exact.
WITH target AS (
    SELECT j.id, j.chain_id, j.chain_index, j.status, j.leased_by, j.lease_generation, j.cancel_reason
    FROM {job} AS j
    WHERE j.id = %(job_id)s
      AND j.id = ANY (string_to_array(current_setting('jobchain.locked', true), ',')::uuid[])
    FOR UPDATE SKIP LOCKED
),
completed AS (
    UPDATE {job} AS j
    SET status = 'completed',
        output = %(output)s::jsonb,
        completed_at = COALESCE(%(now)s::timestamptz, statement_timestamp()),
        completed_by = %(worker_id)s::text,
        leased_by = NULL,
        leased_until = NULL,
        last_attempt_error = NULL
    FROM target AS t
    WHERE j.id = t.id
      AND t.status NOT IN ('completed', 'failed', 'cancelled')
      AND (
          %(worker_id)s::text IS NULL
          OR (
              t.status = 'running'
              AND t.leased_by = %(worker_id)s::text
              AND (%(lease_generation)s::bigint IS NULL OR t.lease_generation = %(lease_generation)s::bigint)
          )
      )
    -- The job's columns but the four only a failed or cancelled job sets (this one is not):
    -- fewer columns to send and load per job on the hot path (rows.py reads them as NULL).
    RETURNING j.id, j.chain_id, j.type_name, j.chain_type_name, j.chain_index, j.status, j.input,
        j.output, j.created_at, j.scheduled_at, j.attempt, j.last_attempt_at, j.last_attempt_error,
        j.leased_by, j.leased_until, j.lease_generation, j.completed_at, j.completed_by,
        j.deduplication_key, j.trace_context, j.chain_trace_context, j.first_attempt_at,
        j.attempt_started_at, j.rescued_at, j.rescued_from, j.rescue_reason, j.attempt_errors,
        j.attempt_base, j.runs_after_failed_blockers, j.priority, j.ordering_key
),
chain_done AS (
    SELECT c.chain_id
    FROM completed AS c
    WHERE NOT EXISTS (
        SELECT 1 FROM {job} AS n WHERE n.chain_id = c.chain_id AND n.chain_index = c.chain_index + 1
    )
),
unblocked AS (
    UPDATE {job} AS d
    SET open_blocker_count = d.open_blocker_count - 1,
        status = CASE WHEN d.open_blocker_count <= 1 THEN 'pending' ELSE 'blocked' END::{job_status},
        scheduled_at = CASE
            WHEN d.open_blocker_count <= 1
            THEN GREATEST(d.scheduled_at, COALESCE(%(now)s::timestamptz, statement_timestamp()))
            ELSE d.scheduled_at
        END
    FROM {job_blocker} AS b, chain_done AS cd
    WHERE b.blocked_by_chain_id = cd.chain_id
      AND d.id = b.job_id
      AND d.status = 'blocked'
    -- The job's columns but the four only a failed or cancelled job sets (this one is not):
    -- fewer columns to send and load per job on the hot path (rows.py reads them as NULL).
    RETURNING d.id, d.chain_id, d.type_name, d.chain_type_name, d.chain_index, d.status, d.input,
        d.output, d.created_at, d.scheduled_at, d.attempt, d.last_attempt_at, d.last_attempt_error,
        d.leased_by, d.leased_until, d.lease_generation, d.completed_at, d.completed_by,
        d.deduplication_key, d.trace_context, d.chain_trace_context, d.first_attempt_at,
        d.attempt_started_at, d.rescued_at, d.rescued_from, d.rescue_reason, d.attempt_errors,
        d.attempt_base, d.runs_after_failed_blockers, d.priority, d.ordering_key
)
SELECT
    'target' AS _kind,
    t.status IS NULL AND EXISTS (SELECT 1 FROM {job} AS x WHERE x.id = %(job_id)s) AS _busy,
    t.status::text AS _status,
    t.leased_by AS _leased_by,
    t.cancel_reason AS _cancel_reason,
    EXISTS (SELECT 1 FROM chain_done) AS _chain_completed,
    completed.*
FROM (SELECT 1) AS one
LEFT JOIN target AS t ON true
LEFT JOIN completed ON true
UNION ALL
SELECT 'unblocked', false, NULL, NULL, NULL, NULL, unblocked.*
FROM unblocked
WHERE unblocked.status = 'pending'
