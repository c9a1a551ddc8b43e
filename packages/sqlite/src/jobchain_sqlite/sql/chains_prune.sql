-- chains_prune: retention. Delete up to :limit terminal chains whose last job finished
-- before the cutoff for its status (:completed_before, :failed_before, :cancelled_before;
-- NULL keeps that status: a comparison with NULL is never true), oldest finish first.
-- candidate: qualifying chains none of whose dependents (jobs that declared them as a
-- blocker) belongs to a chain that does not qualify; the oldest :limit of them.
-- kept: candidates that still block a job outside the deleted set (a dependent beyond the
-- limit, or several levels down), recursively: they stay until their dependents go.
-- Every job of a deleted chain goes; its blocker rows by ON DELETE CASCADE.
-- Plan: job_failed_idx / job_cancelled_idx for failed and cancelled chains; completed
-- chains scan the job table (an index on completed_at would cost every completion).
WITH RECURSIVE
candidate(chain_id) AS MATERIALIZED (
    SELECT f.chain_id FROM (
        SELECT l.chain_id, l.chain_index, l.completed_at AS finished_at FROM {p}job l
        WHERE +l.status = 'completed' AND l.completed_at < :completed_before
        UNION ALL
        SELECT l.chain_id, l.chain_index, l.failed_at FROM {p}job l INDEXED BY {p}job_failed_idx
        WHERE l.status = 'failed' AND l.failed_at < :failed_before
        UNION ALL
        SELECT l.chain_id, l.chain_index, l.cancelled_at FROM {p}job l INDEXED BY {p}job_cancelled_idx
        WHERE l.status = 'cancelled' AND l.cancelled_at < :cancelled_before
    ) f
    WHERE NOT EXISTS (
        SELECT 1 FROM {p}job n WHERE n.chain_id = f.chain_id AND n.chain_index = f.chain_index + 1
    )
      AND NOT EXISTS (
        SELECT 1
        FROM {p}job_blocker b
        JOIN {p}job d ON d.id = b.job_id
        JOIN {p}job dl ON dl.chain_id = d.chain_id
            AND dl.chain_index = (SELECT MAX(m.chain_index) FROM {p}job m WHERE m.chain_id = d.chain_id)
        WHERE b.blocked_by_chain_id = f.chain_id
          AND NOT (IFNULL(dl.status = 'completed' AND dl.completed_at < :completed_before, 0)
                   OR IFNULL(dl.status = 'failed' AND dl.failed_at < :failed_before, 0)
                   OR IFNULL(dl.status = 'cancelled' AND dl.cancelled_at < :cancelled_before, 0))
    )
    ORDER BY f.finished_at, f.chain_id
    LIMIT :limit
),
kept(chain_id) AS (
    SELECT b.blocked_by_chain_id
    FROM {p}job_blocker b
    JOIN {p}job d ON d.id = b.job_id
    WHERE b.blocked_by_chain_id IN (SELECT chain_id FROM candidate)
      AND d.chain_id NOT IN (SELECT chain_id FROM candidate)
    UNION
    SELECT b.blocked_by_chain_id
    FROM kept k
    JOIN {p}job d ON d.chain_id = k.chain_id
    JOIN {p}job_blocker b ON b.job_id = d.id
    WHERE b.blocked_by_chain_id IN (SELECT chain_id FROM candidate)
)
DELETE FROM {p}job
WHERE chain_id IN (SELECT chain_id FROM candidate EXCEPT SELECT chain_id FROM kept)
RETURNING id, chain_id, chain_index, chain_type_name, status, completed_at, failed_at, cancelled_at
