-- jobs_acquire: the plain claim: up to :limit eligible pending jobs, oldest scheduled_at
-- first, for claims of types without limits while none of their pending jobs has a priority.
-- The type list leaves out paused types (type_control) and is empty when the guard fails
-- (NOT EXISTS on job_priority_idx, which holds only jobs of priority <> 0, so it is empty
-- while nobody uses priorities): both are read once per statement, in the list subquery,
-- never per row (as compound SELECTs: a NOT IN or an IN nested in the list made the whole
-- claim ~30 % slower on SQLite 3.40, measured on 10,000 due jobs). When the guard fails
-- the statement claims nothing and the adapter takes the general claim
-- (jobs_acquire_candidates + jobs_acquire_ids). has_more_after probes type_control by
-- primary key instead (RETURNING runs as a sub-program, which rebuilt a compound list for
-- every returned row).
-- Plan: job_acquisition_idx, forced with INDEXED BY: without statistics the planner may pick
-- a listing index and sort every pending job. No SKIP LOCKED is needed: SQLite runs one
-- writer at a time, so the inner SELECT and the UPDATE see the same rows and no other
-- transaction can claim them.
-- Every claim stamps attempt_started_at; only the first one stamps first_attempt_at.
-- :type_leases is NULL, or a JSON object {type name: leased_until} for the types whose lease
-- differs from :leased_until (JobsAcquire.type_leases); json_each compares keys as text, so
-- no type name is ever spliced into a JSON path.
-- has_more_after: whether an eligible pending job sorts after this row. Evaluated on the
-- claimed row that sorts last, it is the batch's has_more: every job after it was not
-- claimed and stays pending while the UPDATE runs (the key columns never change here).
-- Returns rows.RUNNING_JOB_COLUMNS (the job's columns less the four only a failed or
-- cancelled job sets: a running job never has them), then the flags; each returned column
-- costs every row of a claim.
UPDATE {p}job
SET status = 'running',
    attempt = attempt + 1,
    lease_generation = lease_generation + 1,
    leased_by = :worker_id,
    leased_until = CASE WHEN :type_leases IS NULL THEN :leased_until
                        ELSE COALESCE((SELECT l.value FROM json_each(:type_leases) l WHERE l.key = {p}job.type_name),
                                      :leased_until) END,
    first_attempt_at = COALESCE(first_attempt_at, :now),
    attempt_started_at = :now
WHERE id IN (
    SELECT c.id FROM {p}job c INDEXED BY {p}job_acquisition_idx
    WHERE c.status = 'pending'
      AND c.type_name IN (
          SELECT value FROM json_each(:type_names)
          EXCEPT
          SELECT tc.type_name FROM {p}type_control tc WHERE tc.paused_at IS NOT NULL
          EXCEPT
          SELECT value FROM json_each(:type_names) WHERE EXISTS (
              SELECT 1 FROM json_each(:type_names) n
              JOIN {p}job g INDEXED BY {p}job_priority_idx
                  ON g.type_name = n.value AND g.status = 'pending' AND g.priority <> 0
          )
      )
      AND c.scheduled_at <= :now
    ORDER BY c.scheduled_at, c.created_at, c.id
    LIMIT :limit
)
RETURNING id, type_name, chain_id, chain_type_name, chain_index, status, input, output, created_at,
       scheduled_at, attempt, last_attempt_at, last_attempt_error, leased_by, leased_until,
       lease_generation, completed_at, completed_by, deduplication_key, trace_context,
       chain_trace_context, first_attempt_at, attempt_started_at, rescued_at, rescued_from,
       rescue_reason, attempt_errors, attempt_base, runs_after_failed_blockers, priority, ordering_key, EXISTS (
    SELECT 1 FROM {p}job x INDEXED BY {p}job_acquisition_idx
    WHERE x.status = 'pending'
      AND x.type_name IN (SELECT value FROM json_each(:type_names))
      AND NOT EXISTS (
          SELECT 1 FROM {p}type_control tc WHERE tc.type_name = x.type_name AND tc.paused_at IS NOT NULL
      )
      AND x.scheduled_at <= :now
      AND (x.scheduled_at, x.created_at, x.id) > ({p}job.scheduled_at, {p}job.created_at, {p}job.id)
) AS has_more_after
