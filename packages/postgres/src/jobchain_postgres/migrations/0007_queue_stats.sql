-- 0007_queue_stats: the index queue_stats reads its per-status counts, recent windows, duration
-- sample and throughput from (issue 18, operations).
--
-- Jobs that are neither pending nor running, by type and status, completed ones by completion
-- time and id; the columns the figures need ride along, so every read is index-only. Pending
-- and running jobs are already in job_acquisition_idx and job_expired_lease_idx. On the hot path
-- a job gains one entry, when it completes (its status update is never HOT: status is indexed).
-- The predicate names no status added by 0006, so this runs in the same transaction as 0006
-- (a value added to an enum cannot be used before its transaction commits).
--
-- Building it holds a SHARE lock on the jobs table (writes wait; reads go on): about a second
-- per million jobs. On a table too large to wait for, build it beforehand with CREATE INDEX
-- CONCURRENTLY under this name; IF NOT EXISTS then leaves it alone.
CREATE INDEX IF NOT EXISTS {job_stats_idx} ON {job} (type_name, status, completed_at, id)
    INCLUDE (attempt_started_at, failed_at, cancelled_at)
    WHERE status NOT IN ('pending', 'running');
