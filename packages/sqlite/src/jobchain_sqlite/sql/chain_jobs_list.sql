-- chain_jobs_list: one page (+1 row to detect more) of the jobs of one chain by chain_index.
-- {dir}/{cmp} are ASC/> or DESC/<. Plan: job_chain_index_idx.
SELECT j.* FROM {p}job j
WHERE j.chain_id = :chain_id
  AND (:after_key IS NULL OR j.chain_index {cmp} :after_key)
ORDER BY j.chain_index {dir}
LIMIT :limit + 1
