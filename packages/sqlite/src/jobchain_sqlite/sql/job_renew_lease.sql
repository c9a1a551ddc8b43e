-- job_renew_lease: extend the lease of a running job owned by :worker_id (and generation).
-- Zero rows means the caller does not own it; the adapter then reads the job to say why.
UPDATE {p}job
SET leased_until = :leased_until
WHERE id = :job_id
  AND status = 'running'
  AND leased_by = :worker_id
  AND (:lease_generation IS NULL OR lease_generation = :lease_generation)
RETURNING *
