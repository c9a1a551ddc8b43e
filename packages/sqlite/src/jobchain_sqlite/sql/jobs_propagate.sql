-- jobs_propagate: what chains that just became failed or cancelled do to the jobs they block,
-- down the whole blocker graph, in one statement (state contract, "Propagation").
-- :origins is a JSON array of [chain_id, 'failed' | 'cancelled'] (chains whose last job the
-- calling operation just failed or cancelled).
--
-- failing: every blocked job without runs_after_failed_blockers that one of those chains
-- blocks, and recursively every such job blocked by the chain of a job failing here (a
-- blocked job is its chain's last job, so its chain fails with it). UNION keeps the
-- recursion finite even on a cycle of blockers. level/depth: each failing chain's distance
-- from an origin (breadth first, bounded by the number of edges, so a cycle ends too).
-- cause: one row per failing job, its failing blocker nearest to an origin (the one that
-- failed it first), then the first declared. released: blocked jobs with
-- runs_after_failed_blockers blocked by a chain that became terminal here, whose every
-- blocker chain is now terminal (a chain in `terminal` is, whatever its stored row says).
-- plan is MATERIALIZED, so every decision reads the table as it was before this statement.
--
-- Failed jobs: status 'failed', failed_at, failed_by_chain_id, a readable last_attempt_error
-- and a BlockerChainFailed / BlockerChainCancelled entry appended to the error history
-- (worker null, attempt = the job's attempt, at = :now_iso). Released jobs: 'pending',
-- never scheduled in the past. Plan: job_blocker_chain_idx, then primary-key lookups.
WITH RECURSIVE
origin(chain_id, cause) AS (
    SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(:origins)
),
failing(job_id, chain_id, by_chain_id, cause, idx) AS (
    SELECT j.id, j.chain_id, o.chain_id, o.cause, b.idx
    FROM origin o
    JOIN {p}job_blocker b ON b.blocked_by_chain_id = o.chain_id
    JOIN {p}job j ON j.id = b.job_id
    WHERE +j.status = 'blocked' AND NOT j.runs_after_failed_blockers
    UNION
    SELECT j.id, j.chain_id, f.chain_id, 'failed', b.idx
    FROM failing f
    JOIN {p}job_blocker b ON b.blocked_by_chain_id = f.chain_id
    JOIN {p}job j ON j.id = b.job_id
    WHERE +j.status = 'blocked' AND NOT j.runs_after_failed_blockers
      AND j.chain_id NOT IN (SELECT chain_id FROM origin)
),
edge(job_id, chain_id, by_chain_id, cause, idx) AS MATERIALIZED (
    SELECT job_id, chain_id, by_chain_id, cause, idx FROM failing
),
level(chain_id, depth) AS (
    SELECT chain_id, 0 FROM origin
    UNION
    SELECT e.chain_id, l.depth + 1
    FROM level l
    JOIN edge e ON e.by_chain_id = l.chain_id
    WHERE l.depth < (SELECT COUNT(*) FROM edge)
),
depth(chain_id, depth) AS MATERIALIZED (
    SELECT chain_id, MIN(depth) FROM level GROUP BY chain_id
),
cause(job_id, chain_id, by_chain_id, cause) AS MATERIALIZED (
    -- SQLite takes the bare columns from the row holding the MIN: the blocker nearest to an
    -- origin, then the first declared.
    SELECT job_id, chain_id, by_chain_id, cause FROM (
        SELECT e.job_id, e.chain_id, e.by_chain_id, e.cause, MIN(d.depth * 1048576 + e.idx)
        FROM edge e
        JOIN depth d ON d.chain_id = e.by_chain_id
        GROUP BY e.job_id
    )
),
terminal(chain_id) AS MATERIALIZED (
    SELECT chain_id FROM origin
    UNION
    SELECT chain_id FROM cause
),
released(job_id) AS MATERIALIZED (
    SELECT DISTINCT j.id
    FROM terminal t
    JOIN {p}job_blocker b ON b.blocked_by_chain_id = t.chain_id
    JOIN {p}job j ON j.id = b.job_id
    WHERE +j.status = 'blocked' AND j.runs_after_failed_blockers
      AND NOT EXISTS (
          SELECT 1 FROM {p}job_blocker o
          WHERE o.job_id = j.id
            AND o.blocked_by_chain_id NOT IN (SELECT chain_id FROM terminal)
            AND (SELECT l.status FROM {p}job l
                 WHERE l.chain_id = o.blocked_by_chain_id
                 ORDER BY l.chain_index DESC LIMIT 1) NOT IN ('completed', 'failed', 'cancelled')
      )
),
plan(job_id, status, by_chain_id, message, error_type) AS MATERIALIZED (
    SELECT c.job_id, 'failed', c.by_chain_id,
           'blocker chain ' || c.by_chain_id || ' (' || r.chain_type_name || ') '
               || CASE c.cause WHEN 'cancelled' THEN 'was cancelled' ELSE 'failed' END,
           CASE c.cause WHEN 'cancelled' THEN 'BlockerChainCancelled' ELSE 'BlockerChainFailed' END
    FROM cause c
    JOIN {p}job r ON r.id = c.by_chain_id
    UNION ALL
    SELECT job_id, 'pending', NULL, NULL, NULL FROM released
)
UPDATE {p}job
SET status = p.status,
    failed_at = CASE WHEN p.status = 'failed' THEN :now ELSE {p}job.failed_at END,
    failed_by_chain_id = CASE WHEN p.status = 'failed' THEN p.by_chain_id ELSE {p}job.failed_by_chain_id END,
    last_attempt_error = CASE WHEN p.status = 'failed' THEN p.message ELSE {p}job.last_attempt_error END,
    attempt_errors = CASE WHEN p.status = 'failed' THEN json_insert(
        CASE WHEN json_array_length({p}job.attempt_errors) >= :errors_kept
             THEN json_remove({p}job.attempt_errors, '$[0]')
             ELSE COALESCE({p}job.attempt_errors, '[]') END,
        '$[#]', json_object(
            'attempt', {p}job.attempt,
            'worker_id', NULL,
            'error_type', p.error_type,
            'message', p.message,
            'traceback', NULL,
            'at', :now_iso)) ELSE {p}job.attempt_errors END,
    scheduled_at = CASE WHEN p.status = 'pending' THEN MAX({p}job.scheduled_at, :now) ELSE {p}job.scheduled_at END
FROM plan AS p
WHERE {p}job.id = p.job_id
RETURNING *
