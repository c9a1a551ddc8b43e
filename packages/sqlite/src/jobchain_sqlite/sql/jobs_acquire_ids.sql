-- jobs_acquire_ids: claim the pending jobs jobs_acquire_candidates chose (:job_ids, a JSON
-- array), in the same write transaction; as jobs_acquire sets them (lease per type through
-- :type_leases). Returns rows.RUNNING_JOB_COLUMNS.
UPDATE {p}job
SET status = 'running',
    attempt = attempt + 1,
    lease_generation = lease_generation + 1,
    leased_by = :worker_id,
    leased_until = CASE WHEN :type_leases IS NULL THEN :leased_until
                        ELSE COALESCE((SELECT l.value FROM json_each(:type_leases) l WHERE l.key = {p}job.type_name),
                                      :leased_until) END,
    first_attempt_at = COALESCE(first_attempt_at, :now),
    attempt_started_at = :now
WHERE id IN (SELECT value FROM json_each(:job_ids))
  AND +status = 'pending'
RETURNING id, type_name, chain_id, chain_type_name, chain_index, status, input, output, created_at,
       scheduled_at, attempt, last_attempt_at, last_attempt_error, leased_by, leased_until,
       lease_generation, completed_at, completed_by, deduplication_key, trace_context,
       chain_trace_context, first_attempt_at, attempt_started_at, rescued_at, rescued_from,
       rescue_reason, attempt_errors, attempt_base, runs_after_failed_blockers, priority, ordering_key
