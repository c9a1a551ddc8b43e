-- vacuum: reclaim dead tuples of both job tables now and refresh planner statistics.
-- Runs outside a transaction block (VACUUM refuses to run inside one); never blocks readers/writers.
VACUUM (ANALYZE) {job}, {job_blocker}
