-- jobs_reap_expired: return the jobs jobs_reap_candidates chose to pending, clearing the lease.
-- Runs under the same write lock as the candidate read; the status and expiry are checked again
-- all the same, so a job that changed in between is never reaped.
UPDATE {p}job
SET status = 'pending',
    leased_by = NULL,
    leased_until = NULL
WHERE id IN (SELECT value FROM json_each(:job_ids))
  AND status = 'running'
  AND leased_until < :now
RETURNING *
