-- jobs_reap_expired: return up to :limit running jobs whose lease expired to pending.
-- Plan: job_expired_lease_idx (forced with INDEXED BY); oldest lease first; excluded ids are the reaper's own jobs.
UPDATE {p}job
SET status = 'pending',
    leased_by = NULL,
    leased_until = NULL
WHERE id IN (
    SELECT c.id FROM {p}job c INDEXED BY {p}job_expired_lease_idx
    WHERE c.status = 'running'
      AND c.leased_until IS NOT NULL
      AND c.leased_until < :now
      AND c.type_name IN (SELECT value FROM json_each(:type_names))
      AND c.id NOT IN (SELECT value FROM json_each(:exclude_job_ids))
    ORDER BY c.leased_until, c.id
    LIMIT :limit
)
RETURNING *
