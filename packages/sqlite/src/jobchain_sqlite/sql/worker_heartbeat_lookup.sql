-- worker_heartbeat_lookup: the caller's registry state and incarnation before this heartbeat
-- (NULL on its first one; they decide whether it is fenced) and the earliest lease among running jobs of :type_names that another worker
-- holds (when a reap is next worth running). Runs after worker_jobs_release, so the jobs
-- this heartbeat released no longer count.
-- Plan: worker primary key; job_expired_lease_idx (forced with INDEXED BY, running jobs only).
SELECT
    (SELECT w.state FROM {p}worker w WHERE w.id = :worker_id) AS previous_state,
    (SELECT w.incarnation FROM {p}worker w WHERE w.id = :worker_id) AS previous_incarnation,
    (SELECT MIN(j.leased_until) FROM {p}job j INDEXED BY {p}job_expired_lease_idx
     WHERE j.status = 'running'
       AND j.leased_until IS NOT NULL
       AND j.type_name IN (SELECT value FROM json_each(:type_names))
       AND j.leased_by IS NOT :worker_id) AS next_lease_at
