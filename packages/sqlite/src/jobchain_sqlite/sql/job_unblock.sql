-- job_unblock: after chain :chain_id completed, move every job it blocked whose blocker
-- chains are now all complete from blocked to pending, never scheduled in the past. A job
-- created with runs_after_failed_blockers counts a failed or cancelled blocker as resolved,
-- and so does every job for a blocker row with resolves_on_any_end (an ordering key's
-- previous chain, a JobWait with runs_after_failed).
-- Plan: job_blocker_chain_idx drives primary-key lookups (the unary + keeps the planner from
-- scanning every blocked job through the status index), then per blocker job_chain_index_idx.
UPDATE {p}job
SET status = 'pending',
    scheduled_at = MAX(scheduled_at, :now)
WHERE +status = 'blocked'
  AND id IN (SELECT b.job_id FROM {p}job_blocker b WHERE b.blocked_by_chain_id = :chain_id)
  AND NOT EXISTS (
      SELECT 1 FROM {p}job_blocker o
      WHERE o.job_id = {p}job.id
        AND CASE WHEN {p}job.runs_after_failed_blockers OR o.resolves_on_any_end
                 THEN (SELECT l.status FROM {p}job l
                       WHERE l.chain_id = o.blocked_by_chain_id
                       ORDER BY l.chain_index DESC LIMIT 1) NOT IN ('completed', 'failed', 'cancelled')
                 ELSE (SELECT l.status FROM {p}job l
                       WHERE l.chain_id = o.blocked_by_chain_id
                       ORDER BY l.chain_index DESC LIMIT 1) <> 'completed' END
  )
RETURNING *
