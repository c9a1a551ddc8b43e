-- chains_read: one row per chain, its root joined with its last job; the WHERE clause takes the filters.
-- Plan: job_chain_index_idx, backward scan, one row per root (LATERAL … LIMIT 1).
SELECT
    r.id::text AS id, r.chain_type_name AS type_name, l.status::text AS status,
    r.input::text AS input, l.output::text AS output, r.created_at, l.completed_at,
    l.id::text AS last_job_id, l.type_name AS last_job_type_name, l.chain_index + 1 AS job_count,
    r.deduplication_key, COALESCE(l.completed_at, l.failed_at, l.cancelled_at) AS finished_at,
    l.failed_at, l.cancelled_at, l.cancel_reason, l.failed_by_chain_id::text AS failed_by_chain_id,
    l.last_attempt_error
FROM {job} r
JOIN LATERAL (
    SELECT * FROM {job} m WHERE m.chain_id = r.id ORDER BY m.chain_index DESC LIMIT 1
) l ON TRUE
WHERE r.chain_index = 0 AND {where}
