-- jobs_propagate: what the chains that just failed or were cancelled do to the jobs they block,
-- down the whole blocker graph (state contract, "Propagation"). Sent in one pipeline after
-- job_fail or chains_cancel, which leave those chains in the transaction-local setting
-- jobchain.origins ("<chain id>:failed" or "<chain id>:cancelled", comma-separated; empty: nothing
-- to do). Its snapshot is taken after theirs, so it sees what they changed.
-- A blocker "runs after failure" when its job has runs_after_failed_blockers or its blocker row
-- resolves_on_any_end (an ordering key's previous chain, a wait with runs_after_failed).
-- failing: every blocked job that a failing chain blocks through a blocker that does not run
-- after failure; a blocked job is its chain's last job, so its chain fails with it and is
-- followed in turn (UNION keeps a cycle of blockers finite). cause: per job, its first declared
-- blocker chain that is failed or cancelled once the statement is done (among its blockers that
-- do not run after failure), never the walk's order. Failed jobs: status failed, failed_at,
-- failed_by_chain_id, a readable last_attempt_error, a BlockerChainFailed /
-- BlockerChainCancelled entry appended to the error history. releases: blocked jobs that do not
-- fail here, blocked by chains that became terminal here through blockers that run after
-- failure: their open_blocker_count (blocker chains not yet terminal) drops by that number, and
-- at zero they become pending (never scheduled in the past), as a completion does.
-- Plan: job_blocker_chain_idx per failing chain, then primary-key lookups.
WITH RECURSIVE
clock AS (
    SELECT COALESCE(%(now)s::timestamptz, statement_timestamp()) AS now
),
origin AS (
    SELECT split_part(o.item, ':', 1)::uuid AS chain_id, split_part(o.item, ':', 2) AS cause
    FROM unnest(string_to_array(NULLIF(current_setting('jobchain.origins', true), ''), ',')) AS o(item)
),
failing (job_id, chain_id) AS (
    SELECT j.id, j.chain_id
    FROM origin AS o
    JOIN {job_blocker} AS b ON b.blocked_by_chain_id = o.chain_id
    JOIN {job} AS j ON j.id = b.job_id
    WHERE j.status = 'blocked' AND NOT (j.runs_after_failed_blockers OR b.resolves_on_any_end)
    UNION
    SELECT j.id, j.chain_id
    FROM failing AS f
    JOIN {job_blocker} AS b ON b.blocked_by_chain_id = f.chain_id
    JOIN {job} AS j ON j.id = b.job_id
    WHERE j.status = 'blocked' AND NOT (j.runs_after_failed_blockers OR b.resolves_on_any_end)
      AND j.chain_id NOT IN (SELECT origin.chain_id FROM origin)
),
ended AS MATERIALIZED (
    -- The chains that end here, and how.
    SELECT origin.chain_id, origin.cause FROM origin
    UNION
    SELECT failing.chain_id, 'failed' FROM failing
),
cause AS MATERIALIZED (
    -- Per failing job, its first declared blocker chain that is failed or cancelled once this
    -- statement is done: one that ends here, or one that had ended before.
    SELECT DISTINCT ON (f.job_id)
        f.job_id, b.blocked_by_chain_id AS by_chain_id,
        'blocker chain ' || b.blocked_by_chain_id::text || ' (' || r.chain_type_name || ') '
            || CASE WHEN COALESCE(e.cause, l.status::text) = 'cancelled' THEN 'was cancelled' ELSE 'failed' END
            AS message,
        CASE WHEN COALESCE(e.cause, l.status::text) = 'cancelled' THEN 'BlockerChainCancelled'
             ELSE 'BlockerChainFailed' END AS error_type
    FROM (SELECT DISTINCT failing.job_id FROM failing) AS f
    JOIN {job_blocker} AS b ON b.job_id = f.job_id
    JOIN {job} AS r ON r.id = b.blocked_by_chain_id
    LEFT JOIN ended AS e ON e.chain_id = b.blocked_by_chain_id
    LEFT JOIN LATERAL (
        SELECT x.status FROM {job} AS x
        WHERE x.chain_id = b.blocked_by_chain_id AND e.chain_id IS NULL
        ORDER BY x.chain_index DESC
        LIMIT 1
    ) AS l ON true
    WHERE (e.chain_id IS NOT NULL OR l.status IN ('failed', 'cancelled'))
      AND NOT b.resolves_on_any_end  -- failing jobs have no runs_after_failed_blockers
    ORDER BY f.job_id, b."index"
),
terminal AS (
    SELECT origin.chain_id FROM origin
    UNION
    SELECT failing.chain_id FROM failing
),
releases AS (
    SELECT b.job_id, count(*)::integer AS chains
    FROM terminal AS t
    JOIN {job_blocker} AS b ON b.blocked_by_chain_id = t.chain_id
    JOIN {job} AS j ON j.id = b.job_id
    WHERE j.status = 'blocked' AND (j.runs_after_failed_blockers OR b.resolves_on_any_end)
      AND j.id NOT IN (SELECT failing.job_id FROM failing)
    GROUP BY b.job_id
),
failed AS (
    UPDATE {job} AS j
    SET status = 'failed',
        failed_at = clock.now,
        failed_by_chain_id = c.by_chain_id,
        last_attempt_error = c.message,
        failed_error_type = c.error_type,
        attempt_errors = (
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
    FROM cause AS c, clock
    WHERE j.id = c.job_id AND j.status = 'blocked'
    RETURNING j.*
),
released AS (
    UPDATE {job} AS d
    SET open_blocker_count = GREATEST(d.open_blocker_count - r.chains, 0),
        status = CASE WHEN d.open_blocker_count <= r.chains THEN 'pending' ELSE 'blocked' END::{job_status},
        scheduled_at = CASE
            WHEN d.open_blocker_count <= r.chains THEN GREATEST(d.scheduled_at, clock.now)
            ELSE d.scheduled_at
        END
    FROM releases AS r, clock
    WHERE d.id = r.job_id AND d.status = 'blocked'
    RETURNING d.*
)
SELECT 'failed' AS _kind, failed.* FROM failed
UNION ALL
SELECT 'unblocked', released.* FROM released WHERE released.status = 'pending'
