-- job_lock: wait for and take the row lock of one job (job_complete's path when the row was busy).
SELECT j.id FROM {job} AS j WHERE j.id = %(job_id)s FOR UPDATE
