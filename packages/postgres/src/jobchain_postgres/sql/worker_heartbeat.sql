-- worker_heartbeat: upsert the caller's registry row (alive until now + :alive_for); with
-- :release_dead, mark every other worker whose alive_until passed while it said running or
-- draining dead and return its running jobs to pending with the rescue recorded; delete rows whose
-- alive_until is older than now - :prune_after; report whether the caller's own row had been
-- marked dead and how long until the next lease of :type_names held by another worker expires.
-- Fence (issue 35): a heartbeat of an incarnation lower than the row's, or not higher than a dead
-- row's, is fenced: it writes nothing (no upsert, nobody marked dead, released or pruned) and
-- reports _was_dead; a higher incarnation rejoins (the row written as reported).
-- Plan: the own row by primary key, locked before anything else so the fence reads the state
-- and incarnation this upsert replaces (a heartbeat marking it dead in another transaction is waited for, then seen;
-- the only wait this statement has, and it holds no other lock meanwhile). Dead scan:
-- worker_alive_idx, FOR UPDATE SKIP LOCKED, so two heartbeats never both take one worker (the
-- later one's recheck finds it dead already). The dead workers' jobs: job_expired_lease_idx
-- (running jobs only), read only when a worker was found dead; FOR UPDATE SKIP LOCKED, so a job
-- whose row another transaction holds, or that an atomic attempt holds (job_hold), is left to its
-- lease expiry. Each released job appends an AttemptAbandoned entry to its error history. Next expiry: one probe of
-- job_expired_lease_idx per type (LATERAL), skipping the caller's own jobs. Prune: skips rows
-- locked elsewhere and the rows this statement marks dead (their jobs are released first).
-- Result: one row per released job with the scalars repeated, or one row whose job columns are
-- NULL.
WITH previous AS MATERIALIZED (
    SELECT w.state, w.incarnation FROM {worker} AS w WHERE w.id = %(worker_id)s FOR UPDATE
),
fence AS MATERIALIZED (
    -- No row yet (a first heartbeat) is never fenced.
    SELECT EXISTS (
        SELECT 1 FROM previous
        WHERE previous.incarnation > %(incarnation)s::bigint
           OR (previous.state = 'dead' AND previous.incarnation >= %(incarnation)s::bigint)
    ) AS fenced
),
own AS (
    INSERT INTO {worker} AS w (
        id, name, host, pid, version, type_names, concurrency, inflight, buffered, committing,
        capacity, state, started_at, last_seen_at, alive_until, incarnation
    )
    SELECT %(worker_id)s, %(name)s, %(host)s, %(pid)s, %(version)s, %(type_names)s::text[],
        %(concurrency)s, %(inflight)s, %(buffered)s, %(committing)s, %(capacity)s, %(state)s,
        COALESCE(%(now)s::timestamptz, statement_timestamp()),
        COALESCE(%(now)s::timestamptz, statement_timestamp()),
        COALESCE(%(now)s::timestamptz, statement_timestamp()) + %(alive_for)s::interval,
        %(incarnation)s::bigint
    -- An init plan: the own row is locked (and its state read) before the upsert touches it; a
    -- fenced heartbeat inserts nothing, so the upsert does not touch the row at all.
    WHERE NOT (SELECT fence.fenced FROM fence)
    ON CONFLICT (id) DO UPDATE
    SET name = EXCLUDED.name,
        host = EXCLUDED.host,
        pid = EXCLUDED.pid,
        version = EXCLUDED.version,
        type_names = EXCLUDED.type_names,
        concurrency = EXCLUDED.concurrency,
        inflight = EXCLUDED.inflight,
        buffered = EXCLUDED.buffered,
        committing = EXCLUDED.committing,
        capacity = EXCLUDED.capacity,
        state = EXCLUDED.state,
        last_seen_at = EXCLUDED.last_seen_at,
        alive_until = EXCLUDED.alive_until,
        incarnation = EXCLUDED.incarnation
    RETURNING w.id
),
dead AS (
    SELECT w.id
    FROM {worker} AS w
    WHERE %(release_dead)s::boolean
      AND w.state IN ('running', 'draining')
      AND w.alive_until < COALESCE(%(now)s::timestamptz, statement_timestamp())
      AND w.id <> %(worker_id)s
      -- An init plan: the own row is locked before any other. Two heartbeats that each find the
      -- other expired (both stalled) then skip each other's row instead of deadlocking. A fenced
      -- heartbeat (a presumed-dead worker) marks nobody.
      AND NOT (SELECT fence.fenced FROM fence)
    FOR UPDATE SKIP LOCKED
),
marked AS (
    UPDATE {worker} AS w
    SET state = 'dead'
    FROM dead
    WHERE w.id = dead.id
    RETURNING w.id
),
abandoned AS (
    SELECT j.id
    FROM {job} AS j
    WHERE j.status = 'running'
      AND j.leased_until IS NOT NULL
      AND j.leased_by IN (SELECT marked.id FROM marked)
      -- Not held by an atomic attempt (job_hold): its transaction is alive, so is its worker.
      AND pg_try_advisory_xact_lock_shared(hashtextextended(j.id::text, 1717))
    FOR UPDATE OF j SKIP LOCKED
),
released AS (
    UPDATE {job} AS j
    SET status = 'pending',
        leased_by = NULL,
        leased_until = NULL,
        -- SET expressions read the row as it was: j.leased_by is the dead worker.
        rescued_at = COALESCE(%(now)s::timestamptz, statement_timestamp()),
        rescued_from = j.leased_by,
        rescue_reason = 'worker_dead',
        attempt_errors = (
            SELECT jsonb_agg(e.entry ORDER BY e.n)
            FROM jsonb_array_elements(
                COALESCE(j.attempt_errors, '[]'::jsonb) || jsonb_build_array(jsonb_build_object(
                    'attempt', j.attempt,
                    'worker_id', j.leased_by,
                    'error_type', 'AttemptAbandoned',
                    'message', 'attempt abandoned: worker ' || j.leased_by || ' stopped heartbeating and was presumed dead',
                    'traceback', NULL,
                    'at', to_char(
                        COALESCE(%(now)s::timestamptz, statement_timestamp()) AT TIME ZONE 'UTC',
                        'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"'
                    )
                ))
            ) WITH ORDINALITY AS e(entry, n)
            WHERE e.n > jsonb_array_length(COALESCE(j.attempt_errors, '[]'::jsonb)) + 1 - %(kept)s::integer
        ),
        last_attempt_error = 'attempt abandoned: worker ' || j.leased_by
            || ' stopped heartbeating and was presumed dead'
    FROM abandoned
    WHERE j.id = abandoned.id
    RETURNING j.*
),
pruned AS (
    DELETE FROM {worker} AS w
    WHERE w.id IN (
        SELECT p.id
        FROM {worker} AS p
        WHERE p.alive_until < COALESCE(%(now)s::timestamptz, statement_timestamp()) - %(prune_after)s::interval
          AND p.id <> %(worker_id)s
          AND p.id NOT IN (SELECT dead.id FROM dead)
          AND NOT (SELECT fence.fenced FROM fence)
        FOR UPDATE SKIP LOCKED
    )
),
expiry AS (
    SELECT min(n.leased_until) AS earliest
    FROM unnest(%(type_names)s::text[]) AS t(type_name)
    CROSS JOIN LATERAL (
        SELECT j.leased_until
        FROM {job} AS j
        WHERE j.type_name = t.type_name
          AND j.status = 'running'
          AND j.leased_until IS NOT NULL
          AND j.leased_by IS DISTINCT FROM %(worker_id)s
          -- Released by this statement: the snapshot still shows them running.
          AND j.id NOT IN (SELECT abandoned.id FROM abandoned)
        ORDER BY j.type_name, j.leased_until
        LIMIT 1
    ) AS n
)
SELECT
    (SELECT fence.fenced FROM fence) AS _was_dead,
    ARRAY(SELECT marked.id FROM marked ORDER BY marked.id) AS _dead_worker_ids,
    -- GREATEST skips NULLs: no lease at all must stay NULL, not become zero.
    (
        SELECT GREATEST(expiry.earliest - COALESCE(%(now)s::timestamptz, statement_timestamp()), interval '0')
        FROM expiry
        WHERE expiry.earliest IS NOT NULL
    ) AS _next_lease_expiry,
    released.*
FROM (SELECT 1) AS one
LEFT JOIN released ON true
