-- workers_mark_dead: every other worker that reported running or draining and whose
-- alive_until passed becomes 'dead'; worker_jobs_release then returns its running jobs to
-- pending. A worker that stopped cleanly ('stopped') never counts as dead. A fenced heartbeat
-- (the caller's row holds a later incarnation, or is dead at this one) marks nobody: a
-- presumed-dead worker rescues nothing.
UPDATE {p}worker
SET state = 'dead'
WHERE state IN ('running', 'draining')
  AND alive_until < :now
  AND id <> :worker_id
  AND NOT EXISTS (
      SELECT 1 FROM {p}worker AS me
      WHERE me.id = :worker_id
        AND (me.incarnation > :incarnation OR (me.state = 'dead' AND me.incarnation >= :incarnation))
  )
RETURNING id
