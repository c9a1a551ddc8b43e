-- job_wait: a running job waits for chains (dynamic blockers, contracts.scheduling JobWait). The
-- caller must own the job, as for a worker's reschedule; a refusal changes nothing and reports
-- status, owner and cancel reason. Then a chain that is not one (chain_not_found:<id>, the first in
-- the order given) or the job's own chain (own_chain) changes nothing and is reported in
-- _problems. Otherwise the chains not yet among the job's blockers are appended after them (in
-- the order given, resolves_on_any_end = :runs_after_failed), the lease is cleared,
-- last_attempt_at = now and attempt_base + 1 (the attempt uses none of the budget), and the job
-- becomes: failed, by its first blocker chain (declared order) that is failed or cancelled and
-- does not run after failure (runs_after_failed_blockers or resolves_on_any_end), recorded as
-- propagation records it; else blocked while any blocker chain is not terminal
-- (open_blocker_count = their number); else pending at now.
-- Every blocker chain's last job is read FOR KEY SHARE, as jobs_create reads it: a completion,
-- failure or cancel in flight is waited for and then reported as stale:<id> (nothing written; the
-- adapter sends the statement again with a fresh snapshot), and one that comes later waits for
-- this transaction and then sees the new blocker rows.
-- A failed job that is its chain's last one puts its chain in jobchain.origins for jobs_propagate
-- (next in the same pipeline); the setting is emptied otherwise.
-- Plan: primary key; job_blocker primary key for the job's blockers; primary key and
-- job_chain_index_idx (backward) per blocker chain.
WITH
clock AS (
    SELECT COALESCE(%(now)s::timestamptz, statement_timestamp()) AS now
),
target AS (
    SELECT j.id, j.chain_id, j.chain_index, j.status, j.leased_by, j.lease_generation, j.cancel_reason,
           j.runs_after_failed_blockers AS runs_after
    FROM {job} AS j
    WHERE j.id = %(job_id)s::uuid
),
owned AS MATERIALIZED (
    SELECT t.*
    FROM target AS t
    WHERE t.status = 'running'
      AND t.leased_by = %(worker_id)s::text
      AND (%(lease_generation)s::bigint IS NULL OR t.lease_generation = %(lease_generation)s::bigint)
),
wanted AS (
    -- The chains given, each at its first position.
    SELECT DISTINCT ON (w.chain_id) w.chain_id, w.pos
    FROM unnest(%(chain_ids)s::uuid[]) WITH ORDINALITY AS w(chain_id, pos)
    WHERE EXISTS (SELECT 1 FROM owned)
    ORDER BY w.chain_id, w.pos
),
declared AS (
    SELECT b.blocked_by_chain_id AS chain_id, b."index" AS idx, b.resolves_on_any_end AS any_end
    FROM {job_blocker} AS b
    WHERE b.job_id = %(job_id)s::uuid AND EXISTS (SELECT 1 FROM owned)
),
added AS (
    SELECT w.chain_id,
           ((SELECT COALESCE(max(d.idx), -1) FROM declared AS d) + row_number() OVER (ORDER BY w.pos))::integer
               AS idx,
           %(runs_after_failed)s::boolean AS any_end
    FROM wanted AS w
    WHERE w.chain_id NOT IN (SELECT d.chain_id FROM declared AS d)
),
blocker_state AS MATERIALIZED (
    SELECT b.chain_id, b.idx, b.any_end, r.chain_type_name AS type_name, last.id AS last_id,
           last.status AS last_status
    FROM (SELECT * FROM declared UNION ALL SELECT * FROM added) AS b
    LEFT JOIN {job} AS r ON r.id = b.chain_id AND r.chain_index = 0
    LEFT JOIN LATERAL (
        SELECT c.id, c.status
        FROM {job} AS c
        WHERE c.chain_id = r.id
        ORDER BY c.chain_index DESC
        LIMIT 1
        FOR KEY SHARE
    ) AS last ON true
),
problems AS (
    SELECT 'own_chain' AS problem, 0::bigint AS pos
    FROM owned AS o
    WHERE o.chain_id IN (SELECT w.chain_id FROM wanted AS w)
    UNION ALL
    SELECT 'chain_not_found:' || w.chain_id::text, w.pos
    FROM wanted AS w
    JOIN blocker_state AS s ON s.chain_id = w.chain_id
    WHERE s.last_status IS NULL
    UNION ALL
    -- A blocker's last job ended after this statement's snapshot (the lock read waited for it).
    SELECT 'stale:' || s.chain_id::text, 0
    FROM blocker_state AS s
    JOIN {job} AS seen ON seen.id = s.last_id
    WHERE s.last_status IN ('completed', 'failed', 'cancelled')
      AND seen.status NOT IN ('completed', 'failed', 'cancelled')
),
cause AS (
    SELECT s.chain_id,
           'blocker chain ' || s.chain_id::text || ' (' || s.type_name || ') '
               || CASE WHEN s.last_status = 'cancelled' THEN 'was cancelled' ELSE 'failed' END AS message,
           CASE WHEN s.last_status = 'cancelled' THEN 'BlockerChainCancelled' ELSE 'BlockerChainFailed' END
               AS error_type
    FROM blocker_state AS s, owned AS o
    WHERE s.last_status IN ('failed', 'cancelled') AND NOT (o.runs_after OR s.any_end)
    ORDER BY s.idx
    LIMIT 1
),
open_chains AS (
    SELECT count(*)::integer AS n, array_agg(s.chain_id::text ORDER BY s.idx) AS chain_ids
    FROM blocker_state AS s
    WHERE s.last_status NOT IN ('completed', 'failed', 'cancelled')
),
new_blockers AS (
    INSERT INTO {job_blocker} (job_id, blocked_by_chain_id, "index", resolves_on_any_end)
    SELECT %(job_id)s::uuid, a.chain_id, a.idx, a.any_end
    FROM added AS a
    WHERE NOT EXISTS (SELECT 1 FROM problems)
    ORDER BY a.idx
),
waited AS (
    UPDATE {job} AS j
    SET status = CASE
            WHEN c.chain_id IS NOT NULL THEN 'failed'
            WHEN oc.n > 0 THEN 'blocked'
            ELSE 'pending'
        END::{job_status},
        open_blocker_count = CASE WHEN c.chain_id IS NULL THEN oc.n ELSE j.open_blocker_count END,
        scheduled_at = CASE WHEN c.chain_id IS NULL AND oc.n = 0 THEN clock.now ELSE j.scheduled_at END,
        last_attempt_at = clock.now,
        attempt_base = j.attempt_base + 1,
        leased_by = NULL,
        leased_until = NULL,
        failed_at = CASE WHEN c.chain_id IS NOT NULL THEN clock.now END,
        failed_by_chain_id = c.chain_id,
        last_attempt_error = COALESCE(c.message, j.last_attempt_error),
        failed_error_type = COALESCE(c.error_type, j.failed_error_type),
        attempt_errors = CASE
            WHEN c.chain_id IS NULL THEN j.attempt_errors
            ELSE (
                SELECT jsonb_agg(e.entry ORDER BY e.n)
                FROM jsonb_array_elements(
                    COALESCE(j.attempt_errors, '[]'::jsonb) || jsonb_build_array(jsonb_build_object(
                        'attempt', j.attempt,
                        'worker_id', NULL,
                        'error_type', c.error_type,
                        'message', c.message,
                        'traceback', NULL,
                        'at', to_char(clock.now AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"')
                    ))
                ) WITH ORDINALITY AS e(entry, n)
                WHERE e.n > jsonb_array_length(COALESCE(j.attempt_errors, '[]'::jsonb)) + 1 - %(kept)s::integer
            )
        END
    FROM owned AS o
    CROSS JOIN clock
    CROSS JOIN open_chains AS oc
    LEFT JOIN cause AS c ON true
    WHERE j.id = o.id AND NOT EXISTS (SELECT 1 FROM problems)
    RETURNING j.*
),
origins AS (
    SELECT set_config('jobchain.origins', COALESCE(string_agg(w.chain_id::text || ':failed', ','), ''), true) AS o
    FROM waited AS w
    WHERE w.status = 'failed'
      AND NOT EXISTS (
          SELECT 1 FROM {job} AS n WHERE n.chain_id = w.chain_id AND n.chain_index = w.chain_index + 1
      )
)
SELECT
    t.status::text AS _status,
    t.leased_by AS _leased_by,
    t.cancel_reason AS _cancel_reason,
    (SELECT array_agg(p.problem ORDER BY p.pos) FROM problems AS p) AS _problems,
    (SELECT origins.o FROM origins) AS _origins,
    (SELECT oc.chain_ids FROM open_chains AS oc) AS _incomplete,
    waited.*
FROM (SELECT 1) AS one
LEFT JOIN target AS t ON true
LEFT JOIN waited ON true
