-- jobs_reap_expired: return the jobs jobs_reap_candidates chose to pending, clearing the lease
-- and recording the rescue (the abandoned attempt left no error of its own, so the error
-- line names the worker whose lease expired; the same line is appended to the error history
-- as an AttemptAbandoned entry, dropping the oldest once it holds :errors_kept; :now_iso is
-- its time in AttemptError.to_json's form). SET expressions read the row's old values, so
-- leased_by there is the expired lease's holder.
-- Runs under the same write lock as the candidate read; the status and expiry are checked again
-- all the same, so a job that changed in between is never reaped.
UPDATE {p}job
SET status = 'pending',
    leased_by = NULL,
    leased_until = NULL,
    rescued_at = :now,
    rescued_from = leased_by,
    rescue_reason = 'lease_expired',
    last_attempt_error = 'attempt abandoned: the lease held by worker ' || leased_by || ' expired',
    attempt_errors = json_insert(
        CASE WHEN json_array_length(attempt_errors) >= :errors_kept THEN json_remove(attempt_errors, '$[0]')
             ELSE COALESCE(attempt_errors, '[]') END,
        '$[#]', json_object(
            'attempt', attempt,
            'worker_id', leased_by,
            'error_type', 'AttemptAbandoned',
            'message', 'attempt abandoned: the lease held by worker ' || leased_by || ' expired',
            'traceback', NULL,
            'at', :now_iso))
WHERE id IN (SELECT value FROM json_each(:job_ids))
  AND status = 'running'
  AND leased_until < :now
RETURNING *
