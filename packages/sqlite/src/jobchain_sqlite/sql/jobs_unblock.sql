-- jobs_unblock: job_unblock for several chains that completed in one jobs_complete, each
-- completed by the item at its position with its now. :done is a JSON array of
-- [chain_id, position, now]. A job whose blocker chains are now all complete goes blocked →
-- pending, attributed (position) to the last item that completed one of its blockers, as
-- completing the items one after another would; scheduled_at never lies before that
-- item's now. A runs_after_failed_blockers job counts failed or cancelled blockers as
-- resolved, as does any job for a blocker row with resolves_on_any_end (as in job_unblock).
-- Plan: job_blocker_chain_idx per completed chain, then primary-key lookups (the unary +
-- keeps the planner off the status index), then job_chain_index_idx per blocker.
UPDATE {p}job
SET status = 'pending',
    scheduled_at = MAX(scheduled_at, (
        SELECT json_extract(d.value, '$[2]')
        FROM {p}job_blocker b JOIN json_each(:done) d ON json_extract(d.value, '$[0]') = b.blocked_by_chain_id
        WHERE b.job_id = {p}job.id
        ORDER BY json_extract(d.value, '$[1]') DESC
        LIMIT 1
    ))
WHERE +status = 'blocked'
  AND id IN (
      SELECT b.job_id FROM {p}job_blocker b
      WHERE b.blocked_by_chain_id IN (SELECT json_extract(value, '$[0]') FROM json_each(:done))
  )
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
RETURNING *, (
    SELECT json_extract(d.value, '$[1]')
    FROM {p}job_blocker b JOIN json_each(:done) d ON json_extract(d.value, '$[0]') = b.blocked_by_chain_id
    WHERE b.job_id = {p}job.id
    ORDER BY json_extract(d.value, '$[1]') DESC
    LIMIT 1
) AS position
