-- 0009_worker_incarnation: fenced heartbeats (issue 35, deliver 3). Same names as
-- PostgreSQL's 0011_worker_incarnation.
--
-- One column added to the worker registry: the incarnation of the worker's life the row
-- records. Existing rows read 0, the incarnation of a heartbeat that names none, so they keep
-- working as before. A heartbeat of a lower incarnation, or of a dead row's incarnation,
-- changes nothing (see worker_heartbeat).
ALTER TABLE {p}worker ADD COLUMN incarnation INTEGER NOT NULL DEFAULT 0;
