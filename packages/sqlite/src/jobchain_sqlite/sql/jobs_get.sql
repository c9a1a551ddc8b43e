-- jobs_get: the jobs with the given ids (jobs_complete reads its refused items to say why).
SELECT * FROM {p}job WHERE id IN (SELECT value FROM json_each(:job_ids))
