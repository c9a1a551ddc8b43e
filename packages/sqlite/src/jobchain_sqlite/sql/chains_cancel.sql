-- chains_cancel: cancel the given last jobs (chains_cancel_lookup found them blocked,
-- pending or running under the same write lock): status 'cancelled', cancelled_at, the
-- reason, the lease cleared, so the attempt of a running one is fenced from now on.
-- is_blocker: whether any job declared the chain as a blocker (then jobs_propagate runs).
UPDATE {p}job
SET status = 'cancelled',
    cancelled_at = :now,
    cancel_reason = :reason,
    leased_by = NULL,
    leased_until = NULL
WHERE id IN (SELECT value FROM json_each(:job_ids))
  AND +status IN ('blocked', 'pending', 'running')
RETURNING *, EXISTS (
    SELECT 1 FROM {p}job_blocker b WHERE b.blocked_by_chain_id = {p}job.chain_id
) AS is_blocker
