-- jobs_create_lookup: everything jobs_create must know before inserting, in one read.
-- Rows by kind: 'id' (an existing job with an item's id), 'continuation' (the existing job at
-- an item's chain_id + chain_index), 'root' (the root of an item's chain), 'dedup' (the newest
-- root matching an item's deduplication; scope incomplete: its chain is not terminal),
-- 'blocker' (the last job of each blocker chain), 'ordering' (the last job of the chain that
-- took an ordering key of :ordering_keys last, with the key in i).
-- Job columns come first (rows.job_from_row reads them by position).
-- Plan: primary key, job_chain_index_idx, job_deduplication_idx, ordering_key's primary key;
-- no scan.
WITH item AS (
    SELECT
        json_extract(value, '$.i')                AS i,
        json_extract(value, '$.id')               AS id,
        json_extract(value, '$.chain_id')         AS chain_id,
        json_extract(value, '$.chain_index')      AS chain_index,
        json_extract(value, '$.chain_type_name')  AS chain_type_name,
        json_extract(value, '$.dedup_key')        AS dedup_key,
        json_extract(value, '$.dedup_from')       AS dedup_from,
        json_extract(value, '$.dedup_incomplete') AS dedup_incomplete,
        json_extract(value, '$.exclude')          AS exclude
    FROM json_each(:items)
)
SELECT j.*, 'id' AS kind, item.i AS i
FROM item JOIN {p}job j ON j.id = item.id
UNION ALL
SELECT j.*, 'continuation', item.i
FROM item JOIN {p}job j ON j.chain_id = item.chain_id AND j.chain_index = item.chain_index
WHERE item.chain_id IS NOT NULL
UNION ALL
SELECT j.*, 'root', item.i
FROM item JOIN {p}job j ON j.id = item.chain_id AND j.chain_index = 0
WHERE item.chain_id IS NOT NULL
UNION ALL
SELECT j.*, 'dedup', item.i
FROM item JOIN {p}job j ON j.id = (
    SELECT r.id FROM {p}job r INDEXED BY {p}job_deduplication_idx
    WHERE r.deduplication_key = item.dedup_key
      AND r.chain_index = 0
      AND r.chain_type_name = item.chain_type_name
      AND (item.dedup_from IS NULL OR r.created_at >= item.dedup_from)
      AND r.id NOT IN (SELECT e.value FROM json_each(item.exclude) e)
      AND (NOT item.dedup_incomplete OR (
          SELECT l.status FROM {p}job l WHERE l.chain_id = r.id ORDER BY l.chain_index DESC LIMIT 1
      ) NOT IN ('completed', 'failed', 'cancelled'))
    ORDER BY r.created_at DESC, r.id DESC
    LIMIT 1
)
WHERE item.dedup_key IS NOT NULL
UNION ALL
SELECT j.*, 'blocker', NULL
FROM json_each(:blocker_chain_ids) b
JOIN {p}job j ON j.chain_id = b.value
    AND j.chain_index = (SELECT MAX(m.chain_index) FROM {p}job m WHERE m.chain_id = b.value)
UNION ALL
SELECT j.*, 'ordering', k.value
FROM json_each(:ordering_keys) k
JOIN {p}ordering_key o ON o.key = k.value
JOIN {p}job j ON j.chain_id = o.last_chain_id
    AND j.chain_index = (SELECT MAX(m.chain_index) FROM {p}job m WHERE m.chain_id = o.last_chain_id)
