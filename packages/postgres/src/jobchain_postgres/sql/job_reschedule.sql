-- job_reschedule: return a job to pending at its new time (never before now), recording the
-- error (and appending :attempt_error, a one-entry JSON array, to the error history, which keeps
-- the last :kept entries) and clearing the lease. With a worker id the caller must own the job;
-- otherwise any job not terminal qualifies. A refusal changes nothing and reports status, owner
-- and cancel reason.
-- Plan: primary key; FOR UPDATE, then a conditional update.
WITH target AS (
    SELECT j.id, j.status, j.leased_by, j.lease_generation, j.cancel_reason
    FROM {job} AS j
    WHERE j.id = %(job_id)s
    FOR UPDATE
),
rescheduled AS (
    UPDATE {job} AS j
    SET status = 'pending',
        scheduled_at = GREATEST(
            COALESCE(
                %(scheduled_at)s::timestamptz,
                COALESCE(%(now)s::timestamptz, statement_timestamp()) + %(delay)s::interval
            ),
            COALESCE(%(now)s::timestamptz, statement_timestamp())
        ),
        last_attempt_at = COALESCE(%(now)s::timestamptz, statement_timestamp()),
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
        -- A released attempt (its worker shut down, or it waited in a prefetch buffer) did not
        -- fail: it uses none of the attempt budget.
        attempt_base = j.attempt_base + CASE WHEN %(released)s::boolean THEN 1 ELSE 0 END,
        leased_by = NULL,
        leased_until = NULL
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
    RETURNING j.*
)
SELECT t.status::text AS _status, t.leased_by AS _leased_by, t.cancel_reason AS _cancel_reason, rescheduled.*
FROM target AS t
LEFT JOIN rescheduled ON true
