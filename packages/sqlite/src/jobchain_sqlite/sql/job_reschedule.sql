-- job_reschedule: return a non-completed job to pending at :scheduled_at, recording the error.
-- With :worker_id the caller must own the lease; zero rows means it does not (or the job is
-- missing or completed), and the adapter reads the job to raise the right error.
UPDATE {p}job
SET status = 'pending',
    scheduled_at = :scheduled_at,
    last_attempt_at = :now,
    last_attempt_error = :error,
    leased_by = NULL,
    leased_until = NULL
WHERE id = :job_id
  AND status <> 'completed'
  AND (:worker_id IS NULL
       OR (status = 'running'
           AND leased_by = :worker_id
           AND (:lease_generation IS NULL OR lease_generation = :lease_generation)))
RETURNING *
