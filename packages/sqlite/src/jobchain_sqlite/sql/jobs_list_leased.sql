-- jobs_list_leased: jobs_list with a non-empty :leased_by (worker ids, a JSON array): the
-- running jobs those workers hold, with every other jobs_list filter, by created_at then id.
-- {dir}/{cmp} are ASC/> or DESC/< (rendered once each by queries.py).
-- Plan: job_expired_lease_idx (forced with INDEXED BY: running jobs only, a few per worker),
-- then a sort of what matches. jobs_list would walk job_listing_idx until it had found
-- limit + 1 of them: the whole table whenever the workers hold fewer.
SELECT j.* FROM {p}job j INDEXED BY {p}job_expired_lease_idx
WHERE j.status = 'running' AND j.leased_until IS NOT NULL
  AND j.leased_by IN (SELECT value FROM json_each(:leased_by))
  AND (json_array_length(:type_names) = 0 OR j.type_name IN (SELECT value FROM json_each(:type_names)))
  AND (json_array_length(:chain_type_names) = 0
       OR j.chain_type_name IN (SELECT value FROM json_each(:chain_type_names)))
  AND (json_array_length(:chain_ids) = 0 OR j.chain_id IN (SELECT value FROM json_each(:chain_ids)))
  AND (json_array_length(:job_ids) = 0 OR j.id IN (SELECT value FROM json_each(:job_ids)))
  AND (json_array_length(:statuses) = 0 OR j.status IN (SELECT value FROM json_each(:statuses)))
  AND (json_array_length(:error_types) = 0
       OR json_extract(j.attempt_errors, '$[#-1].error_type') IN (SELECT value FROM json_each(:error_types)))
  AND (:created_from IS NULL OR j.created_at >= :created_from)
  AND (:created_to IS NULL OR j.created_at <= :created_to)
  AND (:after_key IS NULL OR (j.created_at, j.id) {cmp} (:after_key, :after_id))
ORDER BY j.created_at {dir}, j.id {dir}
LIMIT :limit + 1
