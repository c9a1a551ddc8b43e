-- job_blockers_get: root and last job of every blocker chain of a job, in declaration order.
-- Plan: job_blocker primary key, then job_chain_index_idx per blocker chain.
SELECT b.idx AS blocker_idx, j.*
FROM {p}job_blocker b
JOIN {p}job j ON j.chain_id = b.blocked_by_chain_id
    AND (j.chain_index = 0
         OR j.chain_index = (SELECT MAX(m.chain_index) FROM {p}job m WHERE m.chain_id = b.blocked_by_chain_id))
WHERE b.job_id = :job_id
ORDER BY b.idx, j.chain_index
