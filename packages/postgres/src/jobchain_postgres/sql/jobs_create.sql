-- jobs_create: insert a batch of jobs in one statement: start-time deduplication (newest matching
-- root of the same key and chain type; scope "incomplete" = the chain's LAST job is not terminal;
-- equal keys in the batch collapse onto the first), continuation conflicts on (chain_id,
-- chain_index) answered with the existing row, blocker rows, and each job's initial status.
-- A missing blocker chain or continued chain is reported in _problems and nothing is written.
-- A continued chain's root is read FOR KEY SHARE (there is no foreign key on chain_id: this is
-- the lock its check took): a deletion of the chain in flight is waited for, and then the chain
-- is missing; while held, the root cannot be deleted.
-- Plan: job_deduplication_idx per key; job_chain_index_idx for continuation conflicts and for each
-- blocker chain's last job, read FOR KEY SHARE: that waits for a completion in flight (job_complete
-- holds its row FOR UPDATE) and then sees it, and while held it sends a later job_complete of that
-- job down its slow path, so either way the dependent is never stranded. KEY SHARE does not
-- conflict with claims or other plain updates, so a running blocker never makes this wait.
-- Blocker chains already failed or cancelled: a job created with runs_after_failed_blockers counts
-- them as resolved; any other job is created failed at once (failed_by_chain_id = the first such
-- blocker in declared order, the cause recorded as propagation records it), never left blocked.
-- job_fail and chains_cancel lock the blocker's last job FOR UPDATE before deciding, so one in
-- flight is waited for here (and the statement runs again, as after a completion).
-- Ordered keys: a new root with an ordering key gets the chain before it as one more blocker,
-- after its declared ones, resolved by any end (resolves_on_any_end): the batch's previous root of
-- the key, else the key's last chain from its ordering_key row, locked (and created if missing)
-- by jobs_ordering_lock before this statement's snapshot, so an uncommitted creation of the key
-- was waited for and its chain is seen here. A row naming no existing root (its chain deleted, or
-- created by that lock for this batch) means no previous chain. The row then names the key's
-- last new root; a row the lock created for roots that all deduplicated is deleted again.
-- A previous chain deleted under the statement (its lock read finds nothing) reads as stale.
WITH
clock AS (
    SELECT COALESCE(%(now)s::timestamptz, statement_timestamp()) AS now
),
batch AS (
    SELECT x.*
    FROM jsonb_to_recordset(%(jobs)s::jsonb) AS x(
        ord integer, id uuid, type_name text, chain_type_name text, chain_id uuid, chain_index integer,
        input jsonb, dedup_key text, dedup_scope text, dedup_window double precision, dedup_exclude jsonb,
        scheduled_at timestamptz, delay double precision, blockers jsonb,
        trace_context jsonb, chain_trace_context jsonb, runs_after boolean,
        priority smallint, ordering_key text
    )
),
leaders AS (
    -- The first deduplicating root of each (key, chain type) in the batch.
    SELECT DISTINCT ON (i.dedup_key, i.chain_type_name)
        i.ord, i.id, i.dedup_key, i.chain_type_name, i.dedup_scope, i.dedup_window, i.dedup_exclude
    FROM batch AS i
    WHERE i.chain_id IS NULL AND i.dedup_key IS NOT NULL
    ORDER BY i.dedup_key, i.chain_type_name, i.ord
),
matches AS MATERIALIZED (
    -- The newest root (created_at, then id) each leader deduplicates onto. The plan must not
    -- depend on statistics: bulk loads run on tables never analyzed, and a generic plan cached
    -- while the table was empty lives on. Before, an unanalyzed table got a plan that ran the
    -- lookups once per leader per leader, each walking every root of the chain type through a
    -- listing index (100 new keys over 2 000 roots: about a minute). Now:
    -- * MATERIALIZED: the lookups run once per leader, never again per row of plan.
    -- * The inner scan is fenced (OFFSET 0: no outer condition is pushed into it) and sorted by
    --   (deduplication_key, created_at DESC). "= ANY (ARRAY[key])" matches exactly like "= key"
    --   but is no equivalence, so the key stays in that order, and only job_deduplication_idx
    --   yields it without a sort; its conditions (key, window start) are index conditions there.
    --   A listing index would need a sort of every candidate and so never wins.
    -- * The walk goes newest first and stops after the first allowed created_at (WITH TIES keeps
    --   the roots created at that same instant); only those are sorted by id for the tie-break.
    SELECT l.ord, m.id
    FROM leaders AS l
    CROSS JOIN clock
    CROSS JOIN LATERAL (
        SELECT newest.id
        FROM (
            SELECT k.id
            FROM (
                SELECT r.id, r.chain_type_name, r.deduplication_key, r.created_at
                FROM {job} AS r
                WHERE r.deduplication_key = ANY (ARRAY[l.dedup_key])
                  AND r.chain_index = 0
                  AND r.created_at >= COALESCE(
                      clock.now - make_interval(secs => l.dedup_window), '-infinity'::timestamptz
                  )
                ORDER BY r.deduplication_key, r.created_at DESC
                OFFSET 0
            ) AS k
            WHERE k.chain_type_name = l.chain_type_name
              AND k.id <> ALL (ARRAY(SELECT e::uuid FROM jsonb_array_elements_text(l.dedup_exclude) AS e))
              AND (
                  l.dedup_scope = 'any'
                  OR (SELECT c.status FROM {job} AS c WHERE c.chain_id = k.id ORDER BY c.chain_index DESC LIMIT 1)
                     NOT IN ('completed', 'failed', 'cancelled')
              )
            ORDER BY k.deduplication_key, k.created_at DESC
            FETCH FIRST 1 ROW WITH TIES
        ) AS newest
        ORDER BY newest.id DESC
        LIMIT 1
    ) AS m
),
plan AS (
    SELECT
        i.*,
        l.ord AS leader_ord,
        l.id AS leader_id,
        m.id AS match_id,
        CASE WHEN i.chain_id IS NULL THEN i.ord
             ELSE min(i.ord) OVER (PARTITION BY i.chain_id, i.chain_index) END AS slot_ord
    FROM batch AS i
    LEFT JOIN leaders AS l
        ON i.chain_id IS NULL AND l.dedup_key = i.dedup_key AND l.chain_type_name = i.chain_type_name
    LEFT JOIN matches AS m ON m.ord = l.ord
),
to_insert AS (
    SELECT p.*
    FROM plan AS p
    WHERE (p.leader_ord IS NULL OR (p.leader_ord = p.ord AND p.match_id IS NULL))
      AND p.slot_ord = p.ord
),
keyed AS (
    -- New roots with an ordering key and the chain before each (see the header).
    SELECT
        t.ord, t.id, t.ordering_key,
        COALESCE(
            lag(t.id) OVER by_key,
            (SELECT r.id
             FROM {ordering_key} AS k
             JOIN {job} AS r ON r.id = k.last_chain_id AND r.chain_index = 0
             WHERE k.key = t.ordering_key)
        ) AS previous_id,
        row_number() OVER (PARTITION BY t.ordering_key ORDER BY t.ord DESC) = 1 AS is_last
    FROM to_insert AS t
    WHERE t.chain_id IS NULL AND t.ordering_key IS NOT NULL
    WINDOW by_key AS (PARTITION BY t.ordering_key ORDER BY t.ord)
),
wanted_blockers AS (
    -- Declared blocker chains of each job to insert, then its previous chain of the ordering
    -- key (resolved by any end); a repeated id keeps its first position (declared wins).
    SELECT DISTINCT ON (a.ord, a.chain_id)
        a.ord, a.job_id, a.chain_id, a.pos, a.any_end
    FROM (
        SELECT t.ord, t.id AS job_id, b.chain_id::uuid AS chain_id, b.pos, false AS any_end
        FROM to_insert AS t
        CROSS JOIN LATERAL jsonb_array_elements_text(t.blockers) WITH ORDINALITY AS b(chain_id, pos)
        UNION ALL
        SELECT k.ord, k.id, k.previous_id, jsonb_array_length(t.blockers) + 1, true
        FROM keyed AS k
        JOIN to_insert AS t ON t.ord = k.ord
        WHERE k.previous_id IS NOT NULL
    ) AS a
    ORDER BY a.ord, a.chain_id, a.pos
),
blocker_state AS (
    SELECT
        d.chain_id,
        d.declared,
        last.id AS last_id,
        last.status AS last_status,
        last.chain_type_name AS last_type_name,
        EXISTS (SELECT 1 FROM to_insert AS t WHERE t.chain_id IS NULL AND t.id = d.chain_id) AS in_batch
    FROM (
        SELECT w.chain_id, bool_or(NOT w.any_end) AS declared FROM wanted_blockers AS w GROUP BY w.chain_id
    ) AS d
    LEFT JOIN LATERAL (
        SELECT c.id, c.status, c.chain_type_name
        FROM {job} AS c
        WHERE c.chain_id = d.chain_id
        ORDER BY c.chain_index DESC
        LIMIT 1
        FOR KEY SHARE
    ) AS last ON true
),
open_blockers AS (
    -- Open: not completed, or (runs_after_failed_blockers) not terminal at all.
    SELECT
        w.ord,
        count(*) AS open_count,
        -- Reported as incomplete: the blocker chains not terminal (a failed one is not waited for).
        array_agg(w.chain_id::text ORDER BY w.pos) FILTER (
            WHERE s.in_batch OR s.last_status NOT IN ('completed', 'failed', 'cancelled')
        ) AS chain_ids
    FROM wanted_blockers AS w
    JOIN to_insert AS t ON t.ord = w.ord
    JOIN blocker_state AS s ON s.chain_id = w.chain_id
    WHERE s.in_batch
       OR s.last_status IS NULL
       OR (s.last_status <> 'completed' AND NOT (COALESCE(t.runs_after, false) OR w.any_end))
       OR s.last_status NOT IN ('completed', 'failed', 'cancelled')
    GROUP BY w.ord
),
failed_blockers AS (
    -- The first blocker chain (declared order) already failed or cancelled, for a job that does
    -- not run after failed blockers: the job is created failed by it.
    SELECT DISTINCT ON (w.ord)
        w.ord, w.chain_id, s.last_status, s.last_type_name
    FROM wanted_blockers AS w
    JOIN to_insert AS t ON t.ord = w.ord
    JOIN blocker_state AS s ON s.chain_id = w.chain_id
    WHERE NOT s.in_batch
      AND s.last_status IN ('failed', 'cancelled')
      AND NOT (COALESCE(t.runs_after, false) OR w.any_end)
    ORDER BY w.ord, w.pos
),
continued AS MATERIALIZED (
    -- The roots the batch's continuations continue, locked (see the header; job primary key).
    SELECT r.id
    FROM {job} AS r
    WHERE r.id IN (SELECT t.chain_id FROM to_insert AS t WHERE t.chain_id IS NOT NULL)
      AND r.chain_index = 0
    FOR KEY SHARE
),
problems AS (
    -- A blocker's last job was completed after this statement's snapshot (the lock read above
    -- waited for that completion): a continuation it committed may be invisible here, so write
    -- nothing and let the adapter run the statement again with a fresh snapshot (the lock is
    -- kept). Other changes committed meanwhile (claims, lease renewals) cannot add a step.
    SELECT 'stale:' || s.chain_id::text AS problem
    FROM blocker_state AS s
    JOIN {job} AS seen ON seen.id = s.last_id
    WHERE s.last_status IN ('completed', 'failed', 'cancelled')
      AND seen.status NOT IN ('completed', 'failed', 'cancelled')
    UNION ALL
    SELECT CASE WHEN s.declared THEN 'blocker_chain_not_found:' ELSE 'stale:' END || s.chain_id::text
    FROM blocker_state AS s
    WHERE s.last_status IS NULL AND NOT s.in_batch
    UNION ALL
    SELECT 'chain_not_found:' || t.chain_id::text
    FROM to_insert AS t
    WHERE t.chain_id IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM continued AS r WHERE r.id = t.chain_id)
      AND NOT EXISTS (SELECT 1 FROM to_insert AS q WHERE q.chain_id IS NULL AND q.id = t.chain_id)
),
new_rows AS (
    SELECT
        t.ord, t.id, COALESCE(t.chain_id, t.id) AS chain_id, t.type_name, t.chain_type_name,
        CASE WHEN t.chain_id IS NULL THEN 0 ELSE t.chain_index END AS chain_index,
        CASE
            WHEN f.chain_id IS NOT NULL THEN 'failed'
            WHEN COALESCE(o.open_count, 0) > 0 THEN 'blocked'
            ELSE 'pending'
        END::{job_status} AS status,
        t.input, clock.now AS created_at,
        GREATEST(
            COALESCE(t.scheduled_at, clock.now + make_interval(secs => COALESCE(t.delay, 0))),
            clock.now
        ) AS scheduled_at,
        t.dedup_key, t.trace_context, t.chain_trace_context,
        COALESCE(o.open_count, 0)::integer AS open_blocker_count,
        COALESCE(t.runs_after, false) AS runs_after,
        COALESCE(t.priority, 0) AS priority,
        CASE WHEN t.chain_id IS NULL THEN t.ordering_key END AS ordering_key,
        CASE WHEN f.chain_id IS NOT NULL THEN clock.now END AS failed_at,
        f.chain_id AS failed_by_chain_id,
        f.cause AS last_attempt_error,
        CASE WHEN f.chain_id IS NOT NULL THEN jsonb_build_array(jsonb_build_object(
            'attempt', 0,
            'worker_id', NULL,
            'error_type', CASE WHEN f.last_status = 'failed' THEN 'BlockerChainFailed'
                               ELSE 'BlockerChainCancelled' END,
            'message', f.cause,
            'traceback', NULL,
            'at', to_char(clock.now AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"')
        )) END AS attempt_errors,
        CASE WHEN f.chain_id IS NOT NULL THEN
            CASE WHEN f.last_status = 'failed' THEN 'BlockerChainFailed' ELSE 'BlockerChainCancelled' END
        END AS failed_error_type
    FROM to_insert AS t
    CROSS JOIN clock
    LEFT JOIN open_blockers AS o ON o.ord = t.ord
    LEFT JOIN LATERAL (
        SELECT fb.chain_id, fb.last_status,
               'blocker chain ' || fb.chain_id::text || ' (' || fb.last_type_name || ') '
               || CASE WHEN fb.last_status = 'failed' THEN 'failed' ELSE 'was cancelled' END AS cause
        FROM failed_blockers AS fb
        WHERE fb.ord = t.ord
    ) AS f ON true
    WHERE NOT EXISTS (SELECT 1 FROM problems)
),
new_roots AS (
    INSERT INTO {job} (
        id, chain_id, type_name, chain_type_name, chain_index, status, input, created_at, scheduled_at,
        deduplication_key, trace_context, chain_trace_context, open_blocker_count,
        runs_after_failed_blockers, failed_at, failed_by_chain_id, last_attempt_error, attempt_errors,
        failed_error_type, priority, ordering_key
    )
    SELECT id, chain_id, type_name, chain_type_name, chain_index, status, input, created_at, scheduled_at,
           dedup_key, trace_context, chain_trace_context, open_blocker_count,
           runs_after, failed_at, failed_by_chain_id, last_attempt_error, attempt_errors,
           failed_error_type, priority, ordering_key
    FROM new_rows
    WHERE new_rows.chain_index = 0
    ORDER BY new_rows.ord
    RETURNING *, false AS existed
),
new_steps AS (
    INSERT INTO {job} AS j (
        id, chain_id, type_name, chain_type_name, chain_index, status, input, created_at, scheduled_at,
        deduplication_key, trace_context, chain_trace_context, open_blocker_count,
        runs_after_failed_blockers, failed_at, failed_by_chain_id, last_attempt_error, attempt_errors,
        failed_error_type, priority, ordering_key
    )
    SELECT id, chain_id, type_name, chain_type_name, chain_index, status, input, created_at, scheduled_at,
           dedup_key, trace_context, chain_trace_context, open_blocker_count,
           runs_after, failed_at, failed_by_chain_id, last_attempt_error, attempt_errors,
           failed_error_type, priority, ordering_key
    FROM new_rows
    WHERE new_rows.chain_index > 0
    ORDER BY new_rows.ord
    -- The no-op update makes RETURNING yield the existing row even when a concurrent transaction
    -- committed it after this statement's snapshot; xmax <> 0 tells it from a fresh insert.
    ON CONFLICT (chain_id, chain_index) DO UPDATE SET chain_index = EXCLUDED.chain_index
    RETURNING *, (j.xmax::text <> '0') AS existed
),
new_blockers AS (
    INSERT INTO {job_blocker} (job_id, blocked_by_chain_id, "index", resolves_on_any_end)
    SELECT w.job_id, w.chain_id, (w.pos - 1)::integer, w.any_end
    FROM wanted_blockers AS w
    WHERE w.job_id IN (
        SELECT new_roots.id FROM new_roots
        UNION ALL
        SELECT new_steps.id FROM new_steps WHERE NOT new_steps.existed
    )
    RETURNING job_id
),
key_taken AS (
    -- Each key's row names its last new root (and the chain before that one).
    UPDATE {ordering_key} AS o
    SET last_chain_id = k.id, previous_chain_id = k.previous_id, updated_at = clock.now
    FROM keyed AS k, clock
    WHERE o.key = k.ordering_key AND k.is_last AND NOT EXISTS (SELECT 1 FROM problems)
),
key_untaken AS (
    -- A row jobs_ordering_lock created for roots of this batch that all deduplicated.
    DELETE FROM {ordering_key} AS o
    WHERE o.key IN (SELECT b.ordering_key FROM batch AS b WHERE b.chain_id IS NULL)
      AND o.key NOT IN (SELECT k.ordering_key FROM keyed AS k)
      AND NOT EXISTS (SELECT 1 FROM {job} AS r WHERE r.id = o.last_chain_id)
      AND NOT EXISTS (SELECT 1 FROM problems)
),
found AS (
    -- Every row the batch answers with, keyed by (chain_id, chain_index): new roots, new or
    -- existing continuations, and existing roots that deduplication matched.
    SELECT r.* FROM new_roots AS r
    UNION ALL
    SELECT s.* FROM new_steps AS s
    UNION ALL
    SELECT e.*, true FROM {job} AS e
    WHERE e.id IN (SELECT p.match_id FROM plan AS p WHERE p.match_id IS NOT NULL)
)
SELECT
    p.ord AS _ord,
    (SELECT array_agg(problems.problem) FROM problems) AS _problems,
    (p.leader_ord IS NOT NULL AND (p.leader_ord <> p.ord OR p.match_id IS NOT NULL))
        OR (p.chain_id IS NOT NULL AND (p.slot_ord <> p.ord OR COALESCE(found.existed, false))) AS _deduplicated,
    o.chain_ids AS _incomplete,
    (SELECT count(*) FROM new_blockers) AS _blockers,
    k.previous_id::text AS _ordered_after,
    found.*
FROM plan AS p
LEFT JOIN open_blockers AS o ON o.ord = p.ord
LEFT JOIN keyed AS k ON k.ord = p.ord
-- An equi-join on one key per item (hashable), not a per-item scan of the new rows: a batch of
-- n items stays O(n). A root answers with itself, its batch leader or its match (all chain
-- index 0, chain_id = id); a continuation with the row at its (chain_id, chain_index).
LEFT JOIN found
    ON found.chain_id = CASE
           WHEN p.chain_id IS NOT NULL THEN p.chain_id
           WHEN p.match_id IS NOT NULL THEN p.match_id
           ELSE COALESCE(p.leader_id, p.id)
       END
   AND found.chain_index = CASE WHEN p.chain_id IS NOT NULL THEN p.chain_index ELSE 0 END
ORDER BY p.ord
