-- chains_cancel_cascade: the blocker edges a cascading chains_cancel decides from (see
-- jobchain.contracts.lifecycle.cancel_cascade). The closure walks, from the named chains, every
-- blocker chain of their jobs whose last job is not terminal (a terminal blocker is neither
-- taken nor walked); a row per job of a non-terminal chain blocked by a chain of the closure
-- (the named ones aside), dependents outside the closure included: they make a blocker shared.
-- created_at: the blocker's root creation, for the order of the result.
-- Plan: job_chain_index_idx for each chain's jobs and last job, the job_blocker indexes both ways.
WITH RECURSIVE closure(id) AS (
    SELECT value FROM json_each(:chain_ids)
    UNION
    SELECT b.blocked_by_chain_id
    FROM closure c
    JOIN {p}job j ON j.chain_id = c.id
    JOIN {p}job_blocker b ON b.job_id = j.id
    WHERE (
        SELECT l.status FROM {p}job l
        WHERE l.chain_id = b.blocked_by_chain_id
        ORDER BY l.chain_index DESC LIMIT 1
    ) IN ('blocked', 'pending', 'running')
)
SELECT DISTINCT d.chain_id AS dependent_id, b.blocked_by_chain_id AS blocker_id, r.created_at AS created_at
FROM {p}job_blocker b
JOIN {p}job d ON d.id = b.job_id
JOIN {p}job r ON r.id = b.blocked_by_chain_id
WHERE b.blocked_by_chain_id IN (SELECT id FROM closure)
  AND b.blocked_by_chain_id NOT IN (SELECT value FROM json_each(:chain_ids))
  AND (
      SELECT l.status FROM {p}job l
      WHERE l.chain_id = d.chain_id
      ORDER BY l.chain_index DESC LIMIT 1
  ) IN ('blocked', 'pending', 'running')
