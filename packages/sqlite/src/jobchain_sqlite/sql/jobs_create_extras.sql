-- jobs_create_extras: the lifecycle columns of new jobs that start with any (jobs_create
-- runs it only for a batch holding such jobs, so a plain insert stays as it was). :items is a
-- JSON array of [id, runs_after_failed_blockers (0/1), failed_at, failed_by_chain_id,
-- last_attempt_error, attempt_errors (JSON text)]: a job created against a blocker chain that
-- already failed or was cancelled is inserted failed, as propagation would have failed it.
UPDATE {p}job
SET runs_after_failed_blockers = i.runs_after,
    failed_at = i.failed_at,
    failed_by_chain_id = i.failed_by,
    last_attempt_error = i.error,
    attempt_errors = i.errors
FROM (
    SELECT
        json_extract(value, '$[0]') AS id,
        json_extract(value, '$[1]') AS runs_after,
        json_extract(value, '$[2]') AS failed_at,
        json_extract(value, '$[3]') AS failed_by,
        json_extract(value, '$[4]') AS error,
        json_extract(value, '$[5]') AS errors
    FROM json_each(:items)
) AS i
WHERE {p}job.id = i.id
