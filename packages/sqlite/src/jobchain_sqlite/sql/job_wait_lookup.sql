-- job_wait_lookup: for job_wait, the last job of each chain of :chain_ids (kind 'chain') and
-- of each blocker chain the job :job_id already declared (kind 'blocker', with its idx and
-- resolves_on_any_end): status and chain type decide the wait.
-- Plan: job_chain_index_idx per chain, job_blocker's primary key.
SELECT 'chain' AS kind, b.value AS chain_id, NULL AS idx, 0 AS any_end, l.status, l.chain_type_name
FROM json_each(:chain_ids) b
JOIN {p}job l ON l.chain_id = b.value
    AND l.chain_index = (SELECT MAX(m.chain_index) FROM {p}job m WHERE m.chain_id = b.value)
UNION ALL
SELECT 'blocker', o.blocked_by_chain_id, o.idx, o.resolves_on_any_end, l.status, l.chain_type_name
FROM {p}job_blocker o
JOIN {p}job l ON l.chain_id = o.blocked_by_chain_id
    AND l.chain_index = (SELECT MAX(m.chain_index) FROM {p}job m WHERE m.chain_id = o.blocked_by_chain_id)
WHERE o.job_id = :job_id
