-- job_wait: end a running job's attempt without failing it (JobWait): the lease cleared,
-- last_attempt_at = :now, attempt_base + 1 (the attempt uses none of the budget), status
-- :status — 'blocked', 'pending' (scheduled at :now) or 'failed' (a new blocker chain had
-- already failed or was cancelled: failed_at, failed_by_chain_id, a readable
-- last_attempt_error and :attempt_error appended to the history, as propagation does).
-- The adapter checked the lease under the write lock this transaction holds; the guard
-- repeats it. is_blocker: whether the job's chain blocks others (propagate a failure).
UPDATE {p}job
SET status = :status,
    leased_by = NULL,
    leased_until = NULL,
    last_attempt_at = :now,
    attempt_base = attempt_base + 1,
    scheduled_at = CASE WHEN :status = 'pending' THEN :now ELSE scheduled_at END,
    failed_at = CASE WHEN :status = 'failed' THEN :now ELSE failed_at END,
    failed_by_chain_id = CASE WHEN :status = 'failed' THEN :failed_by ELSE failed_by_chain_id END,
    last_attempt_error = CASE WHEN :status = 'failed' THEN :error ELSE last_attempt_error END,
    attempt_errors = CASE WHEN :attempt_error IS NULL THEN attempt_errors ELSE json_insert(
        CASE WHEN json_array_length(attempt_errors) >= :errors_kept
             THEN json_remove(attempt_errors, '$[0]')
             ELSE COALESCE(attempt_errors, '[]') END,
        '$[#]', json(:attempt_error)) END
WHERE id = :job_id AND status = 'running' AND leased_by = :worker_id
RETURNING *, EXISTS (
    SELECT 1 FROM {p}job_blocker b WHERE b.blocked_by_chain_id = {p}job.chain_id
) AS is_blocker
