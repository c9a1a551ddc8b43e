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
    -- The job's columns but the four only a failed or cancelled job sets (this one is not):
    -- fewer columns to send and load per job on the hot path (rows.py reads them as NULL).
    RETURNING j.id, j.chain_id, j.type_name, j.chain_type_name, j.chain_index, j.status, j.input,
        j.output, j.created_at, j.scheduled_at, j.attempt, j.last_attempt_at, j.last_attempt_error,
        j.leased_by, j.leased_until, j.lease_generation, j.completed_at, j.completed_by,
        j.deduplication_key, j.trace_context, j.chain_trace_context, j.first_attempt_at,
        j.attempt_started_at, j.rescued_at, j.rescued_from, j.rescue_reason, j.attempt_errors,
        j.attempt_base, j.runs_after_failed_blockers, j.priority, j.ordering_key
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
    -- The job's columns but the four only a failed or cancelled job sets (this one is not):
    -- fewer columns to send and load per job on the hot path (rows.py reads them as NULL).
    RETURNING d.id, d.chain_id, d.type_name, d.chain_type_name, d.chain_index, d.status, d.input,
        d.output, d.created_at, d.scheduled_at, d.attempt, d.last_attempt_at, d.last_attempt_error,
        d.leased_by, d.leased_until, d.lease_generation, d.completed_at, d.completed_by,
        d.deduplication_key, d.trace_context, d.chain_trace_context, d.first_attempt_at,
        d.attempt_started_at, d.rescued_at, d.rescued_from, d.rescue_reason, d.attempt_errors,
        d.attempt_base, d.runs_after_failed_blockers, d.priority, d.ordering_key
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
