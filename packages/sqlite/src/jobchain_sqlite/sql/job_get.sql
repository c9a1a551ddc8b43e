-- job_get: one job by id (primary key).
SELECT * FROM {p}job WHERE id = :job_id
