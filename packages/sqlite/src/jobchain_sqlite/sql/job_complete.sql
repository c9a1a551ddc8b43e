-- job_complete: complete a blocked, pending or running job; with :worker_id only if that
-- worker owns it (so never a cancelled or failed one: their lease is cleared).
-- has_next tells whether a continuation exists (no continuation: the chain is complete);
-- is_blocker whether any job declared this chain as a blocker (only then run job_unblock).
-- Zero rows means missing, finished or not owned; the adapter reads the job to say which.
UPDATE {p}job
SET status = 'completed',
    output = :output,
    completed_at = :now,
    completed_by = :worker_id,
    leased_by = NULL,
    leased_until = NULL,
    last_attempt_error = NULL
WHERE id = :job_id
  AND status IN ('blocked', 'pending', 'running')
  AND (:worker_id IS NULL
       OR (status = 'running'
           AND leased_by = :worker_id
           AND (:lease_generation IS NULL OR lease_generation = :lease_generation)))
RETURNING *, EXISTS (
    SELECT 1 FROM {p}job c WHERE c.chain_id = {p}job.chain_id AND c.chain_index = {p}job.chain_index + 1
) AS has_next, EXISTS (
    SELECT 1 FROM {p}job_blocker b WHERE b.blocked_by_chain_id = {p}job.chain_id
) AS is_blocker
