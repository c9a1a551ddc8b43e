-- 0007_queue_stats: what queue_stats reads its per-status counts, failures by error type, recent
-- windows, duration sample and throughput from (issue 18, operations).
--
-- failed_error_type: the type of the last error-history entry of a failed job ("" for none), set
-- by the statements that fail a job (job_fail, jobs_propagate, jobs_create), so failures count
-- by error type without reading the rows; left as it was when a retry takes the job out of
-- failed (only failed jobs are counted by it). A nullable column: a catalog change only. The
-- failed jobs already there get theirs from their history; the filter compares text, because
-- in an upgrade from 0005 this runs in the transaction that added 'failed' to the enum, which
-- cannot use that value yet (there are no failed jobs then).
ALTER TABLE {job} ADD COLUMN failed_error_type text;
UPDATE {job}
SET failed_error_type = COALESCE(attempt_errors -> -1 ->> 'error_type', '')
WHERE status::text = 'failed';

-- Jobs that are neither pending nor running (those are in job_acquisition_idx and
-- job_expired_lease_idx already) by type and status, completed ones by completion time and id,
-- with the columns the figures read, so every read is index-only. On the hot path a job gains
-- one entry, when it completes (that update is never HOT: status is indexed). The predicate
-- names no status that 0006 added, for the reason above.
--
-- Building it holds a SHARE lock on the jobs table (writes wait; reads go on): about a second
-- per million jobs. On a table too large to wait for, build it beforehand with CREATE INDEX
-- CONCURRENTLY under this name and these columns; IF NOT EXISTS then leaves it alone.
CREATE INDEX IF NOT EXISTS {job_stats_idx} ON {job} (type_name, status, completed_at, id)
    INCLUDE (attempt_started_at, failed_at, cancelled_at, failed_error_type)
    WHERE status NOT IN ('pending', 'running');
