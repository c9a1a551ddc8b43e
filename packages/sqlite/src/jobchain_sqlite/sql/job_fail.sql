-- job_fail: fail a blocked, pending or running job for good (status 'failed', failed_at,
-- the error, the lease cleared), appending :attempt_error (JSON, or NULL) to the error
-- history as job_reschedule does. Guards as job_reschedule; zero rows: the adapter reads the
-- job to say why. is_blocker: whether any job declared this chain as a blocker (a failed job
-- is its chain's last job, so its chain failed): only then does jobs_propagate run.
UPDATE {p}job
SET status = 'failed',
    failed_at = :now,
    last_attempt_at = :now,
    last_attempt_error = :error,
    leased_by = NULL,
    leased_until = NULL,
    attempt_errors = CASE WHEN :attempt_error IS NULL THEN attempt_errors ELSE json_insert(
        CASE WHEN json_array_length(attempt_errors) >= :errors_kept THEN json_remove(attempt_errors, '$[0]')
             ELSE COALESCE(attempt_errors, '[]') END,
        '$[#]', json(:attempt_error)) END
WHERE id = :job_id
  AND status IN ('blocked', 'pending', 'running')
  AND (:worker_id IS NULL
       OR (status = 'running'
           AND leased_by = :worker_id
           AND (:lease_generation IS NULL OR lease_generation = :lease_generation)))
RETURNING *, EXISTS (
    SELECT 1 FROM {p}job_blocker b WHERE b.blocked_by_chain_id = {p}job.chain_id
) AS is_blocker
