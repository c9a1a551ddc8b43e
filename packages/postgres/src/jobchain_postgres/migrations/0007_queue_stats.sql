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

-- Two indexes, each index-only for what it serves; pending and running jobs are in
-- job_acquisition_idx and job_expired_lease_idx already. A job gains one entry in each when it
-- completes (that update is never HOT: status is indexed), none before. Their predicates name no
-- status that 0006 added, for the reason above.
-- job_stats_idx: the counts per type and status and the failures by error type. Its entries are
-- the same for every job of one type and status (and error type), so B-tree deduplication
-- stores them as a few posting lists: about 7 MB for a million jobs, which a count reads whole
-- (an index holding each job's completion time as well took 124 MB, and its counts read that).
-- job_finished_idx: finished jobs by type, status and completion time, with what the windows,
-- the duration sample and the throughput buckets read; those read only the recent range.
--
-- Building them holds a SHARE lock on the jobs table (writes wait; reads go on): about a second
-- per million jobs each. On a table too large to wait for, build them beforehand with CREATE
-- INDEX CONCURRENTLY under these names and definitions; IF NOT EXISTS then leaves them alone.
CREATE INDEX IF NOT EXISTS {job_stats_idx} ON {job} (type_name, status, failed_error_type)
    WHERE status NOT IN ('pending', 'running');
CREATE INDEX IF NOT EXISTS {job_finished_idx} ON {job} (type_name, status, completed_at, id)
    INCLUDE (attempt_started_at, failed_at, cancelled_at)
    WHERE status NOT IN ('pending', 'running', 'blocked');
