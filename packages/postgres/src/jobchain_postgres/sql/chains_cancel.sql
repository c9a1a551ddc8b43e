-- chains_cancel: cancel the last job of each chain (blocked, pending or running → cancelled,
-- cancelled_at, cancel_reason, lease cleared), all or nothing: when any chain of :named is missing
-- or already terminal, change nothing and report each chain's status instead. The other chains
-- (a cascade added them) are cancelled unless they became terminal meanwhile. The cancelled chains
-- go to the transaction-local setting jobchain.origins for jobs_propagate (next in the same
-- pipeline); it is set empty when nothing was cancelled.
-- Plan: primary key per chain root, job_chain_index_idx (backward) for its last job.
WITH clock AS (
    SELECT COALESCE(%(now)s::timestamptz, statement_timestamp()) AS now
),
state AS (
    SELECT c.chain_id, r.id IS NOT NULL AS found, l.id AS last_id, l.status, l.leased_by
    FROM unnest(%(chain_ids)s::uuid[]) AS c(chain_id)
    LEFT JOIN {job} AS r ON r.id = c.chain_id AND r.chain_index = 0
    LEFT JOIN LATERAL (
        SELECT x.id, x.status, x.leased_by
        FROM {job} AS x
        WHERE x.chain_id = r.id
        ORDER BY x.chain_index DESC
        LIMIT 1
    ) AS l ON true
),
cancelled AS (
    UPDATE {job} AS j
    SET status = 'cancelled',
        cancelled_at = clock.now,
        cancel_reason = %(reason)s::text,
        leased_by = NULL,
        leased_until = NULL
    FROM state AS s, clock
    WHERE j.id = s.last_id
      AND j.status IN ('blocked', 'pending', 'running')
      AND NOT %(refuse)s::boolean  -- an id that is no UUID was refused before this statement
      AND NOT EXISTS (
          SELECT 1 FROM state AS x
          WHERE x.chain_id = ANY (%(named)s::uuid[])
            AND (NOT x.found OR x.status IN ('completed', 'failed', 'cancelled'))
      )
    RETURNING j.*
),
origins AS (
    SELECT set_config(
        'jobchain.origins', COALESCE(string_agg(c.chain_id::text || ':cancelled', ','), ''), true
    ) AS o
    FROM cancelled AS c
)
SELECT
    s.chain_id::text AS _chain_id,
    s.found AS _found,
    s.status::text AS _status,
    s.leased_by AS _leased_by,
    (SELECT origins.o FROM origins) AS _origins,
    cancelled.*
FROM state AS s
LEFT JOIN cancelled ON cancelled.id = s.last_id
