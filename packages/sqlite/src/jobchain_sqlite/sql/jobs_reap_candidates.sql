-- jobs_reap_candidates: up to :limit running jobs whose lease expired, oldest lease first, with
-- that lease (jobs_reap_expired clears it, and its RETURNING shows only the new values).
-- Plan: job_expired_lease_idx (forced with INDEXED BY); excluded ids are the reaper's own jobs.
SELECT c.id, c.leased_until FROM {p}job c INDEXED BY {p}job_expired_lease_idx
WHERE c.status = 'running'
  AND c.leased_until IS NOT NULL
  AND c.leased_until < :now
  AND c.type_name IN (SELECT value FROM json_each(:type_names))
  AND c.id NOT IN (SELECT value FROM json_each(:exclude_job_ids))
ORDER BY c.leased_until, c.id
LIMIT :limit
