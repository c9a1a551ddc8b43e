-- jobs_runs_after_set: mark the given new jobs runs_after_failed_blockers (jobs_create runs
-- it only for a batch that holds such jobs, so a plain insert stays as it was).
UPDATE {p}job SET runs_after_failed_blockers = 1 WHERE id IN (SELECT value FROM json_each(:job_ids))
