-- chains_cancel_cascade: the blocker edges a cascading chains_cancel decides from (see
-- jobchain.contracts.lifecycle.cancel_cascade), sent before its pipeline. The closure walks, from
-- the named chains, every blocker chain of their jobs whose last job is not terminal (a terminal
-- blocker is neither taken nor walked); a row per job of a non-terminal chain blocked by a chain
-- of the closure (the named ones aside), dependents outside the closure included: they make a
-- blocker shared. _created_at: the blocker's root creation, for the order of the result.
-- Plan: job_chain_index_idx (backward) for each chain's jobs and last job, the job_blocker
-- primary key and job_blocker_chain_idx.
WITH RECURSIVE closure (chain_id) AS (
    SELECT c.chain_id FROM unnest(%(chain_ids)s::uuid[]) AS c(chain_id)
    UNION
    SELECT b.blocked_by_chain_id
    FROM closure AS c
    JOIN {job} AS j ON j.chain_id = c.chain_id
    JOIN {job_blocker} AS b ON b.job_id = j.id
    WHERE (
        SELECT l.status FROM {job} AS l
        WHERE l.chain_id = b.blocked_by_chain_id
        ORDER BY l.chain_index DESC
        LIMIT 1
    ) IN ('blocked', 'pending', 'running')
)
SELECT DISTINCT
    d.chain_id::text AS _dependent_id,
    b.blocked_by_chain_id::text AS _blocker_id,
    r.created_at AS _created_at
FROM {job_blocker} AS b
JOIN {job} AS d ON d.id = b.job_id
JOIN {job} AS r ON r.id = b.blocked_by_chain_id
WHERE b.blocked_by_chain_id IN (SELECT closure.chain_id FROM closure)
  AND NOT b.blocked_by_chain_id = ANY (%(chain_ids)s::uuid[])
  AND (
      SELECT l.status FROM {job} AS l
      WHERE l.chain_id = d.chain_id
      ORDER BY l.chain_index DESC
      LIMIT 1
  ) IN ('blocked', 'pending', 'running')
