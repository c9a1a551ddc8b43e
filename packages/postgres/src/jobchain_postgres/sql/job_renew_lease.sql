-- job_renew_lease: extend the caller's lease; when the caller does not own the job, change
-- nothing and report the row's status, owner and cancel reason so the adapter raises the right
-- error (a cancelled job: JobCancelledError; a failed one: JobTakenByAnotherWorkerError).
-- Plan: primary key; FOR UPDATE, then update only if status, owner and generation match.
WITH target AS (
    SELECT j.id, j.status, j.leased_by, j.lease_generation, j.cancel_reason
    FROM {job} AS j
    WHERE j.id = %(job_id)s
    FOR UPDATE
),
renewed AS (
    UPDATE {job} AS j
    SET leased_until = COALESCE(%(now)s::timestamptz, statement_timestamp()) + %(lease_for)s::interval
    FROM target AS t
    WHERE j.id = t.id
      AND t.status = 'running'
      AND t.leased_by = %(worker_id)s::text
      AND (%(lease_generation)s::bigint IS NULL OR t.lease_generation = %(lease_generation)s::bigint)
    RETURNING j.*
)
SELECT t.status::text AS _status, t.leased_by AS _leased_by, t.cancel_reason AS _cancel_reason, renewed.*
FROM target AS t
LEFT JOIN renewed ON true
