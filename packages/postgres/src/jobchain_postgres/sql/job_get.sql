-- job_get: one job by id.
-- Plan: primary key.
SELECT j.* FROM {job} AS j WHERE j.id = %(job_id)s
