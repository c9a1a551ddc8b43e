-- job_reschedule: return a blocked, pending or running job to pending at :scheduled_at,
-- recording the error, and appending :attempt_error (JSON, or NULL for none) to the error
-- history, whose oldest entry goes once it holds :errors_kept. :released (1) hands back an
-- attempt that did not fail (shutdown, prefetch buffer): attempt_base + 1, so the claim's
-- attempt uses none of the budget.
-- With :worker_id the caller must own the lease; zero rows means it does not (or the job is
-- missing, completed, failed or cancelled), and the adapter reads the job to raise the right error.
UPDATE {p}job
SET status = 'pending',
    scheduled_at = :scheduled_at,
    last_attempt_at = :now,
    last_attempt_error = :error,
    leased_by = NULL,
    leased_until = NULL,
    attempt_base = attempt_base + :released,
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
RETURNING *
