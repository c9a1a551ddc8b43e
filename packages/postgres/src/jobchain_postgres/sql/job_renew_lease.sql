-- job_renew_lease: extend the caller's lease; when the caller does not own the job, change
-- nothing and report the row's status and owner so the adapter raises the right error.
-- Plan: primary key; FOR UPDATE, then update only if status, owner and generation match.
WITH target AS (
    SELECT j.id, j.status, j.leased_by, j.lease_generation
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
SELECT t.status::text AS _status, t.leased_by AS _leased_by, renewed.*
FROM target AS t
LEFT JOIN renewed ON true
