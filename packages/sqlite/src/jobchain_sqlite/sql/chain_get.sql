-- chain_get: the root and the last job of a chain (one row when they are the same job).
-- Plan: job_chain_index_idx twice. lock=True needs nothing more: a write transaction
-- already holds SQLite's write lock (BEGIN IMMEDIATE), the stand-in for FOR UPDATE.
SELECT * FROM {p}job
WHERE chain_id = :chain_id
  AND (chain_index = 0
       OR chain_index = (SELECT MAX(m.chain_index) FROM {p}job m WHERE m.chain_id = :chain_id))
ORDER BY chain_index
