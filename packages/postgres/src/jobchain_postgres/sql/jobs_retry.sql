-- jobs_retry: redrive failed or cancelled jobs, all or nothing (state contract, JobsRetry).
-- Each retried job: attempt_base = attempt (a fresh budget), failure and cancel fields and the
-- lease cleared, history kept; pending at its schedule, or blocked while a blocker chain is open.
-- followed: the jobs that failed because a retried chain failed (failed_by_chain_id), and
-- recursively theirs (path keeps a cycle of blockers finite). One of them that has another failed
-- or cancelled blocker chain, outside what this statement revives, stays failed and now names that
-- chain (outside_failed), and so do the jobs it failed in turn (excluded); the others go back to
-- blocked with the same resets (reblocked). open_blocker_count is recounted for every job whose
-- blockers this statement revives (the retried and reblocked jobs, and blocked jobs still waiting
-- on a revived chain through a blocker that runs after failure): a revived chain counts as open.
-- Refusals (nothing written): a missing id, a job that is not failed or cancelled, or one (without
-- runs_after_failed_blockers) with a failed or cancelled blocker chain, even one retried by the
-- same request (retry the blocker: its dependents follow). A blocker row with resolves_on_any_end
-- (an ordering key's previous chain, a wait with runs_after_failed) runs after failure as
-- runs_after_failed_blockers does: it never refuses, never keeps a job failed, and counts as open
-- only while its chain is not terminal.
-- Plan: primary key per id; job_blocker_chain_idx to follow dependents; job_blocker primary key and
-- job_chain_index_idx (backward) for each blocker chain's last job.
WITH RECURSIVE
clock AS (
    SELECT COALESCE(%(now)s::timestamptz, statement_timestamp()) AS now
),
requested AS (
    SELECT r.job_id, j.id IS NOT NULL AS found, j.status, j.chain_id, j.runs_after_failed_blockers AS runs_after,
           j.failed_by_chain_id
    FROM unnest(%(job_ids)s::uuid[]) AS r(job_id)
    LEFT JOIN {job} AS j ON j.id = r.job_id
),
retry_chains AS (
    SELECT q.chain_id FROM requested AS q WHERE q.status IN ('failed', 'cancelled')
),
closure (job_id, chain_id, path) AS (
    SELECT d.id, d.chain_id, ARRAY[d.chain_id]
    FROM {job_blocker} AS b
    JOIN {job} AS d ON d.id = b.job_id
    WHERE b.blocked_by_chain_id IN (SELECT retry_chains.chain_id FROM retry_chains)
      AND d.status = 'failed'
      AND d.failed_by_chain_id = b.blocked_by_chain_id
      AND d.id NOT IN (SELECT requested.job_id FROM requested)
    UNION ALL
    SELECT d.id, d.chain_id, c.path || d.chain_id
    FROM closure AS c
    JOIN {job_blocker} AS b ON b.blocked_by_chain_id = c.chain_id
    JOIN {job} AS d ON d.id = b.job_id
    WHERE d.status = 'failed'
      AND d.failed_by_chain_id = c.chain_id
      AND d.chain_id <> ALL (c.path)
      AND d.id NOT IN (SELECT requested.job_id FROM requested)
),
followed AS (
    SELECT DISTINCT closure.job_id, closure.chain_id FROM closure
),
revived AS (
    SELECT retry_chains.chain_id FROM retry_chains
    UNION
    SELECT followed.chain_id FROM followed
),
waiting AS (
    -- Blocked jobs that a retried chain blocks through a blocker that runs after failure: that
    -- chain, terminal until now, was not counted in their open_blocker_count; it is again.
    SELECT DISTINCT b.job_id, d.runs_after_failed_blockers AS runs_after
    FROM {job_blocker} AS b
    JOIN {job} AS d ON d.id = b.job_id
    WHERE b.blocked_by_chain_id IN (SELECT retry_chains.chain_id FROM retry_chains)
      AND d.status = 'blocked'
      AND (d.runs_after_failed_blockers OR b.resolves_on_any_end)
),
blocker_state AS (
    -- Every blocker of every job this statement may change, with its chain's last status now.
    SELECT b.job_id, b.blocked_by_chain_id AS chain_id, b."index" AS idx, l.status,
           b.blocked_by_chain_id IN (SELECT revived.chain_id FROM revived) AS revived,
           b.resolves_on_any_end AS any_end
    FROM (
        SELECT requested.job_id FROM requested WHERE requested.found
        UNION
        SELECT followed.job_id FROM followed
        UNION
        SELECT waiting.job_id FROM waiting
    ) AS t
    JOIN {job_blocker} AS b ON b.job_id = t.job_id
    CROSS JOIN LATERAL (
        SELECT x.status FROM {job} AS x
        WHERE x.chain_id = b.blocked_by_chain_id
        ORDER BY x.chain_index DESC
        LIMIT 1
    ) AS l
),
outside_failed AS (
    SELECT DISTINCT ON (s.job_id) s.job_id, s.chain_id
    FROM blocker_state AS s
    WHERE s.job_id IN (SELECT followed.job_id FROM followed)
      AND s.status IN ('failed', 'cancelled')
      AND NOT s.revived
      AND NOT s.any_end
    ORDER BY s.job_id, s.idx
),
excluded (job_id, chain_id, path) AS (
    SELECT f.job_id, f.chain_id, ARRAY[f.chain_id]
    FROM followed AS f
    WHERE f.job_id IN (SELECT outside_failed.job_id FROM outside_failed)
    UNION ALL
    SELECT d.id, d.chain_id, e.path || d.chain_id
    FROM excluded AS e
    JOIN {job_blocker} AS b ON b.blocked_by_chain_id = e.chain_id
    JOIN {job} AS d ON d.id = b.job_id
    WHERE d.id IN (SELECT followed.job_id FROM followed)
      AND d.failed_by_chain_id = e.chain_id
      AND d.chain_id <> ALL (e.path)
),
reblock AS (
    SELECT f.job_id, f.chain_id FROM followed AS f
    WHERE f.job_id NOT IN (SELECT excluded.job_id FROM excluded)
),
live AS (
    -- Chains that are open once this statement has run.
    SELECT retry_chains.chain_id FROM retry_chains
    UNION
    SELECT reblock.chain_id FROM reblock
),
blocked_by AS (
    SELECT DISTINCT ON (q.job_id) q.job_id, s.chain_id
    FROM requested AS q
    JOIN blocker_state AS s ON s.job_id = q.job_id
    WHERE q.status IN ('failed', 'cancelled')
      AND NOT q.runs_after
      AND s.status IN ('failed', 'cancelled')  -- as stored: retried in the same request or not
      AND NOT s.any_end
    ORDER BY q.job_id, s.chain_id IS DISTINCT FROM q.failed_by_chain_id, s.idx
),
refused AS (
    SELECT 1 WHERE %(refuse)s::boolean  -- an id that is no UUID was refused before this statement
    UNION ALL
    SELECT 1 FROM requested AS q WHERE NOT q.found OR q.status NOT IN ('failed', 'cancelled')
    UNION ALL
    SELECT 1 FROM blocked_by
),
targets AS (
    SELECT q.job_id, q.runs_after, 'retried' AS kind
    FROM requested AS q
    WHERE q.status IN ('failed', 'cancelled')
    UNION ALL
    SELECT r.job_id, d.runs_after_failed_blockers, 'reblocked'
    FROM reblock AS r
    JOIN {job} AS d ON d.id = r.job_id
    UNION ALL
    SELECT waiting.job_id, waiting.runs_after, 'waiting' FROM waiting
),
counts AS (
    SELECT t.job_id, t.kind,
           count(s.chain_id) FILTER (
               WHERE s.chain_id IN (SELECT live.chain_id FROM live)
                  OR s.status NOT IN ('completed', 'failed', 'cancelled')
                  OR (s.status <> 'completed' AND NOT (t.runs_after OR s.any_end))
           )::integer AS open
    FROM targets AS t
    LEFT JOIN blocker_state AS s ON s.job_id = t.job_id
    GROUP BY t.job_id, t.kind
),
retried AS (
    UPDATE {job} AS j
    SET status = CASE WHEN c.open > 0 THEN 'blocked' ELSE 'pending' END::{job_status},
        open_blocker_count = c.open,
        scheduled_at = GREATEST(
            COALESCE(%(scheduled_at)s::timestamptz, clock.now + COALESCE(%(delay)s::interval, interval '0')),
            clock.now
        ),
        attempt_base = j.attempt,
        failed_at = NULL,
        cancelled_at = NULL,
        cancel_reason = NULL,
        failed_by_chain_id = NULL,
        leased_by = NULL,
        leased_until = NULL
    FROM counts AS c, clock
    WHERE j.id = c.job_id
      AND c.kind = 'retried'
      AND j.status IN ('failed', 'cancelled')
      AND NOT EXISTS (SELECT 1 FROM refused)
    RETURNING j.*
),
reblocked AS (
    UPDATE {job} AS j
    SET status = 'blocked',
        open_blocker_count = c.open,
        attempt_base = j.attempt,
        failed_at = NULL,
        cancelled_at = NULL,
        cancel_reason = NULL,
        failed_by_chain_id = NULL,
        leased_by = NULL,
        leased_until = NULL
    FROM counts AS c
    WHERE j.id = c.job_id
      AND c.kind = 'reblocked'
      AND j.status = 'failed'
      AND NOT EXISTS (SELECT 1 FROM refused)
    RETURNING j.*
),
recounted AS (
    UPDATE {job} AS j
    SET open_blocker_count = c.open
    FROM counts AS c
    WHERE j.id = c.job_id
      AND c.kind = 'waiting'
      AND j.status = 'blocked'
      AND NOT EXISTS (SELECT 1 FROM refused)
    RETURNING j.id
),
renamed AS (
    -- Still failed, by a blocker chain this statement does not revive: name that one.
    UPDATE {job} AS j
    SET failed_by_chain_id = o.chain_id
    FROM outside_failed AS o
    WHERE j.id = o.job_id
      AND j.status = 'failed'
      AND NOT EXISTS (SELECT 1 FROM refused)
    RETURNING j.id
)
SELECT 'requested' AS _kind, q.job_id::text AS _id, q.found AS _found, q.status::text AS _status,
       bf.chain_id::text AS _blocked_by, retried.*
FROM requested AS q
LEFT JOIN blocked_by AS bf ON bf.job_id = q.job_id
LEFT JOIN retried ON retried.id = q.job_id
UNION ALL
SELECT 'reblocked', NULL, NULL, NULL, NULL, reblocked.*
FROM reblocked
