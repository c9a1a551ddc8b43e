-- jobs_lock: lock the rows of the jobs a completion is about to decide, skipping rows another
-- transaction holds, and record which ones this transaction got in the transaction-local setting
-- jobchain.locked. Sent in one pipeline (one round trip, one transaction) just before
-- job_complete or jobs_complete, which decide only rows named there: their snapshot is then
-- taken after these locks, so a job created blocked by one of these chains either committed
-- before it (and is seen and released) or waits for this transaction (and then sees the
-- completion). Locking inside the completing statement itself would come after its snapshot,
-- and a dependent committed in between would be missed and stay blocked.
SELECT set_config('jobchain.locked', COALESCE(string_agg(l.id::text, ','), ''), true)
FROM (
    SELECT j.id FROM {job} AS j WHERE j.id = ANY (%(job_ids)s::uuid[]) FOR UPDATE SKIP LOCKED
) AS l
