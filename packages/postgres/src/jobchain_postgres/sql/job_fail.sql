-- job_fail: fail a blocked, pending or running job for good: status failed, failed_at, the error,
-- the lease cleared, :attempt_error (a one-entry JSON array, or NULL) appended to the error history
-- (the last :kept entries stay). With a worker id the caller must own the job, as for a
-- reschedule. A refusal changes nothing and reports status, owner and cancel reason.
-- When the job is its chain's last one (no continuation), the chain failed: its id goes to the
-- transaction-local setting jobchain.origins, which jobs_propagate (next in the same pipeline)
-- reads; it is set empty otherwise, so a later propagation never sees a stale origin.
-- Plan: primary key; job_chain_index_idx for the continuation check.
WITH clock AS (
    SELECT COALESCE(%(now)s::timestamptz, statement_timestamp()) AS now
),
target AS (
    SELECT j.id, j.status, j.leased_by, j.lease_generation, j.cancel_reason
    FROM {job} AS j
    WHERE j.id = %(job_id)s
),
failed AS (
    UPDATE {job} AS j
    SET status = 'failed',
        failed_at = clock.now,
        last_attempt_at = clock.now,
        last_attempt_error = %(error)s::text,
        attempt_errors = CASE
            WHEN %(attempt_error)s::jsonb IS NULL THEN j.attempt_errors
            ELSE (
                SELECT jsonb_agg(e.entry ORDER BY e.n)
                FROM jsonb_array_elements(COALESCE(j.attempt_errors, '[]'::jsonb) || %(attempt_error)s::jsonb)
                    WITH ORDINALITY AS e(entry, n)
                WHERE e.n > jsonb_array_length(COALESCE(j.attempt_errors, '[]'::jsonb)) + 1 - %(kept)s::integer
            )
        END,
        -- The type of the history's last entry (queue_stats counts failures by it, index-only).
        failed_error_type = COALESCE(
            %(attempt_error)s::jsonb -> -1 ->> 'error_type', j.attempt_errors -> -1 ->> 'error_type', ''
        ),
        leased_by = NULL,
        leased_until = NULL
    FROM target AS t, clock
    WHERE j.id = t.id
      AND t.status IN ('blocked', 'pending', 'running')
      AND (
          %(worker_id)s::text IS NULL
          OR (
              t.status = 'running'
              AND t.leased_by = %(worker_id)s::text
              AND (%(lease_generation)s::bigint IS NULL OR t.lease_generation = %(lease_generation)s::bigint)
          )
      )
    RETURNING j.*
),
origins AS (
    SELECT set_config('jobchain.origins', COALESCE(string_agg(f.chain_id::text || ':failed', ','), ''), true) AS o
    FROM failed AS f
    WHERE NOT EXISTS (
        SELECT 1 FROM {job} AS n WHERE n.chain_id = f.chain_id AND n.chain_index = f.chain_index + 1
    )
)
SELECT
    t.status::text AS _status,
    t.leased_by AS _leased_by,
    t.cancel_reason AS _cancel_reason,
    (SELECT origins.o FROM origins) AS _origins,
    failed.*
FROM (SELECT 1) AS one
LEFT JOIN target AS t ON true
LEFT JOIN failed ON true
