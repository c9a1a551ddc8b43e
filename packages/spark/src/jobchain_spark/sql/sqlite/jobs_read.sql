-- jobs_read: every column of the job table; the WHERE clause takes the pushed filters and the partition range.
-- Times are fixed-width UTC text; JSON columns are JSON text; runs_after_failed_blockers is 0/1.
SELECT
    j.id, j.chain_id, j.type_name, j.chain_type_name, j.chain_index, j.status,
    j.input, j.output, j.created_at, j.scheduled_at, j.attempt, j.last_attempt_at,
    j.last_attempt_error, j.first_attempt_at, j.attempt_started_at, j.leased_by, j.leased_until,
    j.lease_generation, j.completed_at, j.completed_by, j.deduplication_key, j.trace_context,
    j.chain_trace_context, j.rescued_at, j.rescued_from, j.rescue_reason, j.attempt_errors,
    j.attempt_base, j.failed_at, j.cancelled_at, j.cancel_reason, j.failed_by_chain_id,
    j.runs_after_failed_blockers
FROM {job} j
WHERE {where}
