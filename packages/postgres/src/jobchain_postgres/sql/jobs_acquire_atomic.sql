-- jobs_acquire_atomic: jobs_acquire for distributed SQL (claim="atomic-update"): no SKIP LOCKED.
-- :leases[i] is the lease of :type_names[i]; paused types are left out; the claim order and its
-- two index-ordered prefixes per type (C1 job_acquisition_idx, C2 job_priority_idx) are those of
-- jobs_acquire.sql. Types with limits: jobs_acquire_atomic_limited.sql.
-- Plan: pick candidates without locks, then one UPDATE … FROM that re-checks the status, so a
-- job another claimer won meanwhile is dropped (the caller may receive fewer jobs, never a
-- shared one). _lost counts candidates another claimer won meanwhile; the adapter then claims
-- again with a fresh snapshot (only under contention). One ordered index scan per prefix and
-- type. Leaky on PostgreSQL: a claim waits for a transaction that holds a candidate row.
WITH next AS (
    SELECT c.id, t.lease
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
        ) AS c2
    ) AS c
    WHERE NOT EXISTS (
        SELECT 1 FROM {type_control} AS p WHERE p.type_name = t.type_name AND p.paused_at IS NOT NULL
    )
    ORDER BY
        c.scheduled_at <= COALESCE(%(now)s::timestamptz, statement_timestamp()) - %(aging)s::interval DESC,
        CASE
            WHEN c.scheduled_at <= COALESCE(%(now)s::timestamptz, statement_timestamp()) - %(aging)s::interval
            THEN 0 ELSE c.priority
        END DESC,
        c.scheduled_at, c.created_at, c.id
    LIMIT %(limit)s
),
claimed AS (
    UPDATE {job} AS j
    SET status = 'running',
        attempt = j.attempt + 1,
        lease_generation = j.lease_generation + 1,
        leased_by = %(worker_id)s,
        leased_until = COALESCE(%(now)s::timestamptz, statement_timestamp()) + next.lease,
        first_attempt_at = COALESCE(j.first_attempt_at, %(now)s::timestamptz, statement_timestamp()),
        attempt_started_at = COALESCE(%(now)s::timestamptz, statement_timestamp())
    FROM next
    WHERE j.id = next.id
      AND j.status = 'pending'
      AND j.scheduled_at <= COALESCE(%(now)s::timestamptz, statement_timestamp())
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
    (SELECT count(*) FROM next) - (SELECT count(*) FROM claimed) AS _lost,
    (SELECT count(*) FROM claimed) = %(limit)s AND EXISTS (
        SELECT 1 FROM {job} AS m
        WHERE m.type_name = ANY (%(type_names)s::text[])
          AND m.status = 'pending'
          AND m.scheduled_at <= COALESCE(%(now)s::timestamptz, statement_timestamp())
          AND m.id NOT IN (SELECT next.id FROM next)
          AND NOT EXISTS (
              SELECT 1 FROM {type_control} AS p WHERE p.type_name = m.type_name AND p.paused_at IS NOT NULL
          )
    ) AS _has_more,
    claimed.*
FROM (SELECT 1) AS one
LEFT JOIN claimed ON true
