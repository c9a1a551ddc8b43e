-- 0011_worker_incarnation: fenced heartbeats (issue 35, deliver 3). Same names as SQLite's
-- 0009_worker_incarnation.
--
-- One column added to the worker registry: the incarnation of the worker's life the row
-- records. A constant default is stored in the catalog, so the table is not rewritten (the
-- ACCESS EXCLUSIVE lock is held for a moment only); existing rows read 0, the incarnation of a
-- heartbeat that names none, so they keep working as before. A heartbeat of a lower
-- incarnation, or of a dead row's incarnation, changes nothing (see sql/worker_heartbeat.sql).
ALTER TABLE {worker} ADD COLUMN incarnation bigint NOT NULL DEFAULT 0;
