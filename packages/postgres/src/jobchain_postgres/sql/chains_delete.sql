-- chains_delete: delete chains (every job and blocker row); with :cascade, first add every chain
-- that blocks a job of the set, recursively. All or nothing: when a job outside the set is blocked
-- by a chain inside it, delete nothing and list those references. An ordering_key row whose last
-- chain is deleted goes too (unless a creation of that key holds it: its new root then takes the
-- row over, or chains_prune's locks_before sweep deletes it later).
-- Plan: recursive CTE over job_chain_index_idx and the job_blocker primary key; the doomed rows
-- are locked FOR UPDATE in ctid (physical) order so concurrent deletions take locks in the same
-- order and never deadlock.
WITH RECURSIVE
requested AS (
    SELECT r.id
    FROM {job} AS r
    WHERE r.id = ANY (%(chain_ids)s::uuid[]) AND r.chain_index = 0
),
closure (chain_id) AS (
    SELECT requested.id FROM requested
    UNION
    SELECT b.blocked_by_chain_id
    FROM closure AS c
    JOIN {job} AS j ON j.chain_id = c.chain_id
    JOIN {job_blocker} AS b ON b.job_id = j.id
    WHERE %(cascade)s::boolean
),
doomed AS (
    SELECT j.id
    FROM {job} AS j
    WHERE j.chain_id IN (SELECT closure.chain_id FROM closure)
    ORDER BY j.ctid
    FOR UPDATE
),
refs AS (
    SELECT b.blocked_by_chain_id AS chain_id, b.job_id, dependent.created_at
    FROM {job_blocker} AS b
    JOIN {job} AS dependent ON dependent.id = b.job_id
    WHERE b.blocked_by_chain_id IN (SELECT closure.chain_id FROM closure)
      AND dependent.chain_id NOT IN (SELECT closure.chain_id FROM closure)
),
gone_blockers AS (
    DELETE FROM {job_blocker} AS b
    USING doomed
    WHERE b.job_id = doomed.id AND NOT EXISTS (SELECT 1 FROM refs)
    RETURNING b.job_id
),
gone AS (
    DELETE FROM {job} AS j
    USING doomed
    WHERE j.id = doomed.id AND NOT EXISTS (SELECT 1 FROM refs)
    RETURNING j.*
),
gone_keys AS (
    DELETE FROM {ordering_key} AS o
    WHERE o.ctid IN (
        SELECT x.ctid
        FROM {ordering_key} AS x
        JOIN gone AS g ON g.ordering_key = x.key AND g.id = x.last_chain_id AND g.chain_index = 0
        FOR UPDATE OF x SKIP LOCKED
    )
)
SELECT
    (SELECT array_agg(ARRAY[refs.chain_id::text, refs.job_id::text] ORDER BY refs.created_at, refs.job_id, refs.chain_id)
     FROM refs) AS _references,
    (SELECT array_agg(g.id::text ORDER BY g.created_at, g.id) FROM gone AS g WHERE g.status = 'running')
        AS _running,
    (SELECT count(*) FROM gone_blockers) AS _blockers_deleted,
    r.*,
    l.*
FROM (SELECT 1) AS one
LEFT JOIN gone AS r ON r.chain_index = 0
LEFT JOIN LATERAL (
    SELECT g.* FROM gone AS g WHERE g.chain_id = r.id ORDER BY g.chain_index DESC LIMIT 1
) AS l ON true
