-- chain_jobs_list: the jobs of one chain by chain_index, keyset-paginated (limit + 1 rows).
-- Plan: job_chain_index_idx.
SELECT j.*
FROM {job} AS j
WHERE j.chain_id = %(chain_id)s
  AND (%(after_index)s::integer IS NULL OR j.chain_index {after} %(after_index)s::integer)
ORDER BY j.chain_index {order}
LIMIT %(limit)s
