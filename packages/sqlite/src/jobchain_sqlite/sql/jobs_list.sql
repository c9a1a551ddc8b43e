-- jobs_list: one page (+1 row to detect more) of jobs by created_at, then id.
-- {dir}/{cmp} are ASC/> or DESC/< (the two variants are rendered once by queries.py).
-- :error_types matches the error_type of the last entry of the error history.
-- Plan: job_listing_idx or job_listing_type_name_idx.
SELECT j.* FROM {p}job j
WHERE (json_array_length(:type_names) = 0 OR j.type_name IN (SELECT value FROM json_each(:type_names)))
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
