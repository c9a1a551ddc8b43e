-- chains_prune: retention. Delete up to :limit terminal chains that finished before the cutoff of
-- their status (NULL: keep that status), oldest finish first, with every job and blocker row, as
-- chains_delete does. One caller at a time: a transaction-level advisory lock keyed on the schema
-- and prefix (:key), tried without waiting; when another transaction holds it, _got is false and
-- nothing is read or deleted. A candidate that blocks a job of a chain that is not a candidate is
-- skipped before the limit applies (it never crowds out others); within the batch, a chain that
-- blocks a job outside it, directly or through other chains of the batch (stuck), is kept for a
-- later batch. A reference through a resolves_on_any_end blocker (an ordering key's previous chain,
-- a wait with runs_after_failed) holds nothing back: that blocker row goes with the chain, and the
-- dependent keeps its other blockers (the chain is terminal, so it counted as resolved already).
-- :locks_before also deletes deduplication lock rows last used before it (up to :limit),
-- then, within what is left of :limit, ordering_key rows last used before it whose last chain is
-- gone (pruned here or before); rows a creation holds are skipped (SKIP LOCKED), as are rows used
-- since (a creation in flight dates its row now). _locks_deleted counts both kinds.
-- Plan: the batch can be read in order and stop at :limit, so when the chains old enough far
-- outnumber it (a retention switched on over a long history, or one that fell behind) a batch
-- costs about what one that keeps up costs (bench/prune_cost.py). Completed jobs per type (a loose scan of job_finished_idx finds the types with finished
-- jobs, one probe each), each a range of job_finished_idx in completed_at order bounded by
-- completed_at < cutoff, at most :limit rows per type; failed and cancelled jobs through
-- job_listing_status_idx (partial: the rare statuses), bounded by created_at < cutoff (a job is
-- created before it finishes). job_chain_index_idx for the continuation check; the outsider check
-- reads job_blocker_chain_idx (one probe per candidate, usually empty) and only for a reference
-- found, the referencing chain's jobs (job_chain_index_idx) to see whether it qualifies too. The
-- doomed rows are locked FOR UPDATE in ctid order, as chains_delete locks them; a chain with a row
-- written since the statement's snapshot (its xmin changed: a retry that committed while the prune
-- waited for the lock) is kept for a later batch instead of deleted unseen. The two bookkeeping
-- sweeps read their tables in physical order and stop at the limit (no index: a sweep with
-- nothing to delete reads every row last used before :locks_before).
-- Sent between jit_off and jit_restore: the estimate of a statement this size passes the JIT
-- thresholds on any real table, and compiling it took 1.9 s of a 2.3 s batch (soak, 2026-11-27).
WITH RECURSIVE
lock AS MATERIALIZED (
    SELECT pg_try_advisory_xact_lock(hashtextextended(%(key)s::text, 0)) AS got
),
finished_types (type_name) AS (
    -- The types with a completed job, in order: one probe of job_finished_idx per type.
    (SELECT j.type_name
     FROM {job} AS j
     WHERE (SELECT lock.got FROM lock)
       AND %(completed_before)s::timestamptz IS NOT NULL
       AND j.status = 'completed'
     ORDER BY j.type_name
     LIMIT 1)
    UNION ALL
    SELECT (
        SELECT j.type_name
        FROM {job} AS j
        WHERE j.type_name > t.type_name AND j.status = 'completed'
        ORDER BY j.type_name
        LIMIT 1
    )
    FROM finished_types AS t
    WHERE t.type_name IS NOT NULL
),
-- A chain qualifies when it finished before the cutoff of its status: its last job completed (no
-- job continues it), or one of its jobs failed or was cancelled. A qualifying chain that blocks a
-- job of a chain that does not qualify (through a blocker that waits for completion) is skipped
-- before the limit applies, so it never crowds out others.
batch AS MATERIALIZED (
    SELECT c.chain_id, c.chain_type_name, c.status, c.finished_at
    FROM (
        SELECT j.chain_id, j.chain_type_name, 'completed' AS status, j.completed_at AS finished_at
        FROM finished_types AS t
        CROSS JOIN LATERAL (
            SELECT c.chain_id, c.chain_type_name, c.completed_at
            FROM {job} AS c
            WHERE c.type_name = t.type_name
              AND c.status = 'completed'
              AND c.completed_at < %(completed_before)s::timestamptz
              AND NOT EXISTS (
                  SELECT 1 FROM {job} AS n WHERE n.chain_id = c.chain_id AND n.chain_index = c.chain_index + 1
              )
              AND NOT EXISTS (
                  SELECT 1
                  FROM {job_blocker} AS b
                  JOIN {job} AS d ON d.id = b.job_id
                  WHERE b.blocked_by_chain_id = c.chain_id
                    AND NOT b.resolves_on_any_end
                    AND NOT EXISTS (
                        SELECT 1
                        FROM {job} AS e
                        WHERE e.chain_id = d.chain_id
                          AND (
                              (e.status = 'completed'
                               AND e.completed_at < %(completed_before)s::timestamptz
                               AND NOT EXISTS (
                                   SELECT 1 FROM {job} AS f
                                   WHERE f.chain_id = e.chain_id AND f.chain_index = e.chain_index + 1
                               ))
                              OR (e.status = 'failed'
                                  AND e.created_at < %(failed_before)s::timestamptz
                                  AND e.failed_at < %(failed_before)s::timestamptz)
                              OR (e.status = 'cancelled'
                                  AND e.created_at < %(cancelled_before)s::timestamptz
                                  AND e.cancelled_at < %(cancelled_before)s::timestamptz)
                          )
                    )
              )
            ORDER BY c.completed_at, c.chain_id
            LIMIT %(limit)s
        ) AS j
        UNION ALL
        SELECT j.chain_id, j.chain_type_name, 'failed', j.failed_at
        FROM {job} AS j
        WHERE (SELECT lock.got FROM lock)
          AND %(failed_before)s::timestamptz IS NOT NULL
          AND j.status = 'failed'
          AND j.created_at < %(failed_before)s::timestamptz
          AND j.failed_at < %(failed_before)s::timestamptz
        UNION ALL
        SELECT j.chain_id, j.chain_type_name, 'cancelled', j.cancelled_at
        FROM {job} AS j
        WHERE (SELECT lock.got FROM lock)
          AND %(cancelled_before)s::timestamptz IS NOT NULL
          AND j.status = 'cancelled'
          AND j.created_at < %(cancelled_before)s::timestamptz
          AND j.cancelled_at < %(cancelled_before)s::timestamptz
    ) AS c
    -- The same outsider check for the failed and cancelled (completed ones had it before their limit).
    WHERE c.status = 'completed' OR NOT EXISTS (
        SELECT 1
        FROM {job_blocker} AS b
        JOIN {job} AS d ON d.id = b.job_id
        WHERE b.blocked_by_chain_id = c.chain_id
          AND NOT b.resolves_on_any_end
          AND NOT EXISTS (
              SELECT 1
              FROM {job} AS e
              WHERE e.chain_id = d.chain_id
                AND (
                    (e.status = 'completed'
                     AND e.completed_at < %(completed_before)s::timestamptz
                     AND NOT EXISTS (
                         SELECT 1 FROM {job} AS f
                         WHERE f.chain_id = e.chain_id AND f.chain_index = e.chain_index + 1
                     ))
                    OR (e.status = 'failed'
                        AND e.created_at < %(failed_before)s::timestamptz
                        AND e.failed_at < %(failed_before)s::timestamptz)
                    OR (e.status = 'cancelled'
                        AND e.created_at < %(cancelled_before)s::timestamptz
                        AND e.cancelled_at < %(cancelled_before)s::timestamptz)
                )
          )
    )
    ORDER BY c.finished_at, c.chain_id
    LIMIT %(limit)s
),
stuck (chain_id) AS (
    SELECT t.chain_id
    FROM batch AS t
    WHERE EXISTS (
        SELECT 1
        FROM {job_blocker} AS b
        JOIN {job} AS d ON d.id = b.job_id
        WHERE b.blocked_by_chain_id = t.chain_id
          AND NOT b.resolves_on_any_end
          AND d.chain_id NOT IN (SELECT batch.chain_id FROM batch)
    )
    UNION
    SELECT b.blocked_by_chain_id
    FROM stuck AS s
    JOIN {job} AS d ON d.chain_id = s.chain_id
    JOIN {job_blocker} AS b ON b.job_id = d.id
    WHERE b.blocked_by_chain_id IN (SELECT batch.chain_id FROM batch)
      AND NOT b.resolves_on_any_end
),
chosen AS MATERIALIZED (
    SELECT t.* FROM batch AS t WHERE t.chain_id NOT IN (SELECT stuck.chain_id FROM stuck)
),
seen AS MATERIALIZED (
    -- The chosen chains' rows as this statement's snapshot has them.
    SELECT j.id, j.chain_id, j.xmin AS version
    FROM {job} AS j
    WHERE j.chain_id IN (SELECT chosen.chain_id FROM chosen)
),
locked AS MATERIALIZED (
    -- FOR UPDATE waits for a transaction writing a row and returns the row as it committed
    -- (a deleted row not at all).
    SELECT j.id, j.chain_id, j.xmin AS version
    FROM {job} AS j
    WHERE j.chain_id IN (SELECT chosen.chain_id FROM chosen)
    ORDER BY j.ctid
    FOR UPDATE
),
changed (chain_id) AS (
    -- A chain written since the snapshot (a dead letter retried while the prune waited for its
    -- lock, a row deleted) may no longer qualify: it is kept, and a later batch looks again.
    SELECT coalesce(l.chain_id, s.chain_id)
    FROM locked AS l
    FULL JOIN seen AS s ON s.id = l.id
    WHERE s.version IS DISTINCT FROM l.version
),
doomed_chains AS MATERIALIZED (
    SELECT c.* FROM chosen AS c WHERE c.chain_id NOT IN (SELECT changed.chain_id FROM changed)
),
doomed AS (
    SELECT l.id
    FROM locked AS l
    WHERE l.chain_id IN (SELECT doomed_chains.chain_id FROM doomed_chains)
),
gone_blockers AS (
    DELETE FROM {job_blocker} AS b
    USING doomed
    WHERE b.job_id = doomed.id
),
gone_any_end AS (
    -- The resolves_on_any_end rows naming a doomed chain from a job that stays
    -- (job_blocker_chain_idx).
    DELETE FROM {job_blocker} AS b
    WHERE b.blocked_by_chain_id IN (SELECT doomed_chains.chain_id FROM doomed_chains)
      AND b.resolves_on_any_end
      AND b.job_id NOT IN (SELECT doomed.id FROM doomed)
),
gone AS (
    -- By key (job_pkey), one probe per row: a join to the doomed rows was planned as a hash of the
    -- whole table on tables of a few hundred thousand rows.
    DELETE FROM {job} AS j
    WHERE j.id = ANY (ARRAY(SELECT doomed.id FROM doomed))
    RETURNING j.id, j.chain_index, j.ordering_key
),
gone_locks AS (
    DELETE FROM {deduplication_lock} AS k
    WHERE k.ctid IN (
        SELECT x.ctid
        FROM {deduplication_lock} AS x
        WHERE (SELECT lock.got FROM lock)
          AND %(locks_before)s::timestamptz IS NOT NULL
          AND x.last_started_at < %(locks_before)s::timestamptz
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    )
    RETURNING 1
),
gone_keys AS (
    DELETE FROM {ordering_key} AS o
    WHERE o.ctid IN (
        SELECT x.ctid
        FROM {ordering_key} AS x
        WHERE (SELECT lock.got FROM lock)
          AND %(locks_before)s::timestamptz IS NOT NULL
          AND x.updated_at < %(locks_before)s::timestamptz
          AND (
              (x.key, x.last_chain_id) IN (
                  SELECT g.ordering_key, g.id FROM gone AS g WHERE g.chain_index = 0 AND g.ordering_key IS NOT NULL
              )
              OR NOT EXISTS (SELECT 1 FROM {job} AS r WHERE r.id = x.last_chain_id)
          )
        LIMIT GREATEST(%(limit)s - (SELECT count(*) FROM gone_locks), 0)
        FOR UPDATE SKIP LOCKED
    )
    RETURNING 1
)
SELECT
    (SELECT lock.got FROM lock) AS _got,
    (SELECT count(*) FROM gone_locks) + (SELECT count(*) FROM gone_keys) AS _locks_deleted,
    (SELECT count(*) FROM gone) AS _jobs,
    d.chain_id::text AS _chain_id,
    d.chain_type_name AS _type_name,
    d.status AS _status
FROM (SELECT 1) AS one
LEFT JOIN doomed_chains AS d ON true
ORDER BY d.finished_at, d.chain_id
