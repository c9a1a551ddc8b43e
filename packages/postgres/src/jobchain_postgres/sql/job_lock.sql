-- job_lock: wait for and take the row lock of one job, and record it in jobchain.locked as
-- jobs_lock does (job_complete's path when the row was busy; sent in one pipeline with it).
SELECT set_config('jobchain.locked', COALESCE(string_agg(l.id::text, ','), ''), true)
FROM (SELECT j.id FROM {job} AS j WHERE j.id = %(job_id)s FOR UPDATE) AS l
