-- jobs_complete: job_complete for many jobs in one statement (a worker's group commit); each item
-- is decided on its own exactly as job_complete decides it. The ids must be distinct.
-- Plan: primary key per item; job_chain_index_idx for the continuation checks;
-- job_blocker_chain_idx for the dependents. Sent after jobs_lock in one pipeline, and decides only
-- the rows that statement locked (jobchain.locked; see jobs_lock.sql for why): an item whose row
-- another transaction held reports _busy and the adapter completes it alone, on job_complete's
-- waiting path. A dependent several of whose blocker chains complete here is
-- decremented once by their number (an UPDATE changes a row at most once per statement), and
-- is reported under the last of those items.
WITH items AS (
    -- One JSON document for the group (cheaper to send than one array per column). A JSON null
    -- output arrives as SQL NULL here and is stored as JSON null, as job_complete stores it.
    SELECT i.position, i.job_id, i.worker_id, i.lease_generation,
           COALESCE(i.output, 'null'::jsonb) AS output, i.now
    FROM jsonb_to_recordset(%(items)s::jsonb) AS i(
        position bigint, job_id uuid, worker_id text, lease_generation bigint, output jsonb, now timestamptz
    )
),
target AS (
    SELECT j.id, j.chain_id, j.chain_index, j.status, j.leased_by, j.lease_generation, j.cancel_reason
    FROM {job} AS j
    WHERE j.id IN (SELECT items.job_id FROM items)
      AND j.id = ANY (string_to_array(current_setting('jobchain.locked', true), ',')::uuid[])
    FOR UPDATE SKIP LOCKED
),
completed AS (
    UPDATE {job} AS j
    SET status = 'completed',
        output = i.output,
        completed_at = COALESCE(i.now, statement_timestamp()),
        completed_by = i.worker_id,
        leased_by = NULL,
        leased_until = NULL,
        last_attempt_error = NULL
    FROM target AS t
    JOIN items AS i ON i.job_id = t.id
    WHERE j.id = t.id
      AND t.status NOT IN ('completed', 'failed', 'cancelled')
      AND (
          i.worker_id IS NULL
          OR (
              t.status = 'running'
              AND t.leased_by = i.worker_id
              AND (i.lease_generation IS NULL OR t.lease_generation = i.lease_generation)
          )
      )
    RETURNING j.*
),
chain_done AS (
    SELECT c.id AS job_id, c.chain_id, i.position, COALESCE(i.now, statement_timestamp()) AS now
    FROM completed AS c
    JOIN items AS i ON i.job_id = c.id
    WHERE NOT EXISTS (
        SELECT 1 FROM {job} AS n WHERE n.chain_id = c.chain_id AND n.chain_index = c.chain_index + 1
    )
),
releases AS (
    SELECT b.job_id, count(*)::integer AS chains, max(cd.position) AS position, max(cd.now) AS now
    FROM {job_blocker} AS b
    JOIN chain_done AS cd ON cd.chain_id = b.blocked_by_chain_id
    GROUP BY b.job_id
),
unblocked AS (
    UPDATE {job} AS d
    SET open_blocker_count = d.open_blocker_count - r.chains,
        status = CASE WHEN d.open_blocker_count <= r.chains THEN 'pending' ELSE 'blocked' END::{job_status},
        scheduled_at = CASE
            WHEN d.open_blocker_count <= r.chains THEN GREATEST(d.scheduled_at, r.now)
            ELSE d.scheduled_at
        END
    FROM releases AS r
    WHERE d.id = r.job_id
      AND d.status = 'blocked'
    RETURNING d.*
)
SELECT
    'target' AS _kind,
    i.position AS _position,
    t.status IS NULL AND EXISTS (SELECT 1 FROM {job} AS x WHERE x.id = i.job_id) AS _busy,
    t.status::text AS _status,
    t.leased_by AS _leased_by,
    t.cancel_reason AS _cancel_reason,
    EXISTS (SELECT 1 FROM chain_done AS cd WHERE cd.job_id = i.job_id) AS _chain_completed,
    completed.*
FROM items AS i
LEFT JOIN target AS t ON t.id = i.job_id
LEFT JOIN completed ON completed.id = i.job_id
UNION ALL
SELECT 'unblocked', r.position, false, NULL, NULL, NULL, NULL, u.*
FROM unblocked AS u
JOIN releases AS r ON r.job_id = u.id
WHERE u.status = 'pending'
