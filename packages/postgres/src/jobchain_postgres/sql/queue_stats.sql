-- queue_stats: queue health per job type at one instant (jobchain.stats), in one statement.
-- Every row carries now, the first also the throughput buckets; each row with a type_name carries
-- that type's figures (one row with a NULL type_name when no type is listed).
-- :type_names NULL lists every type that has a job or is paused; :windows are the recent periods; :buckets
-- (0: no throughput) buckets of :step_us microseconds aligned to the epoch, the last holding now.
-- Plan: every part reads an index, per type, and none reads every job:
-- * the types: a loose index scan of job_listing_type_name_idx (one descent per type), and the
--   paused types (type_control, one row per paused or rate-limited type);
-- * pending, due, scheduled, oldest due: job_acquisition_idx, index-only;
-- * running, expired leases: job_expired_lease_idx, index-only (a running job always has a
--   lease: every claim sets leased_until and nothing clears it while the job runs);
-- * blocked, completed, failed, cancelled and failures by error type (failed_error_type):
--   job_stats_idx, index-only; a count reads one posting-list item per job of the type in that
--   status (the index stores them deduplicated: a few MB per million jobs);
-- * the windows, the duration sample and the throughput buckets: job_finished_idx, index-only;
--   they read the completed entries in their range, the type's failed and cancelled entries,
--   and the sample its newest entries.
WITH RECURSIVE
clock AS MATERIALIZED (
    SELECT COALESCE(%(now)s::timestamptz, statement_timestamp()) AS now
),
known (type_name) AS (
    (SELECT j.type_name FROM {job} AS j ORDER BY j.type_name LIMIT 1)
    UNION ALL
    SELECT (SELECT j.type_name FROM {job} AS j WHERE j.type_name > k.type_name ORDER BY j.type_name LIMIT 1)
    FROM known AS k
    WHERE k.type_name IS NOT NULL
),
types AS MATERIALIZED (
    SELECT DISTINCT a.type_name FROM unnest(%(type_names)s::text[]) AS a (type_name)
    UNION ALL
    SELECT u.type_name
    FROM (
        SELECT k.type_name FROM known AS k WHERE k.type_name IS NOT NULL
        UNION
        SELECT c.type_name FROM {type_control} AS c WHERE c.paused_at IS NOT NULL
    ) AS u
    WHERE %(type_names)s::text[] IS NULL
),
windows AS MATERIALIZED (
    SELECT c.now - w.span AS since, w.ord
    FROM clock AS c
    CROSS JOIN unnest(%(windows)s::interval[]) WITH ORDINALITY AS w (span, ord)
),
-- The throughput period in whole microseconds since the epoch (numeric: exact).
period AS MATERIALIZED (
    SELECT b.first_us,
        timestamptz 'epoch' + b.first_us * interval '1 microsecond' AS first_at,
        timestamptz 'epoch' + (b.first_us + %(buckets)s * %(step_us)s::bigint) * interval '1 microsecond'
            AS end_at
    FROM clock AS c
    CROSS JOIN LATERAL (
        SELECT (floor(extract(epoch FROM c.now) * 1000000 / %(step_us)s::bigint) - %(buckets)s + 1)
            * %(step_us)s::bigint AS first_us
    ) AS b
    WHERE %(buckets)s > 0
),
-- Failures per bucket: the failed entries of each type in the period (few), each bucketed by its
-- whole microseconds since the first bucket's start in float8 (exact below 2^53 us, 285 years).
failures AS (
    SELECT (date_part('epoch', j.failed_at - p.first_at) * 1000000)::bigint / %(step_us)s::bigint AS i,
        count(*) AS n
    FROM period AS p
    CROSS JOIN known AS k
    JOIN {job} AS j
      ON j.type_name = k.type_name AND j.status = 'failed'
     AND j.failed_at >= p.first_at AND j.failed_at < p.end_at
    GROUP BY 1
),
-- Completions per bucket: a bare count over each bucket's index range per type, which reads no
-- column of its entries (bucketing each completion cost about a microsecond per job).
throughput AS (
    SELECT array_agg(d.n ORDER BY b.i) AS completed, array_agg(COALESCE(f.n, 0) ORDER BY b.i) AS failed
    FROM period AS p
    CROSS JOIN generate_series(0, %(buckets)s - 1) AS b (i)
    CROSS JOIN LATERAL (
        SELECT COALESCE(sum(
            (SELECT count(*)
             FROM {job} AS j
             WHERE j.type_name = k.type_name AND j.status = 'completed'
               AND j.completed_at >= p.first_at + (b.i * %(step_us)s::bigint) * interval '1 microsecond'
               AND j.completed_at < p.first_at + ((b.i + 1) * %(step_us)s::bigint) * interval '1 microsecond')
        ), 0)::bigint AS n
        FROM known AS k
    ) AS d
    LEFT JOIN failures AS f ON f.i = b.i
),
per_type AS (
    SELECT t.type_name, row_number() OVER () AS rank,
        p.pending, p.due, CASE WHEN p.oldest <= c.now THEN p.oldest END AS oldest_due_at,
        r.running, r.expired_leases,
        n.blocked, n.completed, n.failed, n.cancelled,
        w.completed AS recent_completed, w.failed AS recent_failed, w.cancelled AS recent_cancelled,
        x.names AS error_type_names, x.counts AS error_type_counts,
        s.n AS sample_count, s.percentiles AS sample_percentiles, s.longest AS sample_max,
        EXISTS (
            SELECT 1 FROM {type_control} AS q WHERE q.type_name = t.type_name AND q.paused_at IS NOT NULL
        ) AS paused
    FROM clock AS c
    CROSS JOIN types AS t
    CROSS JOIN LATERAL (
        SELECT count(*) AS pending, count(*) FILTER (WHERE j.scheduled_at <= c.now) AS due,
            min(j.scheduled_at) AS oldest
        FROM {job} AS j
        WHERE j.type_name = t.type_name AND j.status = 'pending'
    ) AS p
    CROSS JOIN LATERAL (
        SELECT count(*) AS running, count(*) FILTER (WHERE j.leased_until < c.now) AS expired_leases
        FROM {job} AS j
        WHERE j.type_name = t.type_name AND j.status = 'running' AND j.leased_until IS NOT NULL
    ) AS r
    -- One count per status: a bare count over an index range reads no column of its entries.
    CROSS JOIN LATERAL (
        SELECT
            (SELECT count(*) FROM {job} AS j WHERE j.type_name = t.type_name AND j.status = 'blocked')
                AS blocked,
            (SELECT count(*) FROM {job} AS j WHERE j.type_name = t.type_name AND j.status = 'completed')
                AS completed,
            (SELECT count(*) FROM {job} AS j WHERE j.type_name = t.type_name AND j.status = 'failed')
                AS failed,
            (SELECT count(*) FROM {job} AS j WHERE j.type_name = t.type_name AND j.status = 'cancelled')
                AS cancelled
    ) AS n
    CROSS JOIN LATERAL (
        SELECT
            array_agg(
                (SELECT count(*) FROM {job} AS j
                 WHERE j.type_name = t.type_name AND j.status = 'completed' AND j.completed_at >= w.since)
                ORDER BY w.ord
            ) AS completed,
            array_agg(
                (SELECT count(*) FROM {job} AS j
                 WHERE j.type_name = t.type_name AND j.status = 'failed' AND j.failed_at >= w.since)
                ORDER BY w.ord
            ) AS failed,
            array_agg(
                (SELECT count(*) FROM {job} AS j
                 WHERE j.type_name = t.type_name AND j.status = 'cancelled' AND j.cancelled_at >= w.since)
                ORDER BY w.ord
            ) AS cancelled
        FROM windows AS w
    ) AS w
    CROSS JOIN LATERAL (
        SELECT array_agg(e.error_type ORDER BY e.n DESC, e.error_type COLLATE "C") AS names,
            array_agg(e.n ORDER BY e.n DESC, e.error_type COLLATE "C") AS counts
        FROM (
            SELECT g.error_type, g.n
            FROM (
                SELECT COALESCE(j.failed_error_type, '') AS error_type, count(*) AS n
                FROM {job} AS j
                WHERE j.type_name = t.type_name AND j.status = 'failed'
                GROUP BY 1
            ) AS g
            ORDER BY g.n DESC, g.error_type COLLATE "C"
            LIMIT %(error_types_kept)s
        ) AS e
    ) AS x
    CROSS JOIN LATERAL (
        SELECT count(*) AS n,
            percentile_disc(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY sample.took) AS percentiles,
            max(sample.took) AS longest
        FROM (
            SELECT j.completed_at - j.attempt_started_at AS took
            FROM {job} AS j
            WHERE j.type_name = t.type_name AND j.status = 'completed'
              AND j.completed_at >= c.now - %(duration_window)s::interval
              AND j.attempt_started_at IS NOT NULL
            ORDER BY j.completed_at DESC, j.id DESC
            LIMIT %(duration_sample)s
        ) AS sample
    ) AS s
)
SELECT c.now,
    CASE WHEN pt.rank IS NULL OR pt.rank = 1 THEN tp.completed END AS throughput_completed,
    CASE WHEN pt.rank IS NULL OR pt.rank = 1 THEN tp.failed END AS throughput_failed,
    pt.type_name, pt.pending, pt.due, pt.oldest_due_at, pt.running, pt.expired_leases, pt.blocked,
    pt.completed, pt.failed, pt.cancelled, pt.recent_completed, pt.recent_failed, pt.recent_cancelled,
    pt.error_type_names, pt.error_type_counts, pt.sample_count, pt.sample_percentiles, pt.sample_max,
    pt.paused
FROM clock AS c
CROSS JOIN throughput AS tp
LEFT JOIN per_type AS pt ON true
