-- chains_list: one page (+1 row to detect more) of chains by root created_at, then id.
-- {dir}/{cmp} are ASC/> or DESC/< (the two variants are rendered once by queries.py).
-- Returns root and last job rows of each chain on the page; the adapter pairs them.
-- Plan: job_chain_listing_idx (or job_chain_listing_type_name_idx with type names).
WITH page AS (
    SELECT r.id FROM {p}job r
    WHERE r.chain_index = 0
      AND (json_array_length(:type_names) = 0
           OR r.chain_type_name IN (SELECT value FROM json_each(:type_names)))
      AND (json_array_length(:chain_ids) = 0 OR r.id IN (SELECT value FROM json_each(:chain_ids)))
      AND (json_array_length(:job_ids) = 0
           OR r.id IN (SELECT x.chain_id FROM {p}job x WHERE x.id IN (SELECT value FROM json_each(:job_ids))))
      AND (json_array_length(:statuses) = 0
           OR (SELECT l.status FROM {p}job l WHERE l.chain_id = r.id ORDER BY l.chain_index DESC LIMIT 1)
              IN (SELECT value FROM json_each(:statuses)))
      AND (NOT :root_only OR NOT EXISTS (SELECT 1 FROM {p}job_blocker b WHERE b.blocked_by_chain_id = r.id))
      AND (:created_from IS NULL OR r.created_at >= :created_from)
      AND (:created_to IS NULL OR r.created_at <= :created_to)
      AND (:after_key IS NULL OR (r.created_at, r.id) {cmp} (:after_key, :after_id))
    ORDER BY r.created_at {dir}, r.id {dir}
    LIMIT :limit + 1
)
SELECT j.*
FROM page
JOIN {p}job j ON j.chain_id = page.id
    AND (j.chain_index = 0
         OR j.chain_index = (SELECT MAX(m.chain_index) FROM {p}job m WHERE m.chain_id = page.id))
