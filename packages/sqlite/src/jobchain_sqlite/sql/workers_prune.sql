-- workers_prune: forget registry rows whose alive_until is older than :prune_before (workers
-- gone for longer than WorkerHeartbeat.prune_after, whatever their last state), except the
-- rows this heartbeat just marked dead (:dead_ids, a JSON array): they list as dead until a
-- later heartbeat, as on every backend.
-- Plan: worker_alive_until_idx.
DELETE FROM {p}worker
WHERE alive_until < :prune_before
  AND id NOT IN (SELECT value FROM json_each(:dead_ids))
