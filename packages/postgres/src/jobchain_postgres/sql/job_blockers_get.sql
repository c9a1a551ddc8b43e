-- job_blockers_get: the blocker chains (root and last job) of one job, in declared order.
-- Plan: job_blocker primary key, then primary key and job_chain_index_idx per blocker.
SELECT r.*, l.*
FROM {job_blocker} AS b
JOIN {job} AS r ON r.id = b.blocked_by_chain_id
CROSS JOIN LATERAL (
    SELECT c.* FROM {job} AS c WHERE c.chain_id = r.id ORDER BY c.chain_index DESC LIMIT 1
) AS l
WHERE b.job_id = %(job_id)s
ORDER BY b."index"
