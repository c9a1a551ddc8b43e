-- 0006_queue_stats: partial indexes, one per status that had none by job type, so that
-- queue_stats counts every status of a type from an index (never the job table) and reads
-- recent completions, failures by error type and cancellations without a scan.
-- Pending and running jobs already have theirs (job_acquisition_idx, job_expired_lease_idx).
--
-- Cost on the plain path (create, claim, complete): a job enters one of these indexes only
-- when it becomes blocked, completed, failed or cancelled. Claims, reschedules and reaps
-- only evaluate their WHERE (status) and write nothing to them. A completion writes one
-- entry, at the end of its type's range of job_completed_type_idx (completion times only
-- grow), which is the one price queue_stats puts on the hot path: it is measured in
-- docs/adapters/sqlite.md. CREATE INDEX reads the table once; run it with `jobchain
-- migrate` before the workers start, as every migration.

-- Blocked jobs by type (a job is created blocked and leaves when its blockers finish).
CREATE INDEX {p}job_blocked_type_idx ON {p}job (type_name) WHERE status = 'blocked';

-- Completed jobs by type and completion time: the count, the recent windows, the duration
-- sample (most recent first) and the completed throughput buckets.
CREATE INDEX {p}job_completed_type_idx ON {p}job (type_name, completed_at) WHERE status = 'completed';

-- Failed jobs by type and the error_type of their last recorded error (NULL: none), in that
-- order, so the count by error type is read from the index in order, without the table (the
-- expression is the one jobs_list matches error_types with). Recent failures come from
-- job_failed_idx (failed_at) instead.
CREATE INDEX {p}job_failed_type_idx ON {p}job (type_name, json_extract(attempt_errors, '$[#-1].error_type'))
    WHERE status = 'failed';

-- Cancelled jobs by type and cancellation time: the count and the recent windows.
CREATE INDEX {p}job_cancelled_type_idx ON {p}job (type_name, cancelled_at) WHERE status = 'cancelled';
