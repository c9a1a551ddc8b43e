-- chains_read: one row per chain, its root joined with its last job; the WHERE clause takes the filters.
-- Plan: job_chain_index_idx finds the last job of each root.
SELECT
    r.id, r.chain_type_name AS type_name, l.status, r.input, l.output, r.created_at,
    l.completed_at, l.id AS last_job_id, l.type_name AS last_job_type_name,
    l.chain_index + 1 AS job_count, r.deduplication_key,
    COALESCE(l.completed_at, l.failed_at, l.cancelled_at) AS finished_at, l.failed_at,
    l.cancelled_at, l.cancel_reason, l.failed_by_chain_id, l.last_attempt_error
FROM {job} r
JOIN {job} l
    ON l.chain_id = r.id
    AND l.chain_index = (SELECT MAX(m.chain_index) FROM {job} m WHERE m.chain_id = r.id)
WHERE r.chain_index = 0 AND {where}
