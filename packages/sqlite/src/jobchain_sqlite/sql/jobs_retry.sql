-- jobs_retry: redrive the requested failed or cancelled jobs (jobs_retry_lookup accepted
-- them) and, recursively, every failed job whose failed_by_chain_id is the chain of a job
-- redriven here (reach; each has one parent, so reach is a forest). Each: attempt_base =
-- attempt (a fresh budget), failed_at, cancelled_at, cancel_reason, failed_by_chain_id and
-- the lease cleared; attempt, attempt_errors and last_attempt_error kept. A requested job
-- goes pending at :scheduled_at unless one of its blocker chains is not terminal (or is
-- redriven here), then blocked; a dependent goes blocked, its scheduled_at unchanged.
-- stuck: a dependent that another blocker chain (failed or cancelled, not redriven here)
-- also keeps from running stays failed, now naming the first such chain declared; the
-- dependents below it (cut) stay as they are. plan is MATERIALIZED, so the decisions read
-- the table as it was before this statement.
-- Plan: primary key, then job_blocker_chain_idx per redriven chain.
WITH RECURSIVE
requested(id) AS (
    SELECT value FROM json_each(:job_ids)
),
reach(id, chain_id, parent) AS (
    SELECT j.id, j.chain_id, NULL FROM {p}job j WHERE j.id IN (SELECT id FROM requested)
    UNION
    SELECT d.id, d.chain_id, f.chain_id
    FROM reach f
    JOIN {p}job_blocker b ON b.blocked_by_chain_id = f.chain_id
    JOIN {p}job d ON d.id = b.job_id
    WHERE +d.status = 'failed' AND d.failed_by_chain_id = f.chain_id
),
r(id, chain_id, parent) AS MATERIALIZED (
    SELECT id, chain_id, parent FROM reach
),
stuck(id, chain_id, other) AS MATERIALIZED (
    SELECT id, chain_id, other FROM (
        SELECT r.id, r.chain_id, (
            SELECT o.blocked_by_chain_id FROM {p}job_blocker o
            WHERE o.job_id = r.id
              AND o.blocked_by_chain_id <> r.parent
              AND NOT o.resolves_on_any_end
              AND o.blocked_by_chain_id NOT IN (SELECT chain_id FROM r)
              AND (SELECT l.status FROM {p}job l
                   WHERE l.chain_id = o.blocked_by_chain_id
                   ORDER BY l.chain_index DESC LIMIT 1) IN ('failed', 'cancelled')
            ORDER BY o.idx LIMIT 1
        ) AS other
        FROM r
        WHERE r.parent IS NOT NULL
    )
    WHERE other IS NOT NULL
),
cut(chain_id) AS (
    SELECT chain_id FROM stuck
    UNION
    SELECT r.chain_id FROM cut c JOIN r ON r.parent = c.chain_id
),
redriven(id, chain_id) AS MATERIALIZED (
    SELECT id, chain_id FROM r WHERE chain_id NOT IN (SELECT chain_id FROM cut)
),
plan(id, status, requested, failed_by) AS MATERIALIZED (
    SELECT v.id,
           CASE WHEN v.id IN (SELECT id FROM requested) AND NOT EXISTS (
               SELECT 1 FROM {p}job_blocker o
               WHERE o.job_id = v.id
                 AND (o.blocked_by_chain_id IN (SELECT chain_id FROM redriven)
                      OR (SELECT l.status FROM {p}job l
                          WHERE l.chain_id = o.blocked_by_chain_id
                          ORDER BY l.chain_index DESC LIMIT 1) NOT IN ('completed', 'failed', 'cancelled'))
           ) THEN 'pending' ELSE 'blocked' END,
           v.id IN (SELECT id FROM requested),
           NULL
    FROM redriven v
    UNION ALL
    SELECT id, 'failed', 0, other FROM stuck
)
UPDATE {p}job
SET status = p.status,
    scheduled_at = CASE WHEN p.requested THEN :scheduled_at ELSE {p}job.scheduled_at END,
    attempt_base = CASE WHEN p.status = 'failed' THEN {p}job.attempt_base ELSE {p}job.attempt END,
    failed_at = CASE WHEN p.status = 'failed' THEN {p}job.failed_at END,
    cancelled_at = CASE WHEN p.status = 'failed' THEN {p}job.cancelled_at END,
    cancel_reason = CASE WHEN p.status = 'failed' THEN {p}job.cancel_reason END,
    failed_by_chain_id = p.failed_by,
    leased_by = CASE WHEN p.status = 'failed' THEN {p}job.leased_by END,
    leased_until = CASE WHEN p.status = 'failed' THEN {p}job.leased_until END
FROM plan AS p
WHERE {p}job.id = p.id
RETURNING *
