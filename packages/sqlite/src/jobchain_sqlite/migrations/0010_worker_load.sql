-- 0010_worker_load: what a worker holds, labelled (issue 36, deliver 3). Same names as
-- PostgreSQL's 0012_worker_load.
--
-- Three columns added to the worker registry beside inflight (the jobs a worker runs or
-- buffers): buffered, how many of those wait in its prefetch buffer; committing, attempts
-- whose commit is being written; and capacity, the most it runs or buffers at once (its
-- slots' jobs plus prefetch). Existing rows, written by older workers, read 0 for each: not
-- reported.
ALTER TABLE {p}worker ADD COLUMN buffered INTEGER NOT NULL DEFAULT 0;
ALTER TABLE {p}worker ADD COLUMN committing INTEGER NOT NULL DEFAULT 0;
ALTER TABLE {p}worker ADD COLUMN capacity INTEGER NOT NULL DEFAULT 0;
