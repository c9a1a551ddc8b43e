-- jobs_trigger_lookup: id and status of the jobs a refused trigger named (error path only).
SELECT id, status FROM {p}job WHERE id IN (SELECT value FROM json_each(:job_ids))
