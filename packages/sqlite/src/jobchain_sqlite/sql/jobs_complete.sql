-- jobs_complete: job_complete for many jobs, each owned by the worker its item names, in one
-- statement (a worker's group commit). :items is a JSON array of
-- [job_id, worker_id, lease_generation, output, now]; the adapter passes distinct ids and a
-- worker id on every item (anything else takes job_complete one item at a time).
-- An item whose guard fails changes nothing and returns no row; the adapter reads those jobs
-- to say why. SQLite's RETURNING cannot name the FROM table: rows are matched to items by id.
-- has_next / is_blocker as in job_complete.
-- Plan: the items drive primary-key lookups; the unary + keeps the planner from scanning
-- every running job through the status index instead.
-- Returns rows.RUNNING_JOB_COLUMNS (the job's columns less the four only a failed or
-- cancelled job sets: a running job never has them), then the flags; each returned column
-- costs every row of a claim.
UPDATE {p}job
SET status = 'completed',
    output = i.output,
    completed_at = i.now,
    completed_by = i.worker_id,
    leased_by = NULL,
    leased_until = NULL,
    last_attempt_error = NULL
FROM (
    SELECT
        json_extract(value, '$[0]') AS job_id,
        json_extract(value, '$[1]') AS worker_id,
        json_extract(value, '$[2]') AS lease_generation,
        json_extract(value, '$[3]') AS output,
        json_extract(value, '$[4]') AS now
    FROM json_each(:items)
) AS i
WHERE {p}job.id = i.job_id
  AND +{p}job.status = 'running'
  AND +{p}job.leased_by = i.worker_id
  AND (i.lease_generation IS NULL OR {p}job.lease_generation = i.lease_generation)
RETURNING id, type_name, chain_id, chain_type_name, chain_index, status, input, output, created_at,
       scheduled_at, attempt, last_attempt_at, last_attempt_error, leased_by, leased_until,
       lease_generation, completed_at, completed_by, deduplication_key, trace_context,
       chain_trace_context, first_attempt_at, attempt_started_at, rescued_at, rescued_from,
       rescue_reason, attempt_errors, attempt_base, runs_after_failed_blockers, priority, ordering_key, EXISTS (
    SELECT 1 FROM {p}job c WHERE c.chain_id = {p}job.chain_id AND c.chain_index = {p}job.chain_index + 1
) AS has_next, EXISTS (
    SELECT 1 FROM {p}job_blocker b WHERE b.blocked_by_chain_id = {p}job.chain_id
) AS is_blocker
