-- vacuum: reclaim dead tuples of the job tables (and deduplication locks) now and refresh planner statistics.
-- Runs outside a transaction block (VACUUM refuses to run inside one); never blocks readers/writers.
VACUUM (ANALYZE) {job}, {job_blocker}, {deduplication_lock}
