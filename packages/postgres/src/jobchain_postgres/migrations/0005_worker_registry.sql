-- 0005_worker_registry: the worker registry (one row per worker process, upserted by its
-- heartbeat, sql/worker_heartbeat.sql) and the rescue record on each job.
-- The three job columns are nullable without a default: a catalog change only, no table rewrite,
-- and the ACCESS EXCLUSIVE lock is held for milliseconds even on a table of millions of jobs.
-- Jobs from before this migration read back with no rescue recorded.
ALTER TABLE {job}
    ADD COLUMN rescued_at    timestamptz,
    ADD COLUMN rescued_from  text,
    ADD COLUMN rescue_reason text;

-- state is text with a CHECK rather than an enum: a new state is one constraint swap, never an
-- ALTER TYPE that cannot run inside a transaction block on older servers.
-- Every heartbeat updates alive_until (indexed), so updates are not HOT: fillfactor 50 and
-- unthrottled autovacuum keep the table and its index small.
CREATE TABLE {worker} (
    id           text PRIMARY KEY,
    name         text NOT NULL,
    host         text NOT NULL,
    pid          integer NOT NULL,
    version      text NOT NULL,
    type_names   text[] NOT NULL,
    concurrency  integer NOT NULL,
    inflight     integer NOT NULL,
    state        text NOT NULL CHECK (state IN ('running', 'draining', 'stopped', 'dead')),
    started_at   timestamptz NOT NULL,
    last_seen_at timestamptz NOT NULL,
    alive_until  timestamptz NOT NULL
) WITH (fillfactor = 50, autovacuum_vacuum_cost_delay = 0);

-- worker_heartbeat's dead scan: workers that still claim to be alive, by when they stop being so.
CREATE INDEX {worker_alive_idx} ON {worker} (alive_until)
    WHERE state IN ('running', 'draining');
