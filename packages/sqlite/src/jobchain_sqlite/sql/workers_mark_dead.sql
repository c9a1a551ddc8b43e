-- workers_mark_dead: every other worker that reported running or draining and whose
-- alive_until passed becomes 'dead'; worker_jobs_release then returns its running jobs to
-- pending. A worker that stopped cleanly ('stopped') never counts as dead.
UPDATE {p}worker
SET state = 'dead'
WHERE state IN ('running', 'draining')
  AND alive_until < :now
  AND id <> :worker_id
RETURNING id
