-- jobs_trigger: make the given pending jobs eligible now, all or nothing.
-- The count guard updates nothing unless every distinct id exists and is pending; on zero
-- rows the adapter runs jobs_trigger_lookup to report what was missing or not pending.
-- Plan: primary key for both the update and the count (the unary + keeps the planner from
-- counting through every pending job by status instead).
UPDATE {p}job
SET scheduled_at = :now
WHERE id IN (SELECT value FROM json_each(:job_ids))
  AND (SELECT COUNT(*) FROM {p}job t
       WHERE t.id IN (SELECT value FROM json_each(:job_ids)) AND +t.status = 'pending') = :distinct_count
RETURNING *
