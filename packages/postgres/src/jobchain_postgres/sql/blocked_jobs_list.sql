-- blocked_jobs_list: jobs that declared a chain as a blocker, by created_at then id,
-- keyset-paginated (limit + 1 rows).
-- Plan: job_blocker_chain_idx, then the primary key per dependent.
SELECT j.*
FROM {job_blocker} AS b
JOIN {job} AS j ON j.id = b.job_id
WHERE b.blocked_by_chain_id = %(chain_id)s
  AND (%(after_at)s::timestamptz IS NULL
       OR (j.created_at, j.id) {after} (%(after_at)s::timestamptz, %(after_id)s::uuid))
ORDER BY j.created_at {order}, j.id {order}
LIMIT %(limit)s
