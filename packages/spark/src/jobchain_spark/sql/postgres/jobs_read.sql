-- jobs_read: every column of the job table; the WHERE clause takes the pushed filters and the partition range.
-- ids, statuses and JSON are cast to text so rows travel as plain strings.
SELECT
    j.id::text AS id, j.chain_id::text AS chain_id, j.type_name, j.chain_type_name, j.chain_index,
    j.status::text AS status, j.input::text AS input, j.output::text AS output, j.created_at,
    j.scheduled_at, j.attempt, j.last_attempt_at, j.last_attempt_error, j.first_attempt_at,
    j.attempt_started_at, j.leased_by, j.leased_until, j.lease_generation, j.completed_at,
    j.completed_by, j.deduplication_key,
    j.trace_context::text AS trace_context, j.chain_trace_context::text AS chain_trace_context,
    j.rescued_at, j.rescued_from, j.rescue_reason, j.attempt_errors::text AS attempt_errors,
    j.attempt_base, j.failed_at, j.cancelled_at, j.cancel_reason,
    j.failed_by_chain_id::text AS failed_by_chain_id, j.runs_after_failed_blockers
FROM {job} j
WHERE {where}
