-- chains_prune: retention, step 1: the ids of up to :limit terminal chains whose last job
-- finished before the cutoff for its status (:completed_before, :failed_before,
-- :cancelled_before; NULL keeps that status: a comparison with NULL is never true), oldest
-- finish first. Only a blocker row without resolves_on_any_end holds a chain back: an
-- any-end row (an ordering predecessor, a runs_after_failed wait) is resolved by the chain
-- being terminal and goes with it (chains_prune_blockers), else a key that keeps getting
-- chains would never lose its history.
-- bad: chains that block a job of a chain that does not qualify, and recursively every
-- chain that blocks a job of a bad chain: they cannot go under these cutoffs, so they are
-- left out before the batch is chosen and never crowd out the chains behind them.
-- candidate: the oldest :limit qualifying chains that are not bad.
-- kept: candidates that still block a job outside the batch (a dependent beyond the
-- limit), recursively: they stay for a later batch.
-- Plan: job_failed_idx / job_cancelled_idx for failed and cancelled chains; completed
-- chains scan the job table (an index on completed_at would cost every completion).
WITH RECURSIVE
bad(chain_id) AS (
    SELECT b.blocked_by_chain_id
    FROM {p}job_blocker b
    JOIN {p}job d ON d.id = b.job_id
    JOIN {p}job dl ON dl.chain_id = d.chain_id
        AND dl.chain_index = (SELECT MAX(m.chain_index) FROM {p}job m WHERE m.chain_id = d.chain_id)
    WHERE NOT b.resolves_on_any_end
      AND NOT (IFNULL(dl.status = 'completed' AND dl.completed_at < :completed_before, 0)
               OR IFNULL(dl.status = 'failed' AND dl.failed_at < :failed_before, 0)
               OR IFNULL(dl.status = 'cancelled' AND dl.cancelled_at < :cancelled_before, 0))
    UNION
    SELECT b.blocked_by_chain_id
    FROM bad x
    JOIN {p}job d ON d.chain_id = x.chain_id
    JOIN {p}job_blocker b ON b.job_id = d.id
    WHERE NOT b.resolves_on_any_end
),
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
      AND f.chain_id NOT IN (SELECT chain_id FROM bad)
    ORDER BY f.finished_at, f.chain_id
    LIMIT :limit
),
kept(chain_id) AS (
    SELECT b.blocked_by_chain_id
    FROM {p}job_blocker b
    JOIN {p}job d ON d.id = b.job_id
    WHERE b.blocked_by_chain_id IN (SELECT chain_id FROM candidate)
      AND NOT b.resolves_on_any_end
      AND d.chain_id NOT IN (SELECT chain_id FROM candidate)
    UNION
    SELECT b.blocked_by_chain_id
    FROM kept k
    JOIN {p}job d ON d.chain_id = k.chain_id
    JOIN {p}job_blocker b ON b.job_id = d.id
    WHERE b.blocked_by_chain_id IN (SELECT chain_id FROM candidate)
      AND NOT b.resolves_on_any_end
)
SELECT chain_id FROM candidate EXCEPT SELECT chain_id FROM kept
