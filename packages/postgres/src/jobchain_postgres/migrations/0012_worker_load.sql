-- 0012_worker_load: what a worker holds, labelled (issue 36, deliver 3). Same names as SQLite's
-- 0010_worker_load.
--
-- Three columns added to the worker registry beside inflight (the jobs a worker runs or
-- buffers): buffered, how many of those wait in its prefetch buffer; committing, attempts whose
-- commit is being written; and capacity, the most it runs or buffers at once (its slots' jobs
-- plus prefetch). Constant defaults are stored in the catalog, so the table is not rewritten
-- (the ACCESS EXCLUSIVE lock is held for a moment only); existing rows, written by older
-- workers, read 0 for each: not reported.
ALTER TABLE {worker}
    ADD COLUMN buffered integer NOT NULL DEFAULT 0,
    ADD COLUMN committing integer NOT NULL DEFAULT 0,
    ADD COLUMN capacity integer NOT NULL DEFAULT 0;
