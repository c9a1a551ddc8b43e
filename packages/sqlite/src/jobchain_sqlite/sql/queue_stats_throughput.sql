-- queue_stats_throughput: completed and failed jobs of every type per bucket [start, end).
-- :buckets is a JSON array of [start, end] time pairs, oldest first; one row per bucket.
-- Plan: completed from job_completed_type_idx, one range per bucket and type (the types
-- found by a loose index scan of job_listing_type_name_idx, once); failed from
-- job_failed_idx (failed_at), one range per bucket. Only the jobs that finished in the
-- window are read, as index entries.
WITH RECURSIVE seen(type_name) AS (
    SELECT MIN(type_name) FROM {p}job
    UNION ALL
    SELECT (SELECT MIN(n.type_name) FROM {p}job n WHERE n.type_name > s.type_name)
    FROM seen s WHERE s.type_name IS NOT NULL
),
types(type_name) AS MATERIALIZED (SELECT type_name FROM seen WHERE type_name IS NOT NULL),
buckets(idx, start_at, end_at) AS (
    SELECT b.key, json_extract(b.value, '$[0]'), json_extract(b.value, '$[1]') FROM json_each(:buckets) b
)
SELECT k.idx,
    (SELECT COUNT(*) FROM types t, {p}job c INDEXED BY {p}job_completed_type_idx
     WHERE c.status = 'completed' AND c.type_name = t.type_name
       AND c.completed_at >= k.start_at AND c.completed_at < k.end_at) AS completed,
    (SELECT COUNT(*) FROM {p}job f INDEXED BY {p}job_failed_idx
     WHERE f.status = 'failed' AND f.failed_at >= k.start_at AND f.failed_at < k.end_at) AS failed
FROM buckets k
ORDER BY k.idx
