-- jobs_retry: redrive the requested failed or cancelled jobs (jobs_retry_lookup accepted
-- them) and, recursively, every failed job whose failed_by_chain_id is the chain of a job
-- redriven here. Each: attempt_base = attempt (a fresh budget), failed_at, cancelled_at,
-- cancel_reason, failed_by_chain_id and the lease cleared; attempt, attempt_errors and
-- last_attempt_error kept. A requested job goes pending at :scheduled_at unless one of its
-- blocker chains is not terminal (or is redriven here), then blocked; every dependent goes
-- blocked (its failed_by chain is redriven here). plan is MATERIALIZED, so the decisions
-- read the table as it was before this statement.
-- Plan: primary key, then job_blocker_chain_idx per redriven chain.
WITH RECURSIVE
requested(id) AS (
    SELECT value FROM json_each(:job_ids)
),
follow(id, chain_id) AS (
    SELECT j.id, j.chain_id FROM {p}job j WHERE j.id IN (SELECT id FROM requested)
    UNION
    SELECT d.id, d.chain_id
    FROM follow f
    JOIN {p}job_blocker b ON b.blocked_by_chain_id = f.chain_id
    JOIN {p}job d ON d.id = b.job_id
    WHERE +d.status = 'failed' AND d.failed_by_chain_id = f.chain_id
),
plan(id, status, requested) AS MATERIALIZED (
    SELECT f.id,
           CASE WHEN f.id IN (SELECT id FROM requested) AND NOT EXISTS (
               SELECT 1 FROM {p}job_blocker o
               WHERE o.job_id = f.id
                 AND (o.blocked_by_chain_id IN (SELECT chain_id FROM follow)
                      OR (SELECT l.status FROM {p}job l
                          WHERE l.chain_id = o.blocked_by_chain_id
                          ORDER BY l.chain_index DESC LIMIT 1) NOT IN ('completed', 'failed', 'cancelled'))
           ) THEN 'pending' ELSE 'blocked' END,
           f.id IN (SELECT id FROM requested)
    FROM follow f
)
UPDATE {p}job
SET status = p.status,
    scheduled_at = CASE WHEN p.requested THEN :scheduled_at ELSE {p}job.scheduled_at END,
    attempt_base = {p}job.attempt,
    failed_at = NULL,
    cancelled_at = NULL,
    cancel_reason = NULL,
    failed_by_chain_id = NULL,
    leased_by = NULL,
    leased_until = NULL
FROM plan AS p
WHERE {p}job.id = p.id
RETURNING *
