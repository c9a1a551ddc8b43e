-- job_blockers_get: root and last job of every blocker chain of a job, in declaration order.
-- Job columns come first (rows.job_from_row reads them by position).
-- Plan: job_blocker primary key, then job_chain_index_idx per blocker chain.
SELECT j.*, b.idx AS blocker_idx
FROM {p}job_blocker b
JOIN {p}job j ON j.chain_id = b.blocked_by_chain_id
    AND (j.chain_index = 0
         OR j.chain_index = (SELECT MAX(m.chain_index) FROM {p}job m WHERE m.chain_id = b.blocked_by_chain_id))
WHERE b.job_id = :job_id
ORDER BY b.idx, j.chain_index
