-- chain_get: a chain's root job and its last job (the same row for a lone root).
-- Plan: primary key for the root, job_chain_index_idx backwards for the last job.
SELECT r.*, l.*
FROM {job} AS r
CROSS JOIN LATERAL (
    SELECT c.* FROM {job} AS c WHERE c.chain_id = r.id ORDER BY c.chain_index DESC LIMIT 1
) AS l
WHERE r.id = %(chain_id)s AND r.chain_index = 0
