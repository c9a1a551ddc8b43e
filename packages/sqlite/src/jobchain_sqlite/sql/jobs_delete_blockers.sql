-- jobs_delete_blockers: delete the blocker rows of the given (deleted) jobs. Only needed
-- on a joined connection with foreign keys off (ON DELETE CASCADE does it otherwise).
DELETE FROM {p}job_blocker WHERE job_id IN (SELECT value FROM json_each(:job_ids))
