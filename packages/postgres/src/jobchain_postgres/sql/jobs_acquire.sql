-- jobs_acquire: claim up to :limit eligible pending jobs of types without limits, in claim order,
-- and say whether more were waiting, in one statement. :leases[i] is the lease of :type_names[i],
-- so a worker serving types with different leases claims them together. Paused types (a
-- type_control row with paused_at) are left out. Types with limits: jobs_acquire_limited.sql.
-- Claim order (JobsAcquire): aged jobs (due since :now - :aging or earlier) first, FIFO; then the
-- others by priority descending, FIFO within a priority. Per type, the first :limit jobs in that
-- order are always among two index-ordered prefixes of at most :limit rows each:
--   C1 job_acquisition_idx (FIFO), skipping the jobs of negative priority that are not aged yet
--      (so its scan reads past at most the negative-priority jobs that became due within :aging);
--   C2 job_priority_idx (priority <> 0), by priority descending then FIFO.
-- Every job ahead of a wanted job in the prefix that holds it is ahead of it in the claim order
-- too (in C1: aged jobs and jobs of priority >= 0 due earlier; in C2: higher priorities, aged
-- jobs, and its own priority due earlier), so a job among the first :limit in the claim order is
-- among the first :limit of its prefix: aged jobs and priority 0 in C1, the others in C2 (the
-- design notes' third prefix, priority < 0 alone, is not needed). Only the union (at most
-- 2 x :limit rows per type) is sorted, never the pending set. job_priority_idx holds only jobs of
-- priority <> 0: empty while nobody uses priorities, when C2 is one empty index probe.
-- Plan: one ordered index scan per prefix and type (LATERAL); FOR UPDATE SKIP LOCKED, so concurrent
-- claimers neither wait for nor share a row. Leaky: a claim locks up to 2 x :limit rows per type
-- until commit; those it does not claim stay pending and other claimers skip them until this
-- transaction ends.
WITH candidates AS (
    SELECT c.id, c.scheduled_at, c.created_at, c.priority, t.lease
    FROM unnest(%(type_names)s::text[], %(leases)s::interval[]) AS t(type_name, lease)
    CROSS JOIN LATERAL (
        SELECT c1.* FROM (
            SELECT j.id, j.scheduled_at, j.created_at, j.priority
            FROM {job} AS j
            WHERE j.type_name = t.type_name
              AND j.status = 'pending'
              AND j.scheduled_at <= COALESCE(%(now)s::timestamptz, statement_timestamp())
              AND (j.priority >= 0
                   OR j.scheduled_at <= COALESCE(%(now)s::timestamptz, statement_timestamp()) - %(aging)s::interval)
            -- type_name is fixed here; naming it lets the planner read the index in order (no sort).
            ORDER BY j.type_name, j.scheduled_at, j.created_at, j.id
            LIMIT %(limit)s
            FOR UPDATE SKIP LOCKED
        ) AS c1
        UNION
        SELECT c2.* FROM (
            SELECT j.id, j.scheduled_at, j.created_at, j.priority
            FROM {job} AS j
            WHERE j.type_name = t.type_name
              AND j.status = 'pending'
              AND j.priority <> 0
              AND j.scheduled_at <= COALESCE(%(now)s::timestamptz, statement_timestamp())
            ORDER BY j.type_name, j.priority DESC, j.scheduled_at, j.created_at, j.id
            LIMIT %(limit)s
            FOR UPDATE SKIP LOCKED
        ) AS c2
    ) AS c
    WHERE NOT EXISTS (
        SELECT 1 FROM {type_control} AS p WHERE p.type_name = t.type_name AND p.paused_at IS NOT NULL
    )
),
chosen AS (
    SELECT candidates.id, candidates.lease FROM candidates
    ORDER BY
        candidates.scheduled_at <= COALESCE(%(now)s::timestamptz, statement_timestamp()) - %(aging)s::interval DESC,
        CASE
            WHEN candidates.scheduled_at <= COALESCE(%(now)s::timestamptz, statement_timestamp()) - %(aging)s::interval
            THEN 0 ELSE candidates.priority
        END DESC,
        candidates.scheduled_at, candidates.created_at, candidates.id
    LIMIT %(limit)s
),
claimed AS (
    UPDATE {job} AS j
    SET status = 'running',
        attempt = j.attempt + 1,
        lease_generation = j.lease_generation + 1,
        leased_by = %(worker_id)s,
        leased_until = COALESCE(%(now)s::timestamptz, statement_timestamp()) + chosen.lease,
        first_attempt_at = COALESCE(j.first_attempt_at, %(now)s::timestamptz, statement_timestamp()),
        attempt_started_at = COALESCE(%(now)s::timestamptz, statement_timestamp())
    FROM chosen
    WHERE j.id = chosen.id
    -- The job's columns but the four only a failed or cancelled job sets (this one is not):
    -- fewer columns to send and load per job on the hot path (rows.py reads them as NULL).
    RETURNING j.id, j.chain_id, j.type_name, j.chain_type_name, j.chain_index, j.status, j.input,
        j.output, j.created_at, j.scheduled_at, j.attempt, j.last_attempt_at, j.last_attempt_error,
        j.leased_by, j.leased_until, j.lease_generation, j.completed_at, j.completed_by,
        j.deduplication_key, j.trace_context, j.chain_trace_context, j.first_attempt_at,
        j.attempt_started_at, j.rescued_at, j.rescued_from, j.rescue_reason, j.attempt_errors,
        j.attempt_base, j.runs_after_failed_blockers, j.priority, j.ordering_key
)
SELECT
    (SELECT count(*) FROM claimed) = %(limit)s AND EXISTS (
        SELECT 1 FROM {job} AS m
        WHERE m.type_name = ANY (%(type_names)s::text[])
          AND m.status = 'pending'
          AND m.scheduled_at <= COALESCE(%(now)s::timestamptz, statement_timestamp())
          AND m.id NOT IN (SELECT chosen.id FROM chosen)
          AND NOT EXISTS (
              SELECT 1 FROM {type_control} AS p WHERE p.type_name = m.type_name AND p.paused_at IS NOT NULL
          )
    ) AS _has_more,
    claimed.*
FROM claimed
