-- worker_jobs_release: return the running jobs leased by the workers workers_mark_dead just
-- marked dead to pending, clearing the lease and recording the rescue. SET expressions read
-- the row's old values, so leased_by there is the dead worker.
-- Plan: job_expired_lease_idx (forced with INDEXED BY; running jobs only, a few rows): an
-- index on leased_by would cost every claim and completion to maintain.
UPDATE {p}job INDEXED BY {p}job_expired_lease_idx
SET status = 'pending',
    leased_by = NULL,
    leased_until = NULL,
    rescued_at = :now,
    rescued_from = leased_by,
    rescue_reason = 'worker_dead',
    last_attempt_error = 'attempt abandoned: worker ' || leased_by || ' stopped heartbeating and was presumed dead'
WHERE status = 'running'
  AND leased_until IS NOT NULL
  AND leased_by IN (SELECT value FROM json_each(:worker_ids))
RETURNING *
