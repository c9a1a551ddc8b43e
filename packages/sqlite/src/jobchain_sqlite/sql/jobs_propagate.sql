-- jobs_propagate: what chains that just became failed or cancelled do to the jobs they block,
-- down the whole blocker graph, in one statement (state contract, "Propagation").
-- :origins is a JSON array of [chain_id, 'failed' | 'cancelled'] (chains whose last job the
-- calling operation just failed or cancelled).
--
-- failing: every blocked job without runs_after_failed_blockers that one of those chains
-- blocks through a blocker row without resolves_on_any_end, and recursively every such job blocked by the chain of a job failing here (a
-- blocked job is its chain's last job, so its chain fails with it). UNION visits each job
-- once, so the recursion ends even on a cycle of blockers. ended: the origins and the
-- chains of the failing jobs. cause: per failing job, the first of its declared blocker
-- chains that ended here (so the choice never depends on the order of the walk).
-- released: blocked jobs not failing here, blocked by a chain that ended here that they
-- count as resolved (runs_after_failed_blockers, or the blocker row's resolves_on_any_end),
-- whose every other blocker chain is resolved too (terminal; completed unless either flag).
-- cause only names blocker rows without resolves_on_any_end (the others never fail a job).
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
failing(job_id, chain_id) AS (
    SELECT j.id, j.chain_id
    FROM origin o
    JOIN {p}job_blocker b ON b.blocked_by_chain_id = o.chain_id
    JOIN {p}job j ON j.id = b.job_id
    WHERE +j.status = 'blocked' AND NOT j.runs_after_failed_blockers AND NOT b.resolves_on_any_end
    UNION
    SELECT j.id, j.chain_id
    FROM failing f
    JOIN {p}job_blocker b ON b.blocked_by_chain_id = f.chain_id
    JOIN {p}job j ON j.id = b.job_id
    WHERE +j.status = 'blocked' AND NOT j.runs_after_failed_blockers AND NOT b.resolves_on_any_end
      AND j.chain_id NOT IN (SELECT chain_id FROM origin)
),
doomed(job_id, chain_id) AS MATERIALIZED (
    SELECT job_id, chain_id FROM failing
),
ended(chain_id, cause) AS MATERIALIZED (
    SELECT chain_id, cause FROM origin
    UNION
    SELECT chain_id, 'failed' FROM doomed
),
cause(job_id, by_chain_id, cause) AS MATERIALIZED (
    -- The first declared blocker chain that ended here (never the walk's order).
    SELECT d.job_id, e.chain_id, e.cause
    FROM doomed d
    JOIN ended e ON e.chain_id = (
        SELECT o.blocked_by_chain_id FROM {p}job_blocker o
        WHERE o.job_id = d.job_id AND NOT o.resolves_on_any_end
          AND o.blocked_by_chain_id IN (SELECT chain_id FROM ended)
        ORDER BY o.idx LIMIT 1
    )
),
released(job_id) AS MATERIALIZED (
    SELECT DISTINCT j.id
    FROM ended t
    JOIN {p}job_blocker b ON b.blocked_by_chain_id = t.chain_id
    JOIN {p}job j ON j.id = b.job_id
    WHERE +j.status = 'blocked' AND (j.runs_after_failed_blockers OR b.resolves_on_any_end)
      AND j.id NOT IN (SELECT job_id FROM doomed)
      AND NOT EXISTS (
          SELECT 1 FROM {p}job_blocker o
          WHERE o.job_id = j.id
            AND o.blocked_by_chain_id NOT IN (SELECT chain_id FROM ended)
            AND CASE WHEN j.runs_after_failed_blockers OR o.resolves_on_any_end
                     THEN (SELECT l.status FROM {p}job l
                           WHERE l.chain_id = o.blocked_by_chain_id
                           ORDER BY l.chain_index DESC LIMIT 1) NOT IN ('completed', 'failed', 'cancelled')
                     ELSE (SELECT l.status FROM {p}job l
                           WHERE l.chain_id = o.blocked_by_chain_id
                           ORDER BY l.chain_index DESC LIMIT 1) <> 'completed' END
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
