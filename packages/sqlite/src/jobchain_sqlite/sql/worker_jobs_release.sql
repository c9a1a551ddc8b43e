-- worker_jobs_release: return the running jobs leased by the workers workers_mark_dead just
-- marked dead to pending, clearing the lease and recording the rescue. SET expressions read
-- the row's old values, so leased_by there is the dead worker. The error line is also
-- appended to the error history as an AttemptAbandoned entry (as jobs_reap_expired does).
-- Plan: job_expired_lease_idx (forced with INDEXED BY; running jobs only, a few rows): an
-- index on leased_by would cost every claim and completion to maintain.
UPDATE {p}job INDEXED BY {p}job_expired_lease_idx
SET status = 'pending',
    leased_by = NULL,
    leased_until = NULL,
    rescued_at = :now,
    rescued_from = leased_by,
    rescue_reason = 'worker_dead',
    last_attempt_error = 'attempt abandoned: worker ' || leased_by || ' stopped heartbeating and was presumed dead',
    attempt_errors = json_insert(
        CASE WHEN json_array_length(attempt_errors) >= :errors_kept THEN json_remove(attempt_errors, '$[0]')
             ELSE COALESCE(attempt_errors, '[]') END,
        '$[#]', json_object(
            'attempt', attempt,
            'worker_id', leased_by,
            'error_type', 'AttemptAbandoned',
            'message', 'attempt abandoned: worker ' || leased_by || ' stopped heartbeating and was presumed dead',
            'traceback', NULL,
            'at', :now_iso))
WHERE status = 'running'
  AND leased_until IS NOT NULL
  AND leased_by IN (SELECT value FROM json_each(:worker_ids))
RETURNING *
