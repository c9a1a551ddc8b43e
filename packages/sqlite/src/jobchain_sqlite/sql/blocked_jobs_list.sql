-- blocked_jobs_list: one page (+1 row to detect more) of jobs that declared :blocker_chain_id
-- as a blocker, by created_at then id. {dir}/{cmp} are ASC/> or DESC/<.
-- Plan: job_blocker_chain_idx, then the job primary key.
SELECT j.* FROM {p}job_blocker b
JOIN {p}job j ON j.id = b.job_id
WHERE b.blocked_by_chain_id = :blocker_chain_id
  AND (:after_key IS NULL OR (j.created_at, j.id) {cmp} (:after_key, :after_id))
ORDER BY j.created_at {dir}, j.id {dir}
LIMIT :limit + 1
