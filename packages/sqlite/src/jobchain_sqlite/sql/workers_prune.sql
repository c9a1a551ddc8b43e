-- workers_prune: forget registry rows whose alive_until is older than :prune_before (workers
-- gone for longer than WorkerHeartbeat.prune_after, whatever their last state).
-- Plan: worker_alive_until_idx.
DELETE FROM {p}worker WHERE alive_until < :prune_before
