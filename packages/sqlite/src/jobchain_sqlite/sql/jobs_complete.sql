-- jobs_complete: job_complete for many jobs, each owned by the worker its item names, in one
-- statement (a worker's group commit). :items is a JSON array of
-- [job_id, worker_id, lease_generation, output, now]; the adapter passes distinct ids and a
-- worker id on every item (anything else takes job_complete one item at a time).
-- An item whose guard fails changes nothing and returns no row; the adapter reads those jobs
-- to say why. SQLite's RETURNING cannot name the FROM table: rows are matched to items by id.
-- has_next / is_blocker as in job_complete.
-- Plan: the items drive primary-key lookups; the unary + keeps the planner from scanning
-- every running job through the status index instead.
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
RETURNING *, EXISTS (
    SELECT 1 FROM {p}job c WHERE c.chain_id = {p}job.chain_id AND c.chain_index = {p}job.chain_index + 1
) AS has_next, EXISTS (
    SELECT 1 FROM {p}job_blocker b WHERE b.blocked_by_chain_id = {p}job.chain_id
) AS is_blocker
