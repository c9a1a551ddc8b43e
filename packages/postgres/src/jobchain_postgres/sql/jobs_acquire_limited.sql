-- jobs_acquire_limited: jobs_acquire (same claim order, prefixes and plan) for a claim that serves
-- at least one type with limits (:max_running[i], :rate_limits[i] per :rate_pers[i] microseconds;
-- NULL where the type has none). Runs after type_control_lock in the same transaction, which
-- holds the limited types' rows: this statement's snapshot sees every committed claim of them.
-- Per type: cap = least(:limit, max_running - running jobs (expired leases included), rate limit -
-- claims counted in the current fixed window), at least 0; each prefix takes at most cap rows and
-- the claim at most cap jobs of the type (row_number over the small candidate set), then :limit
-- overall. The claimed count of each rate-limited type is added to its window counter in
-- type_control (reset when the window moved). _held_back: the types a limit capped below :limit
-- that claimed all it allowed; _retry_at: the earliest end of the current window among those a
-- rate limit capped; _has_more: more due jobs wait beyond :limit among the types that may start
-- more (no limit, or room left after this claim). Windows start at multiples of the period since
-- the Unix epoch, in whole microseconds. Running jobs are counted on an index
-- (job_expired_lease_idx or job_listing_status_idx: a running job always has a lease).
WITH clock AS MATERIALIZED (
    -- now in whole microseconds since the epoch (rounded: exact on every server version).
    SELECT round(extract(epoch FROM COALESCE(%(now)s::timestamptz, statement_timestamp())) * 1000000)::bigint AS us
),
capped AS MATERIALIZED (
    SELECT l.*,
           GREATEST(LEAST(%(limit)s, l.running_left, l.rate_left), 0) AS cap,
           COALESCE(LEAST(l.running_left, l.rate_left) < %(limit)s, false) AS bound
    FROM (
        SELECT t.type_name, t.lease, t.rate_limit, w.window_start,
               w.window_start + t.rate_per * interval '1 microsecond' AS window_end,
               t.rate_limit - CASE WHEN c.rate_window_start = w.window_start THEN c.rate_window_count ELSE 0 END
                   AS rate_left,
               t.max_running - r.running AS running_left
        FROM unnest(
            %(type_names)s::text[], %(leases)s::interval[], %(max_running)s::integer[],
            %(rate_limits)s::integer[], %(rate_pers)s::bigint[]
        ) AS t(type_name, lease, max_running, rate_limit, rate_per)
        CROSS JOIN clock
        LEFT JOIN {type_control} AS c ON c.type_name = t.type_name
        CROSS JOIN LATERAL (
            SELECT timestamptz 'epoch' + (clock.us - mod(clock.us, t.rate_per)) * interval '1 microsecond'
                AS window_start
        ) AS w
        LEFT JOIN LATERAL (
            SELECT count(*) AS running
            FROM {job} AS r
            WHERE t.max_running IS NOT NULL
              AND r.type_name = t.type_name
              AND r.status = 'running'
              AND r.leased_until IS NOT NULL
        ) AS r ON true
        WHERE c.paused_at IS NULL
    ) AS l
),
candidates AS (
    SELECT c.id, c.scheduled_at, c.created_at, t.type_name, t.lease, t.cap,
           -- the claim order's first two keys: aged jobs first, then priority (0 once aged)
           c.scheduled_at <= COALESCE(%(now)s::timestamptz, statement_timestamp()) - %(aging)s::interval AS aged,
           CASE
               WHEN c.scheduled_at <= COALESCE(%(now)s::timestamptz, statement_timestamp()) - %(aging)s::interval
               THEN 0 ELSE c.priority
           END AS rank
    FROM capped AS t
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
            LIMIT t.cap
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
            LIMIT t.cap
            FOR UPDATE SKIP LOCKED
        ) AS c2
    ) AS c
),
chosen AS (
    SELECT r.id, r.lease
    FROM (
        SELECT k.*,
               row_number() OVER (
                   PARTITION BY k.type_name ORDER BY k.aged DESC, k.rank DESC, k.scheduled_at, k.created_at, k.id
               ) AS n
        FROM candidates AS k
    ) AS r
    WHERE r.n <= r.cap
    ORDER BY r.aged DESC, r.rank DESC, r.scheduled_at, r.created_at, r.id
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
),
counted AS (
    SELECT claimed.type_name, count(*) AS n FROM claimed GROUP BY claimed.type_name
),
bumped AS (
    UPDATE {type_control} AS c
    SET rate_window_count = CASE WHEN c.rate_window_start = t.window_start THEN c.rate_window_count ELSE 0 END
            + counted.n,
        rate_window_start = t.window_start
    FROM capped AS t
    JOIN counted ON counted.type_name = t.type_name
    WHERE c.type_name = t.type_name AND t.rate_limit IS NOT NULL
    RETURNING c.type_name
),
held AS (
    SELECT t.type_name, t.window_end,
           t.rate_left IS NOT NULL AND t.rate_left <= COALESCE(t.running_left, t.rate_left) AS by_rate
    FROM capped AS t
    LEFT JOIN counted ON counted.type_name = t.type_name
    WHERE t.bound AND COALESCE(counted.n, 0) = t.cap
)
SELECT
    (SELECT count(*) FROM claimed) = %(limit)s AND EXISTS (
        SELECT 1 FROM {job} AS m
        -- Only types that may start more: unlimited, or with room left after this claim.
        WHERE m.type_name = ANY (ARRAY(
                  SELECT t.type_name
                  FROM capped AS t
                  LEFT JOIN counted ON counted.type_name = t.type_name
                  WHERE COALESCE(LEAST(t.running_left, t.rate_left) - COALESCE(counted.n, 0) > 0, true)
              ))
          AND m.status = 'pending'
          AND m.scheduled_at <= COALESCE(%(now)s::timestamptz, statement_timestamp())
          AND m.id NOT IN (SELECT chosen.id FROM chosen)
    ) AS _has_more,
    ARRAY(SELECT held.type_name FROM held) AS _held_back,
    (SELECT min(held.window_end) FROM held WHERE held.by_rate) AS _retry_at,
    claimed.*
FROM (SELECT 1) AS one
LEFT JOIN claimed ON true
