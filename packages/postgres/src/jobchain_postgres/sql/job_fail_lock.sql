-- job_fail_lock: wait for and take the row lock of the job job_fail is about to decide (sent in one
-- pipeline just before it). A transaction inserting a job blocked by this chain holds the row FOR
-- KEY SHARE until it commits: waiting for it here lets the propagation that follows see that job
-- and fail it. An atomic attempt's hold (job_hold) is no row lock, so it is never waited for.
SELECT j.id FROM {job} AS j WHERE j.id = %(job_id)s FOR UPDATE
