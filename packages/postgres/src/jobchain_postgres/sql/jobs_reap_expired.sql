-- jobs_reap_expired: return up to :limit running jobs whose lease expired to pending, oldest
-- lease first, clearing the lease and recording the rescue (when, from which worker, why, and a
-- readable last_attempt_error: the abandoned attempt left no error of its own, also appended to
-- the error history as an AttemptAbandoned entry; the last :kept entries stay).
-- Plan: job_expired_lease_idx, one ordered index scan per type (LATERAL); FOR UPDATE SKIP LOCKED
-- skips rows other transactions hold, and a job an atomic attempt holds (job_hold: its advisory
-- lock, which pg_try_advisory_xact_lock_shared cannot share) is never touched.
WITH expired AS (
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
        FOR UPDATE SKIP LOCKED
    ) AS e
),
chosen AS (
    SELECT expired.id, expired.leased_until FROM expired ORDER BY expired.leased_until, expired.id LIMIT %(limit)s
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
RETURNING chosen.leased_until AS _expired_at, j.*
