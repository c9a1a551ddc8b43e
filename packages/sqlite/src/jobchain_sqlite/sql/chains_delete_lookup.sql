-- chains_delete_lookup: the chains to delete and the blocker references that forbid it.
-- With :cascade the set grows, recursively, by every chain that blocks a job of the set.
-- Rows: kind 'chain' (chain_id in the set) and kind 'reference' (chain_id in the set
-- blocks job_id outside it, created at created_at).
WITH RECURSIVE chain_set(id) AS (
    SELECT r.id FROM {p}job r
    WHERE r.id IN (SELECT value FROM json_each(:chain_ids)) AND r.chain_index = 0
    UNION
    SELECT b.blocked_by_chain_id
    FROM chain_set s
    JOIN {p}job j ON j.chain_id = s.id
    JOIN {p}job_blocker b ON b.job_id = j.id
    WHERE :cascade
)
SELECT 'chain' AS kind, id AS chain_id, NULL AS job_id, NULL AS created_at FROM chain_set
UNION ALL
SELECT 'reference', b.blocked_by_chain_id, b.job_id, j.created_at
FROM {p}job_blocker b
JOIN {p}job j ON j.id = b.job_id
WHERE b.blocked_by_chain_id IN (SELECT id FROM chain_set)
  AND j.chain_id NOT IN (SELECT id FROM chain_set)
