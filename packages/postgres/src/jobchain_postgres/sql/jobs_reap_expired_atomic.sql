-- jobs_reap_expired_atomic: jobs_reap_expired for distributed SQL (claim="atomic-update"), recording
-- the rescue as jobs_reap_expired does.
-- Plan: candidates without locks, then UPDATE … FROM re-checking status and lease expiry, so a job
-- completed or renewed meanwhile is left alone. job_expired_lease_idx per type. A job an atomic
-- attempt holds (job_hold) is skipped; each reap appends an AttemptAbandoned entry to the error
-- history (the last :kept entries stay).
WITH chosen AS (
    SELECT e.id, e.leased_until
    FROM unnest(%(type_names)s::text[]) AS t(type_name)
    CROSS JOIN LATERAL (
        SELECT j.id, j.leased_until
        FROM {job} AS j
        WHERE j.type_name = t.type_name
          AND j.status = 'running'
          AND j.leased_until IS NOT NULL
          AND j.leased_until < COALESCE(%(now)s::timestamptz, statement_timestamp())
          AND j.id <> ALL (%(exclude_job_ids)s::uuid[])
          -- Not held by an atomic attempt (job_hold): that attempt still runs.
          AND pg_try_advisory_xact_lock_shared(hashtextextended(j.id::text, 1717))
        ORDER BY j.type_name, j.leased_until, j.id
        LIMIT %(limit)s
    ) AS e
    ORDER BY e.leased_until, e.id
    LIMIT %(limit)s
)
UPDATE {job} AS j
SET status = 'pending',
    leased_by = NULL,
    leased_until = NULL,
    -- SET expressions read the row as it was: j.leased_by is the expired lease's holder.
    rescued_at = COALESCE(%(now)s::timestamptz, statement_timestamp()),
    rescued_from = j.leased_by,
    rescue_reason = 'lease_expired',
    attempt_errors = (
        SELECT jsonb_agg(e.entry ORDER BY e.n)
        FROM jsonb_array_elements(
            COALESCE(j.attempt_errors, '[]'::jsonb) || jsonb_build_array(jsonb_build_object(
                'attempt', j.attempt,
                'worker_id', j.leased_by,
                'error_type', 'AttemptAbandoned',
                'message', 'attempt abandoned: the lease held by worker ' || j.leased_by || ' expired',
                'traceback', NULL,
                'at', to_char(
                    COALESCE(%(now)s::timestamptz, statement_timestamp()) AT TIME ZONE 'UTC',
                    'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"'
                )
            ))
        ) WITH ORDINALITY AS e(entry, n)
        WHERE e.n > jsonb_array_length(COALESCE(j.attempt_errors, '[]'::jsonb)) + 1 - %(kept)s::integer
    ),
    last_attempt_error = 'attempt abandoned: the lease held by worker ' || j.leased_by || ' expired'
FROM chosen
WHERE j.id = chosen.id
  AND j.status = 'running'
  AND j.leased_until < COALESCE(%(now)s::timestamptz, statement_timestamp())
RETURNING chosen.leased_until AS _expired_at, j.*
